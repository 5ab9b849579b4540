"""`rase replay --unit household` (issue 28) through a real Mosquitto, the fog
and the fusion center (its own process): household meters, one report per
half-hour, the output of item 4 of the issue, and, with both aggregators'
noise off (a test-only setting), each release equal to the truth recomputed
from the raw CSVs by the stated definition (each meter's samples from its
interval's start, the last row at or before, the clipped mean)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from rase.cli import main as rase_main
from simulators.household_replay import HouseholdSpec, run_households, score
from simulators.households import Household, interval_means, truth
from simulators.refit import bundled_dir, load_house

pytestmark = pytest.mark.integration


def test_a_household_replays_output_lets_anyone_recompute_the_truth(tmp_path):
    out = tmp_path / "hh.jsonl"
    assert rase_main(["replay", "--houses", "1,2,3", "--unit", "household", "--households", "15", "--product",
                      "interval", "--interval-s", "1800", "--eps-day", "4", "--mechanism", "duchi", "--hours", "3",
                      "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    params = json.loads(lines[0])["params"]
    hh = params["households"]
    assert len(hh) == 15 and [h["house"] for h in hh[:4]] == [1, 2, 3, 1]
    assert all(set(h) == {"id", "house", "shift_s", "x_min", "x_max"} and 0 <= h["shift_s"] < 86400 for h in hh)
    assert (params["unit"], params["interval_s"], params["eps_day"], params["releases_per_day"]) == (
        "household", 1800.0, 4.0, 48)
    rows = [json.loads(line) for line in lines[1:]]
    assert len(rows) == 6 and [r["t"] for r in rows] == list(range(6))
    for r in rows:
        assert r["t_start"] == params["epoch0"] + r["t"] * 1800.0 and r["interval_s"] == 1800.0 and r["n"] == 15
        mean = r["estimates"]["mean"]             # unbiased, so it may leave the range; its interval does not
        assert isinstance(mean["value"], float) and 0.0 <= mean["ci"][0] <= mean["ci"][1] <= 8000.0
        p = r["privacy"]
        assert (p["unit"], p["guarantee"], p["eps_day_budget"], p["releases_per_day"]) == (
            "household", "per unit per day", 4.0, 48)
        assert p["eps_per_day"] == pytest.approx(48 * params["eps"]) and p["eps_per_day"] <= 4.0
    scored = score(bundled_dir(), out)
    assert scored["n_matches_truth"] and scored["releases"] == 6


def test_without_noise_each_release_is_the_true_half_hourly_mean(tmp_path):
    spec = HouseholdSpec(data_dir=bundled_dir(), houses=[1, 2, 3, 5, 12], households=40, hours=4.0,
                         start_offset_s=18 * 3600, eps_day=4.0, mechanism="prio3", central_noise=False,
                         work_dir=tmp_path / "state", progress=False)
    result = asyncio.run(run_households(spec))
    assert result.reports == 40 * 8 and result.fog["rejected"] == 0
    p = result.params
    houses = {h: load_house(bundled_dir(), h) for h in p["houses"]}
    hhs = [Household(h["id"], h["house"], h["shift_s"]) for h in p["households"]]
    means = interval_means(houses, hhs, day_start=p["day_start"], epoch0=p["epoch0"], t0=p["t_start"],
                           intervals=p["intervals"], interval_s=1800.0, period_s=8.0, x_min=0.0, x_max=8000.0)
    true_mean, n = truth(means)
    got = {a["t"]: a for a in result.aggregates}
    assert sorted(got) == list(range(36, 44))
    for j, t in enumerate(range(36, 44)):
        a = got[t]
        assert a["n"] == n[j] == 40 and a["prio3"]["noise"]["draws"] == 0
        # Each meter reports its mean rounded to the 1 W grid: the mean of 40 is within 0.5 W of the truth.
        assert abs(a["estimates"]["mean"]["value"] - true_mean[j]) <= 0.5
    assert np.isfinite(true_mean).all()
