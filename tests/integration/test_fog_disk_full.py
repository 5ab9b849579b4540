"""Disk trouble is a state, not a crash: the fog's journal sits on a small
tmpfs that is then filled to the last byte, under a running fog with a real
Mosquitto. The fog stops acknowledging, stays up, says so on its metric,
resumes when space comes back, and loses no report."""

import errno
import json
import os
import subprocess
import time

import paho.mqtt.client as mqtt
import pytest

from fog_shuffler.config import FogConfig
from rase_common.protocol.window import WindowMessage
from fog_shuffler.service import FogService
from rase_common.clock import ManualClock
from tests.mqtt_helpers import Recorder, ServiceThread

pytestmark = pytest.mark.integration
DEVICES = [f"d{i:02d}" for i in range(12)]


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs (needs root, as `make test` runs here)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(disk) -> None:
    """Write a ballast file until the file system says it is full."""
    fd = os.open(disk / "ballast", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 16, 1 << 10, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as err:
                assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_journal_on_a_full_disk_holds_reports_then_resumes_and_loses_none(mosquitto, small_disk):
    clock = ManualClock(5 * 8.0 + 1)   # logical t = 5
    cfg = FogConfig.load(None, name="diskfull", regions={"r1": {"devices": DEVICES}}, period_s=8.0, k_min=10,
                         device_mechanism="br",
                         lateness_periods=20, journal_path=small_disk / "fog.sqlite",
                         broker={"port": mosquitto.port})
    service = FogService(cfg, clock=clock)
    rec = Recorder(mosquitto.port, ["rase/v1/windows/#"], persistent=False)
    fog = ServiceThread(service)
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    pub.connect("127.0.0.1", mosquitto.port)
    pub.loop_start()

    def send(t: int) -> None:
        clock.set(t * 8.0 + 1)
        infos = [pub.publish(f"rase/v1/reports/r1/{d}", json.dumps(
            {"v": 1, "t": t, "y": float(100 * t + i), "eps": 1.0, "seq": t}), qos=1) for i, d in enumerate(DEVICES)]
        for info in infos:
            info.wait_for_publish(10)

    try:
        deadline = time.monotonic() + 10
        while not service.subscribed and time.monotonic() < deadline:
            time.sleep(0.02)
        send(5)
        assert rec.wait_for(lambda: len(rec.messages) == 1)       # all 12 reported: t = 5 closes early
        fill(small_disk)                                        # the disk is full
        for t in (6, 7, 8):
            send(t)
        assert rec.wait_for(lambda: service.metrics.registry.get_sample_value("rase_fog_storage_ok") == 0)
        time.sleep(1.0)
        assert fog.thread.is_alive() and len(rec.messages) == 1   # nothing forwarded, nothing lost, still up
        assert service.metrics.value("reports_accepted") == 12     # held reports are not counted yet
        (small_disk / "ballast").unlink()                       # space comes back
        assert rec.wait_for(lambda: len(rec.messages) == 4, timeout_s=60)
        assert service.metrics.registry.get_sample_value("rase_fog_storage_ok") == 1
    finally:
        pub.disconnect()
        pub.loop_stop()
        fog.stop()
        rec.close()
    windows = sorted((WindowMessage.model_validate_json(m.payload) for m in rec.messages), key=lambda w: w.t)
    assert [w.t for w in windows] == [5, 6, 7, 8]
    for w in windows:   # every report, exactly once
        assert sorted(w.values) == [float(100 * w.t + i) for i in range(12)]
    assert service.metrics.value("reports_accepted") == 48
