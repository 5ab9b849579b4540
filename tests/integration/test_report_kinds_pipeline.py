"""Binary (on/off) and categorical (load band) reports from the bundled REFIT
houses through a real Mosquitto: real agents, fog and fusion center, scored
against the truth recomputed here from the CSVs."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulators.refit import bundled_dir, epoch0_of, grid_readings, load_house

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
HOUSES = [1, 2, 3, 5, 12]


def rase(*args, timeout=600):
    proc = subprocess.run([sys.executable, "-m", "rase.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def truth_matrix(t0, n_t):
    houses = [load_house(bundled_dir(), h) for h in HOUSES]
    e0 = epoch0_of(houses, 8.0)
    return np.vstack([grid_readings(h, d, e0, 8.0, t0 + n_t)[t0:] for h in houses for d in h.device_ids()])


@pytest.mark.parametrize("kind", ["binary", "categorical"])
def test_report_kind_replay_through_mosquitto_is_unbiased_and_covers(kind, mosquitto, tmp_path):
    """45 devices, 1 h (450 timestamps) at eps 1. Every device with a reading
    reported at every t; the mean error is within 3 standard errors of 0 and
    the 95% intervals cover the truth at 0.92-0.98 of the estimates (sd 0.010
    for binary's 450, less for categorical's 4 x 450)."""
    out = tmp_path / f"{kind}.jsonl"
    extra = ["--on-above", "15"] if kind == "binary" else ["--bands", "5,50,500"]
    rase("replay", "--houses", ",".join(map(str, HOUSES)), "--hours", "1", "--eps", "1", "--mechanism", kind,
         "--broker", f"mqtt://127.0.0.1:{mosquitto.port}", "--out", str(out), *extra)
    lines = out.read_text().splitlines()
    params = json.loads(lines[0])["params"]
    assert params["device_mechanism"] == kind and params["broker"].endswith(str(mosquitto.port))
    rows = [json.loads(line) for line in lines[1:]]
    t0, n_t = params["t_start"], params["timestamps"]
    assert len(rows) == n_t == 450
    x = truth_matrix(t0, n_t)
    errs, hits = [], []
    for r in rows:
        col = x[:, r["t"] - t0]
        col = col[~np.isnan(col)]
        assert r["n"] == col.size                                # every device with a reading reported
        if kind == "binary":
            assert set(r["estimates"]) == {"count", "mean"} and not r["frequencies"]
            pairs = [(r["estimates"]["count"], float((col > 15).sum()))]
        else:
            assert r["estimates"] == {} and len(r["frequencies"]) == 4
            band = (col > 5).astype(int) + (col > 50) + (col > 500)
            pairs = list(zip(r["frequencies"], np.bincount(band, minlength=4) / col.size))
        for e, true in pairs:
            errs.append(e["value"] - true)
            hits.append(e["ci"][0] <= true <= e["ci"][1])
    errs = np.array(errs)
    assert abs(errs.mean()) < 3 * errs.std() / np.sqrt(errs.size), errs.mean()
    assert 0.92 <= np.mean(hits) <= 0.98, np.mean(hits)
    # `rase query` shows what the store holds for this kind.
    table = rase("query", "--db", str(tmp_path / f"{kind}.state" / "fusion.sqlite"), "--from", str(t0), "--to",
                 str(t0 + 2)).splitlines()
    assert len(table) == 4
    head = table[0].split()
    assert head[head.index("n") + 1:] == (["MEAN", "COUNT", "clamped"] if kind == "binary"
                                    else ["band", "0", "band", "1", "band", "2", "band", "3", "clamped"])
    # `rase eval counts --replay` computes the same numbers.
    rase("eval", "counts", "--replay", str(out), "--out", str(tmp_path / "ev"))
    scored = json.loads((tmp_path / "ev" / "kinds.json").read_text())[0]
    assert (tmp_path / "ev" / "kinds.png").stat().st_size > 10_000          # truth against estimates, plotted
    assert scored["n_mismatch"] == 0 and scored["estimates"] == errs.size
    assert scored["mae"] == pytest.approx(np.mean(np.abs(errs)), rel=1e-9)
    assert scored["coverage"] == pytest.approx(np.mean(hits), rel=1e-9)
