"""REFIT loader on real rows: CRLF, gaps, the hold rule, bad input."""

import gzip
import hashlib
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from simulators.refit import (RefitFormatError, bundled_dir, epoch0_of, grid_readings, house_file, load_house,
                              readings_at)

# Real REFIT rows cut for these tests (house 13's gaps); see its README.
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "refit"


def test_real_house_rows_with_crlf():
    raw = gzip.decompress((bundled_dir() / "house_2.csv.gz").read_bytes())
    assert b"\r\n" in raw and raw.split(b"\n", 1)[0].endswith(b"Appliance9")
    h = load_house(bundled_dir(), 2)
    assert len(h.unix) == 12616 and sum(h.skipped.values()) == 0
    assert h.unix[0] == 1420675200 and h.unix[-1] == 1420761594
    assert np.all(np.diff(h.unix) > 0)
    assert h.device_ids()[0] == "h2a1" and h.device_ids(include_aggregate=True)[0] == "h2agg"


def test_hold_rule_on_house_13_gaps():
    """House 13 has runs of ~76 s steps: under the 120 s hold every t still
    has a reading; with a 60 s hold some t in the gaps have none."""
    h = load_house(FIXTURES, 13)
    assert len(h.unix) == 200 and sum(h.skipped.values()) == 0
    e0 = epoch0_of([h], 8.0)
    n_t = int((h.unix[-1] - e0) // 8)
    full = grid_readings(h, "h13a1", e0, 8.0, n_t)
    strict = grid_readings(h, "h13a1", e0, 8.0, n_t, max_hold_s=60.0)
    steps = np.diff(h.unix)
    assert steps.max() >= 70
    assert np.isnan(full).sum() == 0
    assert np.isnan(strict).sum() > 0


def test_reading_is_last_row_strictly_before_the_period_end():
    unix = np.array([100, 108, 116])
    vals = np.array([1.0, 2.0, 3.0])
    # Query exactly at a row's time excludes that row.
    assert readings_at(unix, vals, np.array([108.0, 108.5, 99.0, 300.0])).tolist()[:2] == [1.0, 2.0]
    out = readings_at(unix, vals, np.array([99.0, 300.0]))
    assert np.isnan(out[0]) and np.isnan(out[1])   # nothing before; 184 s old > 120 s hold


def test_epoch0_is_floored_to_the_period():
    hs = [load_house(bundled_dir(), 1), load_house(bundled_dir(), 2)]
    assert epoch0_of(hs, 8.0) == 1420675200.0
    assert epoch0_of([hs[0]], 8.0) == 1420675200.0   # 1420675206 floored to a multiple of 8


def test_bundled_excerpt_matches_its_recorded_checksums_and_attribution():
    readme = (bundled_dir() / "README.md").read_text()
    recorded = dict(re.findall(r"^\| (house_\d+\.csv\.gz) \| ([0-9a-f]{64}) \|$", readme, re.M))
    assert sorted(recorded) == sorted(f"house_{h}.csv.gz" for h in (1, 2, 3, 5, 12))
    for name, digest in recorded.items():
        assert hashlib.sha256((bundled_dir() / name).read_bytes()).hexdigest() == digest, name
    assert "CC BY 4.0" in readme
    assert "CC BY 4.0" in (FIXTURES / "README.md").read_text()


def test_malformed_rows_skipped_counted_and_named(tmp_path, caplog):
    text = ("Time,Unix,Aggregate," + ",".join(f"Appliance{k}" for k in range(1, 10)) + "\n"
            "2015-01-08 00:00:00,1000,1,1,1,1,1,1,1,1,1,1\r\n"
            "2015-01-08 00:00:08,1008,1,1,1\r\n"
            "2015-01-08 00:00:16,1016,x,1,1,1,1,1,1,1,1,1\r\n"
            "2015-01-07 23:58:20,900,1,1,1,1,1,1,1,1,1,1\r\n"
            "2015-01-08 00:00:24,1024,2,2,2,2,2,2,2,2,2,2\r\n")
    (tmp_path / "house_7.csv").write_text(text)
    with caplog.at_level(logging.WARNING):
        h = load_house(tmp_path, 7)
    assert h.skipped == {"columns": 1, "non_numeric": 1, "time_backwards": 1}
    assert h.unix.tolist() == [1000, 1024]
    assert "house_7.csv:3" in caplog.text and "house_7.csv:5" in caplog.text


def test_issues_column_is_accepted(tmp_path):
    text = ("Time,Unix,Aggregate," + ",".join(f"Appliance{k}" for k in range(1, 10)) + ",Issues\n"
            "2015-01-08 00:00:00,1000,1,2,3,4,5,6,7,8,9,10,0\r\n")
    (tmp_path / "house_4.csv").write_text(text)
    assert load_house(tmp_path, 4).columns["Appliance9"].tolist() == [10.0]


def test_not_refit_shaped_and_missing_house_are_clear_errors(tmp_path):
    (tmp_path / "house_3.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(RefitFormatError, match="not a REFIT file"):
        load_house(tmp_path, 3)
    with pytest.raises(RefitFormatError, match="no REFIT file for house 99"):
        house_file(tmp_path, 99)
