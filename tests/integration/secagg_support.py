"""What the secure-aggregation integration tests share: a deployment's keys and
configs, devices that are real device cores (rase_device.core.AgentCore with
its pure-Python Prio3 client and HPKE), a forged report, and a publisher that
records which reports the broker acknowledged."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as mqtt

from rase_device.core import AgentCore
from rase_device.ledger import BudgetLedger
from rase_device.policy import LocalPolicy
from rase_device.prio3_report import helper_share_info
from rase_device.randomizer import Calibration
from rase_device.secagg import encode_report
from rase_device import hpke
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import Prio3Params
from rase_common.secagg import write_keys

BANDS = [10.0, 100.0, 1000.0]


@dataclass
class Deployment:
    work: Path
    kind: str = "sum"
    period_s: float = 1.0
    devices: list[str] = field(default_factory=lambda: [f"sa-dev-{i:02d}" for i in range(12)])   # "-": not base64
    region: str = "r1"
    k_min: int = 5
    noise: bool = False
    dp_eps: float = 1.0
    x_max: float = 4000.0
    keys: dict = field(default_factory=dict)

    def __post_init__(self):
        self.work.mkdir(parents=True, exist_ok=True)
        self.keys = self.keys or write_keys(self.work / "keys")

    @property
    def params(self) -> Prio3Params:
        return Prio3Params.for_deployment(self.kind, key_id=self.keys["key_id"], dp_eps=self.dp_eps,
                                          grid_steps=int(self.x_max), bands=BANDS)

    @property
    def control(self) -> ControlMessage:
        return ControlMessage(mechanism="prio3", eps_levels=[self.dp_eps], period_s=self.period_s, x_max=self.x_max,
                              bands=BANDS, prio3=self.params)

    def fog_settings(self, port: int, part: int | None = None, parts: int = 1, **extra) -> dict:
        """A fog's settings; part/parts: leader worker `part` of `parts` (issue 30), with every parts-th
        device from the part-th, the leader workers' parts key and two verification workers."""
        prio3 = {"verify_key_file": self.keys["verify_key_file"], "params": self.params.model_dump(),
                 "unsafe_no_noise_for_tests": not self.noise, "verify_timeout_s": 5.0}
        devices, name, journal = self.devices, "sa-fog", "fog.sqlite"
        if part is not None:
            prio3 |= {"part": part, "parts": parts, "parts_key_file": str(self.parts_key()), "verify_workers": 2,
                      "workers_min_reports": 1}
            devices, name, journal = self.devices[part::parts], f"sa-fog{part}", f"fog{part}.sqlite"
        return dict(name=name, regions={self.region: {"devices": devices}}, period_s=self.period_s,
                    k_min=self.k_min, lateness_periods=50, device_mechanism="prio3", x_max=self.x_max, bands=BANDS,
                    eps_levels=[self.dp_eps],
                    journal_path=str(self.work / journal), broker={"port": port}, tick_s=0.02,
                    prio3=prio3, **extra)

    def parts_key(self) -> Path:
        """The leader workers' shared mask key (issue 30), written once."""
        path = self.work / "keys" / "parts.key"
        if not path.exists():
            path.write_text(os.urandom(32).hex())
        return path

    def fusion_settings(self, port: int, leader_parts: int = 1, **extra) -> dict:
        prio3 = {"private_key_file": self.keys["private_key_file"], "key_id": self.keys["key_id"],
                 "verify_key_file": self.keys["verify_key_file"], "k_min": self.k_min,
                 "unsafe_no_noise_for_tests": not self.noise, "decrypt_workers": 1}
        if leader_parts > 1:      # two workers per party: the leader's parts, the helper's verifying processes
            prio3 |= {"leader_parts": leader_parts, "decrypt_workers": 2, "workers_min_reports": 1}
        return dict(name="sa-fusion", regions=[self.region], store_path=str(self.work / "fusion.sqlite"),
                    broker={"port": port}, precision=self.control.model_dump(), tick_s=0.02, windows_w=[4],
                    prio3=prio3, **extra)

    def toml(self, settings: dict, path: Path) -> Path:
        """A TOML config file for `rase fog` / `rase fusion`."""
        path.write_text(_toml(settings))
        return path

    def cores(self) -> list[AgentCore]:
        """One device core per device, with the helper key pinned, calibrated by the control message."""
        policy = {"prio3_key_id": self.keys["key_id"], "prio3_public_key": self.keys["public_key"]}
        out = []
        for d in self.devices:
            core = AgentCore(device=d, region=self.region, eps=self.dp_eps, mechanism="prio3",
                             ledger=BudgetLedger(str(self.work / f"ledger-{d}.json"), 1e9, 86400),
                             calibration=Calibration(x_max=self.x_max), period_s=self.period_s,
                             policy=LocalPolicy.from_dict(policy, self.period_s))
            core.apply_control(self.control.model_dump_json())
            out.append(core)
        return out

    def measurement(self, x: float) -> int:
        if self.kind == "sum":
            return min(int(self.x_max), max(0, int(x + 0.5)))
        if self.kind == "count":
            return int(x > 10.0)
        return sum(1 for b in BANDS if x > b)


def forged_report(dep: Deployment, t: int, seq: int = 1) -> str:
    """A registered device's report of an out-of-range measurement (not a valid
    encoding: a 2 where the circuit wants bits) with the proof an honest prover
    computes for it: well-formed, sealed to the right key, and false."""
    vdaf = dep.params.vdaf()
    ctx = dep.params.ctx(dep.region, t)
    meas = [2] + [0] * (vdaf.MEAS_LEN - 1)
    nonce = os.urandom(16)
    public, shares = vdaf.shard_encoded(ctx, meas, nonce, os.urandom(vdaf.RAND_SIZE))
    sealed = hpke.seal(bytes.fromhex(dep.keys["public_key"]), helper_share_info(ctx, nonce, public), b"", shares[1],
                       os.urandom)
    return encode_report(t, dep.dp_eps, seq, (nonce, public, shares[0], sealed), dep.params.params_id)


class AckedPublisher:
    """Publishes at QoS 1 and records what the broker acknowledged."""

    def __init__(self, port: int, client_id: str = "sa-pub"):
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311)
        self.c.connect("127.0.0.1", port)
        self.c.loop_start()

    def send(self, topic: str, payload: str | bytes, retain: bool = False) -> None:
        self.c.publish(topic, payload, qos=1, retain=retain).wait_for_publish(10)

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def window_reports(dep: Deployment, cores: list[AgentCore], readings: list[float], now: float) -> list[tuple]:
    """(topic, payload) of every device's report for the window at `now`."""
    out = []
    for core, x in zip(cores, readings):
        assert core.step(x, now) is not None, core.status
        out.append(core.outbox.pop()[:2])
    return out


def wait(pred, timeout_s: float = 30.0, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every_s)
    return pred()


def _toml(d: dict, prefix: str = "") -> str:
    """A small TOML writer for the configs above (tables, strings, numbers, lists, booleans)."""
    scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in d.items() if isinstance(v, dict)}
    lines = [f"{k} = {json.dumps(v)}" for k, v in scalars.items() if v is not None]
    out = "\n".join(lines) + "\n"
    for k, v in tables.items():
        name = f"{prefix}.{k}" if prefix else k
        out += f"\n[{name}]\n" + _toml(v, name)
    return out
