"""Crash safety of the secure-aggregation exchange (issue 20): `rase fog`
(the leader) and `rase fusion` (the helper) as real processes on a real
Mosquitto, each SIGKILLed at every step of the exchange:

  fog:    after journaling reports (before the broker's ack), after forwarding
          the batch, after journaling the helper's verifier shares, after
          sending its aggregate share;
  fusion: after storing the batch (before the ack), after sending its verifier
          shares, after storing the leader's share, after storing the
          aggregate (before publishing it).

The kill is a real SIGKILL the process sends itself at that step
(rase_common.failpoints, enabled by RASE_CRASH_AT only). One window goes
through the fog's four kills, each restart armed with the next step (so
every kill but the first strikes during a recovery), another through the
fusion center's four. Each window's aggregate is then published with all its
reports, exactly once in the total (noise is off through the test-only
setting, so the total is exact), and a timestamp never gets two different
aggregates. The same with two workers per party (issue 30): two leader
workers, each with its part of the devices, and the fusion center on two
verifying processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.secagg_support import AckedPublisher, Deployment, wait, window_reports
from tests.mqtt_helpers import Recorder

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
STEPS = {"fog": ["leader_after_journal", "leader_after_forward", "leader_after_verify", "leader_after_share"],
         "fusion": ["helper_after_journal", "helper_after_verify", "helper_after_share", "helper_after_aggregate"]}
READY_LINE = {"fog": "fog subscribed", "fusion": "fusion subscribed"}


class Party:
    """`rase fog` or `rase fusion` as a process, restartable, with an optional crash point."""

    def __init__(self, who: str, config: Path, log: Path):
        self.who, self.config, self.log = who, config, log
        self.proc: subprocess.Popen | None = None
        self.watched: list[Path] = [log]      # logs whose growth says the exchange is moving

    def start(self, crash_at: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k != "RASE_CRASH_AT"}
        if crash_at:
            env["RASE_CRASH_AT"] = crash_at
        seen = self.log.read_text().count(READY_LINE[self.who]) if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "rase.cli", "--log-level", "INFO", self.who,
                                          "--config", str(self.config)], stdout=out, stderr=subprocess.STDOUT,
                                         cwd=ROOT, env=env)
        assert wait(lambda: self.log.read_text().count(READY_LINE[self.who]) > seen or self.proc.poll() is not None,
                    60), f"{self.who} did not start:\n{self.log.read_text()[-3000:]}"
        # Alive, or already dead at its crash point: work queued for it at the broker (the helper's
        # answer, say) can reach that point right after the restart, before this line looks.
        assert self.proc.poll() is None or (crash_at and self.proc.returncode == -signal.SIGKILL), \
            self.log.read_text()[-3000:]

    def killed(self, stall_s: float = 30, cap_s: float = 300) -> bool:
        """Whether it died by its SIGKILL. The deadline follows measured progress: the wait goes on while
        either party's log grows (a loaded machine gets there later), and ends after stall_s of silence."""
        start = last_change = time.monotonic()
        sizes = None
        while self.proc.poll() is None and time.monotonic() - last_change < stall_s \
                and time.monotonic() - start < cap_s:
            now = tuple(p.stat().st_size if p.exists() else 0 for p in self.watched)
            if now != sizes:
                sizes, last_change = now, time.monotonic()
            time.sleep(0.05)
        return self.proc.poll() is not None and self.proc.returncode == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sigkill_at_every_step_of_the_exchange_loses_no_report_and_counts_none_twice(own_mosquitto, tmp_path,
                                                                                       workers):
    """workers 2 (issue 30): two workers per party, the region's devices
    partitioned over two `rase fog` leader workers (both killed at each of
    their steps) and the fusion center verifying on two worker processes."""
    dep = Deployment(tmp_path)
    port = own_mosquitto.port
    if workers == 1:
        fogs = [Party("fog", dep.toml(dep.fog_settings(port), tmp_path / "fog.toml"), tmp_path / "fog.log")]
    else:
        fogs = [Party("fog", dep.toml(dep.fog_settings(port, part=k, parts=workers), tmp_path / f"fog{k}.toml"),
                      tmp_path / f"fog{k}.log") for k in range(workers)]
    parties = {"fog": fogs, "fusion": [Party("fusion", dep.toml(dep.fusion_settings(port, leader_parts=workers),
                                                                tmp_path / "fusion.toml"), tmp_path / "fusion.log")]}
    everyone = [p for group in parties.values() for p in group]
    for party in everyone:
        party.watched = [p.log for p in everyone]
    rec = Recorder(port, ["rase/v1/aggregates/t/#"], client_id="sa-crash-rec")
    pub = AckedPublisher(port, "sa-crash-pub")
    cores = dep.cores()
    expected: dict[int, int] = {}

    def logs() -> str:
        return "\n".join(f"{p.log.name}:\n{p.log.read_text()[-2500:]}" for p in everyone if p.log.exists())
    try:
        for party in parties["fusion"]:
            party.start()
        for k, (who, steps) in enumerate(STEPS.items()):
            for other in parties["fusion" if who == "fog" else "fog"]:
                if other.proc is None or other.proc.poll() is not None:
                    other.start()
            for party in parties[who]:
                party.stop()
                party.start(crash_at=steps[0])
            now = time.time()
            t = int(now // dep.period_s)
            readings = [float(1000 * k + 7 * i) for i in range(len(cores))]
            for topic, payload in window_reports(dep, cores, readings, now):
                pub.send(topic, payload)
            expected[t] = sum(int(x) for x in readings)
            def published() -> bool:
                return any(m.topic.endswith(f"/{t}") for m in rec.messages)
            for step, then in zip(steps, steps[1:] + [None]):
                # A party's steps can overtake its crash point: the helper takes the leader's share in the
                # loop turn before it marks its answer sent (helper_after_verify), and then never reaches
                # helper_after_share. Then the exchange is over and published: what is checked below.
                for party in parties[who]:
                    if not party.killed():
                        assert published(), f"{step}: {party.log.name} was not killed:\n{logs()}"
                        party.stop()
                for party in parties[who]:
                    party.start(crash_at=then)
            assert rec.wait_for(lambda: any(m.topic.endswith(f"/{t}") for m in rec.messages), 60), (
                f"{who}: no aggregate for t={t}\n{logs()}")
    finally:
        pub.close()
        for party in everyone:
            party.stop()
        rec.close()
    by_t: dict[int, set[str]] = {}
    for m in rec.messages:
        by_t.setdefault(int(m.topic.rsplit("/", 1)[1]), set()).add(m.payload.decode())
    assert set(by_t) == set(expected)
    for t, payloads in by_t.items():
        assert len(payloads) == 1, f"t={t} was published with different contents"   # republished at most, same bytes
        agg = json.loads(payloads.pop())
        assert (agg["n"], agg["prio3"]["total"], agg["prio3"]["received"]) == (len(cores), expected[t], len(cores))
        if workers > 1:      # each part's two views, one aggregate of the region
            assert agg["regions"] == ["r1"] and set(agg["prio3"]["regions"]) == {f"r1/{k}" for k in range(workers)}
