"""docs/deployment.md's set-up steps, run as written, then the shipped
Mosquitto configuration with what they made, against a real Mosquitto:
both regions' devices publish over TLS, each fog reads only its regions and
writes only its regions' windows, client ids are bound to users (no session
takeover), the healthcheck works, and a 100 MB publish is refused."""

from __future__ import annotations

import os
import re
import socket
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.shipped import ROOT, ShippedMosquitto, TlsClient, compose, run_deployment_steps

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Path:
    return run_deployment_steps(tmp_path_factory.mktemp("deploy"))


@pytest.fixture(scope="module")
def broker(deployment, tmp_path_factory, request):
    b = ShippedMosquitto(deployment, tmp_path_factory.mktemp("shipped-mosquitto")).start()
    yield b
    b.stop()


def settle(seconds: float = 0.5) -> None:
    time.sleep(seconds)


def test_the_steps_make_one_acl_for_both_fogs(deployment):
    acl = (deployment / "configs/compose/mosquitto.acl").read_text()
    users = re.findall(r"^user (\S+)$", acl, re.M)
    assert {"health", "fog-r1", "fog-r2", "fusion-main", "dashboard"} <= set(users)
    # Houses 1, 2, 3 in r1 and 5, 12 in r2: 45 devices, none lost to the last --fog-config.
    devices = [u for u in users if re.fullmatch(r"h\d+a\d", u)]
    assert len(devices) == 45
    for user in users:
        assert (deployment / "secrets/passwords" / user).stat().st_size > 0
    assert (deployment / "secrets" / "mosquitto_passwd").read_text().count("\n") == len(users)


def test_both_regions_devices_publish_and_each_fog_reads_only_its_regions(broker):
    fog1, fog2 = TlsClient(broker, "fog-r1"), TlsClient(broker, "fog-r2")
    dev1, dev2 = TlsClient(broker, "h1a1"), TlsClient(broker, "h12a1")
    try:
        assert all(c.connected for c in (fog1, fog2, dev1, dev2))
        fog1.sub("rase/v1/reports/#")         # asks for every region; gets only what its user may read
        fog2.sub("rase/v1/reports/#")
        dev1.pub("rase/v1/reports/r1/h1a1")
        dev2.pub("rase/v1/reports/r2/h12a1")
        settle()
        assert fog1.topics() == ["rase/v1/reports/r1/h1a1"]
        assert fog2.topics() == ["rase/v1/reports/r2/h12a1"]
    finally:
        for c in (fog1, fog2, dev1, dev2):
            c.close()


def test_a_device_cannot_report_in_another_region_or_as_another_device(broker):
    fog1, fog2 = TlsClient(broker, "fog-r1"), TlsClient(broker, "fog-r2")
    try:
        fog1.sub("rase/v1/reports/#")
        fog2.sub("rase/v1/reports/#")
        for topic in ("rase/v1/reports/r2/h1a1", "rase/v1/reports/r1/h1a2"):
            dev = TlsClient(broker, "h1a1")       # a fresh connection per denied publish (Mosquitto 2.0.11
            dev.c.publish(topic, b"{}", qos=1)     # answers it with a v5-style PUBACK that paho drops on)
            settle(0.3)
            dev.close()
        settle()
        assert fog1.got == [] and fog2.got == []
    finally:
        fog1.close()
        fog2.close()


def test_a_fog_writes_only_its_own_regions_windows(broker):
    fusion = TlsClient(broker, "fusion-main")
    try:
        fusion.sub("rase/v1/windows/+")
        fog1 = TlsClient(broker, "fog-r1")
        fog1.pub("rase/v1/windows/r1", b'{"own": true}')
        fog1.close()
        forger = TlsClient(broker, "fog-r1")
        forger.c.publish("rase/v1/windows/r2", b'{"forged": true}', qos=1)
        forger.c.publish("rase/v1/windows/zz", b'{"forged": true}', qos=1)
        settle()
        forger.close()
        settle()
        assert fusion.topics() == ["rase/v1/windows/r1"]
    finally:
        fusion.close()


@pytest.mark.parametrize("victim", ["fog-r1", "fusion-main"])
def test_a_device_using_a_services_client_id_gets_its_own_session_not_the_services(broker, victim):
    """use_username_as_clientid: the device's client id becomes its user name,
    so the service is not disconnected, and what is queued for the service's
    persistent session while it is away is neither handed to the device nor
    dropped: the service gets all of it when it comes back."""
    topic = "rase/v1/windows/r1" if victim == "fusion-main" else "rase/v1/reports/r1/h1a1"
    service = TlsClient(broker, victim, client_id=victim, persistent=True)
    service.sub(topic)
    intruder = TlsClient(broker, "h1a2", client_id=victim, persistent=True)
    try:
        assert intruder.connected
        settle()
        assert service.c.is_connected() and service.disconnects == 0
        service.close()                               # the service away: its session queues
        writer = TlsClient(broker, "fog-r1" if victim == "fusion-main" else "h1a1")
        for i in range(5):
            writer.pub(topic, b'{"i": %d}' % i)
        writer.close()
        hijack = TlsClient(broker, "h1a3", client_id=victim, persistent=True)
        hijack.sub("#")
        settle()
        hijack.close()
        assert hijack.got == []
        back = TlsClient(broker, victim, client_id=victim, persistent=True)
        deadline = time.monotonic() + 5
        while len(back.got) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        back.close()
        assert [m.payload for m in back.got] == [b'{"i": %d}' % i for i in range(5)]
    finally:
        intruder.close()
        service.close()


def test_a_100_MB_publish_is_refused_and_not_retained(broker):
    """max_packet_size: the broker drops the connection from the packet's
    length header, before it reads or allocates the payload; nothing is
    delivered or retained, and the device's next normal message goes through."""
    topic = "rase/v1/reports/r1/h1a1"          # the device's own topic, which fog-r1 reads
    fog = TlsClient(broker, "fog-r1")
    fog.sub(topic)
    big = TlsClient(broker, "h1a1")
    try:
        big.c.publish(topic, b"x" * (100 * 1024 * 1024), qos=1, retain=True)
        deadline = time.monotonic() + 30
        while big.disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert big.disconnects >= 1, "the broker did not drop the oversized packet's connection"
    finally:
        big.c.loop_stop()
    settle()
    late = TlsClient(broker, "fog-r1")
    late.sub(topic)                               # a retained message would arrive now
    settle()
    try:
        assert fog.got == [] and late.got == []
        status = Path(f"/proc/{broker.proc.pid}/status").read_text()
        peak_kb = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))
        assert peak_kb < 50 * 1024, f"the broker's memory peaked at {peak_kb} kB: it read the 100 MB packet"
        ok = TlsClient(broker, "h1a1")
        ok.pub(topic, b'{"normal": true}')
        ok.close()
        settle()
        assert [m.payload for m in late.got] == [b'{"normal": true}']
    finally:
        fog.close()
        late.close()


def test_the_compose_healthcheck_command_passes_on_the_loopback_listener(broker, deployment):
    cmd = compose()["services"]["mosquitto"]["healthcheck"]["test"][1]
    cmd = cmd.replace("$$", "$").replace("-p 1883", f"-p {broker.local_port}")
    cmd = cmd.replace("/run/secrets/password-health", str(broker.password_file("health")))
    proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr
    # Another user with the health password is refused: the check needs the health user's own.
    bad = subprocess.run(["sh", "-c", cmd.replace("-u health", "-u h1a1")], capture_output=True, timeout=20)
    assert bad.returncode != 0


def _idle_connections(port: int, n: int) -> list[socket.socket]:
    """TCP connections that never send CONNECT (nor a TLS ClientHello)."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.settimeout(0.05)
        out.append(s)
    return out


def _closed_by_broker(socks: list[socket.socket], wait_s: float) -> int:
    deadline = time.monotonic() + wait_s
    closed: set[int] = set()
    while time.monotonic() < deadline:
        for i, s in enumerate(socks):
            if i in closed:
                continue
            try:
                if s.recv(1) == b"":
                    closed.add(i)
            except TimeoutError:
                pass
            except OSError:
                closed.add(i)
    return len(closed)


def test_connections_that_never_send_connect_are_bounded_per_listener(deployment, tmp_path):
    """Issue 29, item 6: Mosquitto 2.0 keeps a connection that never sends CONNECT open for good, so the
    shipped config bounds each listener's connections (max_connections); past the bound the broker closes
    a new connection at once. The shipped file as it is, with the TLS listener's bound scaled down
    (10,000 sockets do not fit a test process's open-file limit) and its ports adjusted."""
    conf = (ROOT / "configs/mosquitto/mosquitto.conf").read_text()
    bounds = [int(m) for m in re.findall(r"^max_connections (\d+)$", conf, re.M)]
    assert len(bounds) == 2 and all(0 < b <= 10_000 for b in bounds)
    nofile = compose()["services"]["mosquitto"]["ulimits"]["nofile"]
    assert nofile["soft"] > sum(bounds) + 100      # the broker, not the kernel, says no
    b = ShippedMosquitto(deployment, tmp_path / "mq")
    b.conf_path.write_text(b.conf_path.read_text().replace("max_connections 10000\n", "max_connections 40\n", 1))
    b.start()
    try:
        first = _idle_connections(b.tls_port, 40)
        assert _closed_by_broker(first, 2.0) == 0                      # within the bound: kept (no timeout)
        extra = _idle_connections(b.tls_port, 10)
        # Past it: closed at once (Mosquitto 2.0.11 may let one more through, as on the loopback listener
        # below: seen in CI, 9 of 10 closed).
        assert 9 <= _closed_by_broker(extra, 3.0) <= 10
        assert _closed_by_broker(first, 0.5) == 0
        local = _idle_connections(b.local_port, bounds[1] + 5)         # the loopback listener's own bound
        # Bounded too (Mosquitto 2.0.11 lets one more through on this listener than its limit says:
        # measured, 65 of 69 kept for a bound of 64).
        closed_local = _closed_by_broker(local, 3.0)
        assert 4 <= closed_local <= 5, closed_local
        for s in first + extra + local:
            s.close()
        time.sleep(0.5)
        c = TlsClient(b, "dashboard")                                  # room again for a real client
        assert c.connected
        c.close()
    finally:
        b.stop()
BROKER_MARKER = "<!-- tested: the broker without Docker -->"


def broker_block() -> str:
    from tests.integration.shipped import ROOT

    after = (ROOT / "docs/deployment.md").read_text().split(BROKER_MARKER, 1)[1]
    return re.search(r"```sh\n(.*?)```", after, re.S).group(1)


@pytest.mark.skipif(os.geteuid() != 0, reason="starts Mosquitto as root, as `sudo mosquitto` does, to see it drop to "
                                              "user mosquitto")
def test_the_broker_without_docker_reads_its_files_as_user_mosquitto(tmp_path_factory):
    """docs/deployment.md's block for Mosquitto without Docker, run as root
    (with a `sudo` that runs its command as it is, as root's would): only the
    folder `broker` names (one of this test's, reachable by user mosquitto)
    and the shipped file's listener ports (free loopback ones) differ. Mosquitto
    runs as user mosquitto, which could not enter secrets/, and still admits a
    fog and a device over TLS with their passwords; pointed straight at
    secrets/, the same broker stops, as the docs say."""
    import pwd
    import signal
    import tempfile

    from simulators.brokers import free_port, mosquitto_binary, wait_port

    deploy = run_deployment_steps(tmp_path_factory.mktemp("deploy-host"))
    tls_port, local_port = free_port(), free_port()
    conf = deploy / "configs/mosquitto/mosquitto.conf"
    conf.write_text(conf.read_text().replace("listener 8883\n", f"listener {tls_port} 127.0.0.1\n")
                    .replace("listener 1883 127.0.0.1\n", f"listener {local_port} 127.0.0.1\n"))
    base = Path(tempfile.mkdtemp(prefix="rase-broker-"))   # /tmp/pytest-of-root is 700: not reachable
    base.chmod(0o755)
    shim = deploy / "bin"
    shim.mkdir()
    (shim / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (shim / "sudo").chmod(0o755)
    block = broker_block()
    assert block.startswith("broker=/etc/mosquitto/rase")
    block = block.replace("broker=/etc/mosquitto/rase", f"broker={base}/rase", 1)
    env = {"PATH": f"{shim}:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(deploy)}
    log = open(deploy / "broker-block.log", "w")
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block], cwd=deploy, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    broker = None
    try:
        assert wait_port(tls_port, 15, proc) and wait_port(local_port, 5, proc), \
            (deploy / "broker-block.log").read_text()
        (pid,) = [int(p) for p in subprocess.run(["pgrep", "-g", str(proc.pid), "-x", "mosquitto"],
                                                 capture_output=True, text=True).stdout.split()]
        uid = int(re.search(r"^Uid:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M).group(1))
        assert uid == pwd.getpwnam("mosquitto").pw_uid
        # The users of the ACL, as any client of the deployment reaches them.
        broker = type("HostBroker", (), {"tls_port": tls_port, "ca_file": deploy / "secrets/ca.crt",
                                         "password": lambda self, u: (deploy / "secrets/passwords" / u)
                                         .read_text().strip()})()
        fog = TlsClient(broker, "fog-r1", "fog-r1")
        device = TlsClient(broker, "h1a1", "h1a1")
        try:
            assert fog.connected and device.connected
            fog.sub("rase/v1/reports/r1/+")
            device.pub("rase/v1/reports/r1/h1a1", b'{"v":1}')
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not fog.got:
                time.sleep(0.05)
            assert fog.topics() == ["rase/v1/reports/r1/h1a1"]
        finally:
            fog.close()
            device.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    # The same configuration with the paths straight into secrets/: user mosquitto cannot open them.
    try:
        naive = (base / "rase/mosquitto.conf").read_text() \
            .replace(f"{base}/rase/mqtt-server", str(deploy / "secrets/mqtt-server")) \
            .replace(f"{base}/rase/mosquitto_passwd", str(deploy / "secrets/mosquitto_passwd"))
        (base / "naive.conf").write_text(naive)
        out = subprocess.run([mosquitto_binary(), "-c", str(base / "naive.conf")], capture_output=True, text=True,
                             timeout=15)
        assert out.returncode != 0 and "Unable to open pwfile" in out.stdout + out.stderr
    finally:
        shutil.rmtree(base)        # the broker's copies of the key and passwords
