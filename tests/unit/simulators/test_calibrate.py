"""rase calibrate on the bundled REFIT houses: the private histogram's
estimates against the recorded readings, and the config write."""

from collections import Counter
from dataclasses import replace

import pytest

from fusion_center.estimators import Estimate
from rase_device.entropy import RandomBits
from fusion_center.config import FusionConfig
from simulators.calibrate import DEFAULT_EDGES, bucket_of, calibrate, write_x_max
from simulators.refit import bundled_dir
from tests.seeded_bytes import XorShiftBytes


def test_bucket_of_edges_table():
    assert [bucket_of(x, DEFAULT_EDGES) for x in (0, 4.9, 5, 3999, 4000, 1e6, -1)] == [0, 0, 1, 12, 12, 12, 0]


def test_private_clip_bias_tracks_the_recorded_one():
    # 45 devices x 200 histogram reports spread over the day at eps 2, seeded bytes (tests only).
    r = calibrate(bundled_dir(), [1, 2, 3, 5, 12], eps=1.0, eps_calibration=2.0, periods=200,
                  bits=RandomBits(read=XorShiftBytes(3)))
    # Readings missing in the trace's gaps (a quarter of these times) are not reported.
    assert r.devices == 45 and 0.7 * 45 * 200 <= r.reports <= 45 * 200
    # Each candidate's private clipping bias within 3 standard errors (from the
    # frequency estimates' variances) of the same estimate on the exact bucket
    # shares; and the buckets' discretisation within 5 W of the recorded readings.
    for c in r.table:
        se = r.clip_bias_se[c.x_max]
        assert abs(c.clip_bias - r.histogram_clip_bias[c.x_max]) <= 3 * se + 1e-9, (c, se)
        assert r.histogram_clip_bias[c.x_max] == pytest.approx(r.true_clip_bias[c.x_max], abs=5.0)
    # REFIT appliances sit mostly near 0 W: at eps 1 with n = 45 a small range wins.
    assert r.chosen.x_max <= 1000
    assert sum(f.value for f in r.freqs) == pytest.approx(1.0, abs=0.1)


def test_write_x_max_keeps_the_rest_of_the_file(tmp_path):
    cfg = tmp_path / "fusion.toml"
    cfg.write_text('name = "f"  # keep\nregions = ["r1"]\n[precision]\nbeta = 0.5\nx_max = 4000.0   # range\n'
                   '[broker]\nport = 1883\n')
    write_x_max(cfg, 500)
    text = cfg.read_text()
    assert 'name = "f"  # keep' in text and "x_max = 500   # range" in text
    assert FusionConfig.load(cfg).precision.x_max == 500
    cfg.write_text('name = "f"\nregions = ["r1"]\n[broker]\nport = 1883\n')
    write_x_max(cfg, 750)
    assert FusionConfig.load(cfg).precision.x_max == 750


def test_cli_prints_the_tradeoff_and_writes_the_choice(tmp_path, capsys):
    from rase.cli import main as rase_main

    cfg = tmp_path / "fusion.toml"
    cfg.write_text('regions = ["r1"]\n[precision]\nx_max = 4000.0\n')
    assert rase_main(["calibrate", "--houses", "1,2", "--periods", "3", "--write", str(cfg)]) == 0
    out = capsys.readouterr().out
    chosen = float(next(line for line in out.splitlines() if "<- chosen" in line).split()[0])
    assert FusionConfig.load(cfg).precision.x_max == chosen
    assert "each device spent eps 12" in out                    # 3 reports at the default calibration eps 4
    assert FusionConfig.load(cfg).clipping is not None and "check over" in out


def test_reports_are_spread_over_the_span():
    from simulators.calibrate import report_times

    assert report_times(0, 4, 24.0, 8.0) == [0, 2700, 5400, 8100]          # every 6 h of a day
    assert report_times(100, 3, 0.0, 8.0) == [100, 101, 102]              # no span: consecutive
    assert report_times(0, 1, 24.0, 8.0) == [0]


def test_a_calibration_is_reproducible_and_its_bound_makes_the_interval_honest():
    """Eight seeded calibrations at eps 4 (48 reports a device, spread over
    the day, 225 devices): every choice within two neighbouring candidates;
    at the consensus range the clipped-mean interval misses the true mean
    more often than 5%, and widened by the bound it does not."""
    import numpy as np

    from simulators.calibrate import consensus, coverage_check

    runs = [calibrate(bundled_dir(), [1, 2, 3, 5, 12], eps=1.0, eps_calibration=4.0, periods=48, clone=5,
                      bits=RandomBits(read=XorShiftBytes(seed))) for seed in range(8)]
    chosen = [(r.chosen.x_max, r.chosen.bias_bound) for r in runs]
    cands = [c.x_max for c in runs[0].table]
    picked = sorted({cands.index(x) for x, _ in chosen})
    assert picked[-1] - picked[0] <= 1, chosen
    x_max, bound = consensus(chosen)
    assert x_max < 1000 and 0 < bound < 60
    # The bound is at least the recorded readings' clipping bias at that range.
    assert bound >= -runs[0].true_clip_bias[x_max]
    cov = coverage_check(bundled_dir(), [1, 2, 3, 5, 12], eps=1.0, x_max=x_max, bias_bound=bound, hours=3, clone=5,
                         rng=np.random.default_rng(2))
    assert cov.timestamps == 1350 and cov.clip_bias < 0
    assert cov.true < cov.widened and cov.widened >= 0.95 and cov.clipped >= 0.93


def test_write_sets_the_clipping_bound_too(tmp_path):
    cfg = tmp_path / "fusion.toml"
    cfg.write_text('regions = ["r1"]\n[precision]\nx_max = 4000.0\n[broker]\nport = 1883\n')
    write_x_max(cfg, 300, 23.34)
    loaded = FusionConfig.load(cfg)
    assert loaded.precision.x_max == 300 and loaded.clipping.bias_bound_w == 23.3
    write_x_max(cfg, 500, 12.0)
    assert FusionConfig.load(cfg).clipping.bias_bound_w == 12.0


def test_the_simulated_oracle_reports_as_the_device_core_does():
    """choice_spread's kRR and OUE counts (drawn per bucket) against the device
    core's own randomizers on the same true buckets: the same mean debiased
    shares, within 4 standard errors of the mean over the draws."""
    import numpy as np

    from rase_device.categorical import KaryRR, OptimizedUnaryEncoding
    from fusion_center.ldp.frequencies import krr_counts, krr_frequencies, oue_counts, oue_frequencies
    from simulators.calibrate import choice_spread

    base = calibrate(bundled_dir(), [1, 2], eps=1.0, eps_calibration=4.0, periods=6,
                     bits=RandomBits(read=XorShiftBytes(5)))
    k = len(base.edges) - 1
    shares = np.array([0.5, 0.2, 0.1, 0.05, 0.05, 0.04, 0.02, 0.01, 0.01, 0.01, 0.005, 0.003, 0.002])
    true_buckets = np.repeat(np.arange(k), np.round(shares * 400).astype(int))
    n = true_buckets.size
    for oracle, mech, counts_of, freqs_of, hit, q in (
            ("krr", KaryRR(k, 3 << 18, 1 << 20, bits=RandomBits(read=XorShiftBytes(6))), krr_counts,
             lambda c: krr_frequencies(c, n, 0.75), 0.75, 0.25 / (k - 1)),
            ("oue", OptimizedUnaryEncoding(k, 1 << 18, 1 << 20, bits=RandomBits(read=XorShiftBytes(7))), oue_counts,
             lambda c: oue_frequencies(c, n, 0.25), 0.5, 0.25)):
        device = np.array([[e.value for e in freqs_of(counts_of([mech.randomize(int(b)) for b in true_buckets], k))]
                           for _ in range(60)])
        r = replace(base, oracle=oracle, oracle_hit=hit, oracle_q=q, reports=n,
                    freqs=[Estimate(float(v), 0.0, 1.0, n) for v in np.bincount(true_buckets, minlength=k) / n])
        simulated = np.array(_simulated_shares(r, 600, np.random.default_rng(8)))
        se = np.sqrt(device.var(axis=0) / 60 + simulated.var(axis=0) / 600)
        assert np.all(np.abs(device.mean(axis=0) - simulated.mean(axis=0)) <= 4 * se + 1e-9), oracle
        # and the spread of one share matches too (the choice moves with it)
        assert 0.7 <= simulated[:, 0].std() / device[:, 0].std() <= 1.4, oracle
    assert choice_spread(base, draws=20, rng=np.random.default_rng(9)).draws == 20


def _simulated_shares(r, draws, rng):
    """The debiased shares of choice_spread's simulated histograms (its own code path, one draw at a time)."""
    import simulators.calibrate as cal

    seen = []
    real = cal.range_tradeoff

    def spy(edges, freqs, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(list(freqs))
        return real(edges, freqs, *a, **kw)

    cal.range_tradeoff = spy
    try:
        cal.choice_spread(r, draws=draws, rng=rng)
    finally:
        cal.range_tradeoff = real
    return seen


def test_the_choice_spread_is_how_far_repeated_calibrations_move():
    """From the recorded readings' exact bucket shares, the simulated spread
    of the choice agrees with 24 real calibrations (the device core's kRR,
    seeded bytes): every x_max they chose is in it, and the shares differ by
    less than 0.3 in total variation (24 runs leave about 0.1 of noise)."""
    import numpy as np

    from simulators.calibrate import choice_spread, format_spread

    runs = [calibrate(bundled_dir(), [1, 2, 3, 5, 12], eps=1.0, eps_calibration=4.0, periods=12,
                      bits=RandomBits(read=XorShiftBytes(100 + seed))) for seed in range(24)]
    real = {x: c / len(runs) for x, c in Counter(r.chosen.x_max for r in runs).items()}
    assert len(real) >= 2                                # the case the output must warn about: it does move
    spread = choice_spread(runs[0], draws=400, rng=np.random.default_rng(11), shares=runs[0].exact_shares)
    assert set(real) <= set(spread.shares), (real, spread.shares)
    tv = sum(abs(real.get(x, 0) - spread.shares.get(x, 0)) for x in set(real) | set(spread.shares)) / 2
    assert tv < 0.3, (real, spread.shares)
    text = format_spread(choice_spread(runs[0], draws=50, rng=np.random.default_rng(12)), runs[0].chosen.x_max)
    assert "the choice is itself noisy" in text and "no budget spent" in text and "%" in text
