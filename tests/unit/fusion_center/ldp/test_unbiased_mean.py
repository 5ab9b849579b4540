"""`mean`: unbiased for the TRUE mean of the (clipped) readings at every eps,
clamped or not, with honest intervals; and its bootstrap. Seeded trials on
REFIT-like readings (mostly near 0 W, a few large; range 0-4000 W, grid 1 W).

The reports are drawn by an exact vectorised copy of the agent's BR (discrete
Laplace as a difference of two geometrics with the agent's own q, then its
clamp rule); the first test checks that copy against the agent's sampler."""

import math

import numpy as np
import pytest
from scipy import stats

from rase_device.entropy import RandomBits
from rase_device.randomizer import BudgetRandomizer, Calibration
from fusion_center.estimators import (bootstrap_counts, br_corrected, br_mean_variance, br_noise_q, sample_mean,
                                      unbiased_mean)
from tests.seeded_bytes import XorShiftBytes

CAL = Calibration(beta=0.5, rho=0.9, x_min=0.0, x_max=4000.0, gamma=1.0)   # eps_star = 4.6


def br_reports(x: np.ndarray, eps: float, rng: np.random.Generator, cal: Calibration = CAL) -> np.ndarray:
    """What the agent sends for readings x (any shape), drawn with numpy."""
    q = br_noise_q(cal, eps)
    k = np.clip(np.rint((np.clip(x, cal.x_min, cal.x_max) - cal.x_min) / cal.gamma), 0, cal.grid_max)
    z = (rng.geometric(1 - q, size=x.shape) - 1) - (rng.geometric(1 - q, size=x.shape) - 1)
    m = k + z
    if eps < cal.eps_star:
        m = np.clip(m, 0, cal.grid_max)
    y = cal.x_min + m * cal.gamma
    if eps < cal.eps_star:
        y = np.minimum(y, cal.x_max)
    return y


def refit_like(n: int, rng: np.random.Generator) -> np.ndarray:
    """Appliance loads: 80% standby (0-10 W), 15% 50-300 W, 5% 1-3.5 kW, whole watts."""
    u = rng.random(n)
    x = np.where(u < 0.8, rng.integers(0, 11, n), np.where(u < 0.95, rng.integers(50, 301, n),
                                                            rng.integers(1000, 3501, n)))
    return x.astype(float)


@pytest.mark.parametrize("eps", [1.0, 9.0])
def test_the_vectorised_copy_draws_what_the_agent_draws(eps):
    br = BudgetRandomizer(CAL, RandomBits(read=XorShiftBytes(11)))
    n = 20_000
    agent = np.array([br.randomize(120.0, eps)[0] for _ in range(n)])
    ours = br_reports(np.full(n, 120.0), eps, np.random.default_rng(5))
    edges = np.quantile(np.concatenate([agent, ours]), np.linspace(0, 1, 21))
    edges[-1] += 1
    a, _ = np.histogram(agent, edges)
    b, _ = np.histogram(ours, edges)
    keep = (a + b) > 0
    _, p, _, _ = stats.chi2_contingency(np.vstack([a[keep], b[keep]]))
    assert p > 1e-3      # two-sample chi-square on 20 quantile bins, 20,000 draws each


def test_correction_by_hand_and_only_for_clamped_levels():
    q = br_noise_q(CAL, 1.0)
    z = np.array([0.0, 4000.0, 17.0, 0.0, 4000.0])
    eps = np.array([1.0, 1.0, 1.0, 9.0, 9.0])     # eps 9 >= eps_star: never clamped, left as is
    got = br_corrected(z, eps, CAL)
    tail = q / (1 - q)
    assert got.tolist() == pytest.approx([-tail, 4000 + tail, 17.0, 0.0, 4000.0])
    assert tail == pytest.approx(1 / (math.exp(1 / 4000) - 1))     # lambda = 4000 W at eps 1


def test_gamma_not_dividing_the_range_corrects_from_the_top_grid_point():
    cal = Calibration(x_min=0.0, x_max=10.0, gamma=3.0)      # K = 4: the top grid point is 12, sent as 10
    q = br_noise_q(cal, 0.5)
    got = br_corrected(np.array([10.0]), np.array([0.5]), cal)
    assert got[0] == pytest.approx(3.0 * (4 + q / (1 - q)))


TRIALS = {45: 4000, 1000: 600}


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 9.0])
@pytest.mark.parametrize("n", [45, 1000])
def test_mean_is_unbiased_for_the_true_mean_and_covers_it(eps, n):
    rng = np.random.default_rng(int(eps * 100) + n)
    trials = TRIALS[n]
    x = refit_like(n, rng)
    truth = float(np.clip(x, CAL.x_min, CAL.x_max).mean())
    y = br_reports(np.broadcast_to(x, (trials, n)), eps, rng)
    corrected = br_corrected(y.ravel(), np.full(y.size, eps), CAL).reshape(trials, n)
    est = corrected.mean(axis=1)
    half = np.array([1.959963984540054 * math.sqrt(br_mean_variance(c, np.full(n, eps), CAL)) for c in corrected])
    err = est - truth
    # Bias: the average error is within 3 standard errors of 0.
    assert abs(err.mean()) < 3 * err.std(ddof=1) / math.sqrt(trials), (err.mean(), err.std())
    # Coverage of the TRUE mean by the 95% interval in [0.93, 0.97].
    cover = float(np.mean(np.abs(err) <= half))
    assert 0.93 <= cover <= 0.97, cover
    # The paper's SE is far off whenever the clamp branch runs.
    if eps < CAL.eps_star:
        assert abs(y.mean() - truth) > 100


def test_estimator_functions_agree_with_the_vectorised_check():
    rng = np.random.default_rng(3)
    x = refit_like(45, rng)
    y = br_reports(x, 1.0, rng)
    e = unbiased_mean(y, np.full(45, 1.0), CAL)
    c = br_corrected(y, np.full(45, 1.0), CAL)
    assert e.value == pytest.approx(c.mean()) and e.n == 45
    # Clamped (eps 1 < eps_star): the score interval, (mean - mu)^2 = z^2 V(mu) / n at each end
    # (or the end of the range), V the corrected report's exact variance at mu.
    from rase_common.mechanisms import Setting, mechanism

    assert e.method == "score-variance-bound"
    bound = mechanism("br").variance_bound(Setting(), 1.0, np.array([e.lo, e.hi]))
    for end, v in zip((e.lo, e.hi), bound):
        assert end in (CAL.x_min, CAL.x_max) or (e.value - end) ** 2 == pytest.approx(1.959964 ** 2 * v / 45, rel=1e-5)
    assert e.lo < e.hi and sample_mean(c).value == pytest.approx(e.value)


@pytest.mark.parametrize("n", [45, 1000])
def test_bootstrap_of_the_unbiased_mean_covers_the_true_mean(n):
    rng = np.random.default_rng(n)
    trials = 600 if n == 45 else 300
    x = refit_like(n, rng)
    truth = float(x.mean())
    hits = 0
    for _ in range(trials):
        y = br_reports(x, 1.0, rng)
        e = bootstrap_counts(br_corrected(y, np.full(n, 1.0), CAL), b=500, rng=rng)
        hits += e.lo <= truth <= e.hi
    cover = hits / trials
    # 95% percentile interval; tolerance widened for the smaller trial count (sd ~ 0.009 / 0.013).
    assert 0.92 <= cover <= 0.98, cover


def test_bootstrap_counts_has_the_index_bootstrap_distribution():
    """Multinomial counts over distinct values resample exactly as indices do:
    the resample means match in mean and spread (5,000 resamples each)."""
    from fusion_center.estimators import _resample_means

    rng = np.random.default_rng(9)
    a = np.round(rng.exponential(10, 2000))       # few distinct values: the counts path is taken
    assert 4 * np.unique(a).size <= a.size
    by_counts = bootstrap_counts(a, b=5000, rng=np.random.default_rng(1))
    by_index = _resample_means(a, 5000, np.random.default_rng(2))
    assert by_counts.value == pytest.approx(by_index.mean(), abs=3 * a.std() / math.sqrt(2000 * 5000) * 3)
    lo, hi = np.quantile(by_index, [0.025, 0.975])
    assert by_counts.lo == pytest.approx(lo, rel=0.03) and by_counts.hi == pytest.approx(hi, rel=0.03)


@pytest.mark.parametrize("mechanism", ["duchi", "hybrid"])
def test_aggregate_mean_is_unbiased_for_the_other_device_mechanisms(mechanism):
    """Reports from the real device randomizers (seeded bytes): the aggregate's
    `mean` covers the true mean; 300 trials of n = 200, tolerance for 300 trials."""
    from rase_device.mechanisms import make_randomizer
    from rase_common.protocol.window import WindowMessage
    from fusion_center.ldp.merge import aggregate
    from rase_common.protocol.control import ControlMessage

    rng = np.random.default_rng(4)
    n, trials = 200, 300
    x = refit_like(n, rng)
    truth = float(x.mean())
    precision = ControlMessage(mechanism=mechanism, eps_levels=[2.0])
    r = make_randomizer(mechanism, precision.calibration(), RandomBits(read=XorShiftBytes(21)))
    errs, hits = [], 0
    for t in range(trials):
        y = [float(r.randomize(float(v), 2.0)[0]) for v in x]
        agg, est = aggregate(t, [WindowMessage.uniform("r1", t, y, eps=2.0, kind=mechanism)], precision, {"r1"},
                             bootstrap_b=50)
        errs.append(est["mean"].value - truth)
        hits += est["mean"].lo <= truth <= est["mean"].hi
        assert not agg.clamped
    errs = np.array(errs)
    assert abs(errs.mean()) < 3 * errs.std(ddof=1) / math.sqrt(trials)
    assert 0.91 <= hits / trials <= 0.99


def test_grid_value_counts_matches_unique_and_refuses_shared_cells():
    from fusion_center.estimators import grid_value_counts

    rng = np.random.default_rng(3)
    a = 5.0 + 2.5 * rng.integers(-40, 2000, 10_000)
    a[:7] = -200.3                                 # an off-grid value alone in its cell
    u, c = grid_value_counts(a, 2.5, 5.0)
    uu, cc = np.unique(a, return_counts=True)
    assert np.allclose(u, uu) and np.array_equal(c, cc)
    b = np.array([0.0, 2.5, 2.6, 5.0])            # 2.5 and 2.6 fall in one cell of step 2.5
    assert grid_value_counts(b, 2.5) is None


def test_count_resampling_with_a_normal_tail_has_the_exact_multinomial_distribution():
    """Clamped BR reports, n = 200,000, ~4,000 distinct values: the commonest
    values exact, the rest's sum by its conditional moments (Berry-Esseen
    error <= 0.005). Against the exact multinomial over all values (whose
    equality with index resampling is tested above): two-sample KS of 2,000
    resample means each (p > 0.001: a false alarm 1 run in 1,000), and the
    2.5/97.5% points within 5% of the half-width."""
    from scipy import stats

    from fusion_center.estimators import count_resample_means, grid_value_counts, normal_tail_split

    rng = np.random.default_rng(11)
    n = 200_000
    a = np.clip(rng.uniform(0, 500, n) + rng.laplace(0, 4000, n), 0, 4000).round()
    u, c = grid_value_counts(a, 1.0)
    assert u.size > 3000 and normal_tail_split(u, c) is not None     # the normal-tail path is taken
    by_tail = count_resample_means(u, c, 2000, np.random.default_rng(1))
    exact = np.random.default_rng(2).multinomial(n, c / n, size=2000) @ u / n
    assert stats.ks_2samp(by_tail, exact).pvalue > 0.001
    half = (np.quantile(exact, 0.975) - np.quantile(exact, 0.025)) / 2
    for q in (0.025, 0.975):
        assert abs(np.quantile(by_tail, q) - np.quantile(exact, q)) < 0.05 * half


def test_a_lone_outlier_keeps_every_value_exact():
    """One report far from the rest: a normal would smooth its Poisson count,
    so the Berry-Esseen check sends the whole resample to the exact path."""
    from fusion_center.estimators import normal_tail_split

    values = np.append(np.arange(200.0), 1e7)
    counts = np.append(np.full(200, 1000), 1)
    assert normal_tail_split(values, counts) is None


def test_bootstrap_on_the_grid_covers_the_true_mean_at_n_200000():
    """The fusion center's path (grid counting + normal tail) at n = 200,000,
    eps 1: coverage of the true mean in [0.92, 0.98] over 300 trials (sd 0.013)."""
    rng = np.random.default_rng(20)
    n, trials = 200_000, 300
    x = refit_like(n, rng)
    truth = float(x.mean())
    hits = 0
    for _ in range(trials):
        y = br_reports(x, 1.0, rng)
        e = bootstrap_counts(br_corrected(y, np.full(n, 1.0), CAL), b=500, rng=rng, step=CAL.gamma,
                             origin=CAL.x_min)
        hits += e.lo <= truth <= e.hi
    assert 0.92 <= hits / trials <= 0.98, hits / trials


def test_br_value_counts_are_the_corrected_reports():
    """Counting distinct reports per level, then correcting them, gives the
    same multiset as correcting every report (levels 1 and 2 clamped, 9 not)."""
    from fusion_center.estimators import br_value_counts

    rng = np.random.default_rng(5)
    x = refit_like(3000, rng)
    by_level = {e: br_reports(x[i::3], e, rng) for i, e in enumerate((1.0, 2.0, 9.0))}
    u, c = br_value_counts(by_level, CAL)
    every = np.concatenate([br_corrected(z, np.full(z.size, e), CAL) for e, z in by_level.items()])
    assert c.sum() == every.size
    uu, cc = np.unique(every, return_counts=True)
    merged = {}
    for v, k in zip(u, c):
        merged[v] = merged.get(v, 0) + k
    assert np.allclose(sorted(merged), uu, rtol=0, atol=1e-9) and [merged[v] for v in sorted(merged)] == cc.tolist()


@pytest.mark.parametrize("n", [45, 1000])
def test_br_bootstrap_over_two_levels_covers_the_true_mean(n):
    """The fusion center's `bs` with a clamped level (eps 1) and an unclamped
    one (eps 9), half the devices each: coverage of the true mean in
    [0.92, 0.98] over 300 trials (sd 0.013)."""
    from fusion_center.estimators import br_bootstrap

    rng = np.random.default_rng(100 + n)
    x = refit_like(n, rng)
    truth = float(x.mean())
    hits = 0
    for _ in range(300):
        e = br_bootstrap({1.0: br_reports(x[::2], 1.0, rng), 9.0: br_reports(x[1::2], 9.0, rng)}, CAL, 500,
                         rng=rng)
        hits += e.lo <= truth <= e.hi
    assert 0.92 <= hits / 300 <= 0.98, hits / 300


@pytest.mark.parametrize("w", [8, 32])
def test_windowed_mean_interval_covers_the_true_windowed_mean(w):
    """Win(t, w) of the per-timestamp unbiased means (n = 45, eps 1, a new
    REFIT-like fleet reading at every t): its interval, built from the
    per-timestamp variances, covers the true average of the w true means in
    [0.93, 0.97] of 600 windows (sd 0.009); its error averages to 0 within 3
    standard errors."""
    from fusion_center.estimators import windowed

    rng = np.random.default_rng(w)
    hits, errs = 0, []
    for _ in range(600):
        per_t, truths = {}, []
        for t in range(w):
            x = refit_like(45, rng)
            truths.append(float(x.mean()))
            per_t[t] = unbiased_mean(br_reports(x, 1.0, rng), np.full(45, 1.0), CAL)
        out = windowed(per_t, w - 1, w)
        truth = float(np.mean(truths))
        hits += out["ci"][0] <= truth <= out["ci"][1]
        errs.append(out["value"] - truth)
    errs = np.array(errs)
    assert abs(errs.mean()) < 3 * errs.std() / math.sqrt(errs.size)
    assert 0.93 <= hits / 600 <= 0.97, hits / 600
