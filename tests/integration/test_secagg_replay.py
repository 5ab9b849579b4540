"""`rase replay --mechanism prio3` through the real pipeline (simulated
devices on one MQTT connection, the fog as leader, the fusion center as
helper in its own process), per timestamp and with the hourly product. With
the test-only no-noise setting every published mean is exactly the mean of
the devices' quantized readings (per t), or of their hourly averages;
`rase eval utility --replay` scores the same files."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rase_common.mechanisms import Setting
from rase_common.mechanisms.prio3 import measurements
from simulators.evaluation import product_truth, readings_matrix
from simulators.pipeline import PipelineSpec, fleet, run_pipeline, write_jsonl
from simulators.refit import bundled_dir, load_house

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def replay(tmp_path, **kw):
    spec = PipelineSpec(data_dir=bundled_dir(), houses=[1, 2], eps=1.0, device_mechanism="prio3",
                        central_noise=False, progress=False, work_dir=tmp_path / "state", **kw)
    result = asyncio.run(run_pipeline(spec))
    write_jsonl(result, tmp_path / "r.jsonl")
    return result


def test_a_per_t_replay_publishes_the_exact_mean_of_the_quantized_readings(tmp_path):
    result = replay(tmp_path, hours=0.05)
    p = result.params
    devices = fleet([load_house(bundled_dir(), h) for h in (1, 2)], 1, 3600.0)
    x = readings_matrix(devices, p["epoch0"], p["period_s"], 0, p["timestamps"])
    assert len(result.aggregates) == p["timestamps"] == 22
    for agg in result.aggregates:
        col = x[:, agg["t"]][~np.isnan(x[:, agg["t"]])]
        assert agg["n"] == col.size and agg["prio3"]["rejected"] == {}
        assert agg["estimates"]["mean"]["value"] == pytest.approx(measurements("sum", col, Setting()).mean(), abs=1e-9)


def test_an_hourly_replay_publishes_each_hours_mean_of_the_devices_averages(tmp_path):
    result = replay(tmp_path, hours=2.02, product="hourly")
    truth, first = product_truth(fleet([load_house(bundled_dir(), h) for h in (1, 2)], 1, 3600.0), result.params,
                                 "hourly")
    assert [a["t"] for a in result.aggregates] == [first, first + 1]   # the third hour has no later reading yet
    for agg in result.aggregates:
        assert agg["prio3"]["product"] == "hourly" and agg["prio3"]["wall_clock"]["period_s"] == 3600.0
        assert agg["estimates"]["mean"]["value"] == pytest.approx(truth[agg["t"] - first], abs=1e-9)
        assert agg["prio3"]["privacy"]["eps_per_day"] == pytest.approx(24.0)
    out = subprocess.run([sys.executable, "-m", "rase.cli", "eval", "utility", "--replay", str(tmp_path / "r.jsonl"),
                          "--out", str(tmp_path / "ev")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = json.loads((tmp_path / "ev" / "utility_compare.json").read_text())
    assert row["mechanism"] == "prio3 hourly" and row["mae"] == pytest.approx(0.0, abs=1e-9)
