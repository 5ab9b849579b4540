"""README's "Your first aggregate", run as written: the marked shell block,
in a fresh copy of configs/ with the `rase` command on PATH, against a real
Mosquitto. Only what a second machine would differ in is set from outside:
the broker's port (RASE_..._BROKER__PORT for the services, mosquitto_sub's
own config file for the client) and the metrics ports, free ones here."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rase_common.protocol.aggregate import Aggregate
from simulators.brokers import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- tested: the walkthrough -->"


def walkthrough() -> str:
    after = (ROOT / "README.md").read_text().split(MARKER, 1)[1]
    return re.search(r"```sh\n(.*?)```", after, re.S).group(1)


def test_the_block_is_the_four_commands_a_person_types():
    lines = [line for line in walkthrough().splitlines() if line.strip()]
    assert [line.split()[0] for line in lines] == ["rase", "rase", "rase", "mosquitto_sub"]
    assert "--fleet 12" in lines[2]
    assert all("--event-level" in line for line in lines[:3])      # the per-report stream: an explicit choice


def test_the_readme_says_why_the_walkthroughs_mean_repeats_with_the_mechanisms_own_numbers():
    """Duchi's two report values at eps 1 over the example range, and the step
    between the 13 means of 12 reports, as README's walkthrough states them."""
    from fusion_center.config import FusionConfig
    from rase_common.mechanisms import mechanism

    text = " ".join((ROOT / "README.md").read_text().split(MARKER, 1)[1].split())
    # What the walkthrough runs: the shipped config with --event-level (its per-report stream).
    precision = FusionConfig.load(ROOT / "configs/fusion.example.toml", privacy={"event_level": True}).precision
    assert precision.mechanism == "duchi" and precision.eps_levels == [1.0]
    low, high = mechanism("duchi").device_values(_calibration(precision), 1.0)
    said = re.search(r"one of two values \((-?\d+) or (\d+) W at eps 1 over the example range (\d+)-(\d+) W", text)
    assert said, "README no longer says what each Duchi report can be"
    assert (int(said.group(1)), int(said.group(2))) == (round(low), round(high))
    assert (float(said.group(3)), float(said.group(4))) == (precision.x_min, precision.x_max)
    assert f"the mean of 12 reports is one of 13 values {round((high - low) / 12)} W apart" in text


def _calibration(precision):  # noqa: ANN001, ANN202
    from rase_device.randomizer import Calibration

    return Calibration(beta=precision.beta, rho=precision.rho, x_min=precision.x_min, x_max=precision.x_max,
                       gamma=precision.gamma)


def test_readme_walkthrough_ends_in_an_aggregate(mosquitto, tmp_path):
    run = run_walkthrough(mosquitto.port, tmp_path)
    assert run.aggregates, f"no aggregate after {run.took:.0f} s:\n{run.log[-4000:]}"
    agg = run.aggregates[-1]
    print(f"first aggregate after {run.took:.1f} s: t={agg.t} n={agg.n} mean={agg.estimates['mean'].value:.0f} "
          f"ci={agg.estimates['mean'].ci}")
    assert agg.n >= 10 and agg.regions == ["r1"] and "mean" in agg.estimates
    # Why the mean repeats from one t to the next, in the aggregate itself (README says so too).
    assert f"the mean of these {agg.n} reports is one of {agg.n + 1} values" in agg.what["mean"], agg.what
    # What it promises per household per day, as README says: event-level, eps 97,200 a household-day (issue 28).
    unit = agg.privacy_unit
    assert unit is not None and unit.guarantee == "event-level" and unit.unit == "household"
    assert "eps 97,200 per household per UTC day" in unit.statement, unit.statement
    assert run.took < 60, f"the first aggregate took {run.took:.0f} s"
    # The services said what they did, and stopped cleanly on SIGTERM.
    assert "fleet of 12 simulated devices" in run.log and "fog fog1 started" in run.log
    assert "Traceback" not in run.log, run.log[-4000:]
    assert (run.work / "var" / "fusion.sqlite").exists()


@dataclass
class WalkthroughRun:
    aggregates: list[Aggregate]
    log: str
    took: float
    work: Path


def run_walkthrough(port: int, tmp_path: Path) -> WalkthroughRun:
    """README's block in a fresh copy of configs/ against the broker on `port`,
    until mosquitto_sub prints the first aggregate (or 150 s); the services
    are then stopped as `kill %1 %2 %3` would."""
    work = tmp_path / "checkout"
    shutil.copytree(ROOT / "configs", work / "configs")
    conf = tmp_path / "xdg"
    conf.mkdir()
    (conf / "mosquitto_sub").write_text(f"-h 127.0.0.1\n-p {port}\n")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "XDG_CONFIG_HOME": str(conf),
           "RASE_FUSION_BROKER__PORT": str(port), "RASE_FOG_BROKER__PORT": str(port),
           "RASE_AGENT_BROKER__PORT": str(port),
           "RASE_FUSION_METRICS_PORT": str(free_port()), "RASE_FOG_METRICS_PORT": str(free_port())}
    log, printed = tmp_path / "services.log", tmp_path / "stdout.txt"
    started = time.monotonic()
    with open(log, "w") as services_log, open(printed, "w") as stdout:
        # Files, not pipes: the services run on in the background and keep their output open.
        proc = subprocess.Popen(["bash", "-c", walkthrough()], cwd=work, env=env, stdout=stdout,
                                stderr=services_log, start_new_session=True)
        try:
            proc.wait(timeout=150)      # bash ends with its last command, mosquitto_sub
        except subprocess.TimeoutExpired:
            pass
        finally:
            took = time.monotonic() - started
            # The services run on in the background, as in a terminal: stop them as `kill %1 %2 %3` would.
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and _alive(proc.pid):
                time.sleep(0.1)
            if _alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = [line for line in printed.read_text().splitlines() if line.startswith("{")]
    return WalkthroughRun([Aggregate.model_validate(json.loads(line)) for line in out], log.read_text(), took, work)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
