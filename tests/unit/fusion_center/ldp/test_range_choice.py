"""Range choice from a histogram: clipping bias and noise by hand."""

import math

import pytest

from fusion_center.ldp.range_choice import best_range, bucket_midpoints, clip_bias_bound, clip_bias_sd, range_tradeoff


def laplace_var(x_min, x_max, eps=1.0):
    return 2 * ((x_max - x_min) / eps) ** 2


def test_bias_and_noise_by_hand():
    edges = [0, 100, 1000, 2000]      # buckets [0,100) mid 50, [100,1000) mid 550, [1000, 2000] mid 1500
    freqs = [0.8, 0.15, 0.05]
    table = range_tradeoff(edges, freqs, n=100, x_min=0.0, candidates=[500, 2000], variance_per_report=laplace_var)
    # c = 500 clips the 550 bucket by 50 and the 1500 bucket by 1000.
    assert table[0].clip_bias == pytest.approx(-(0.15 * 50 + 0.05 * 1000))
    assert table[0].noise_sd == pytest.approx(math.sqrt(2 * 500 ** 2 / 100))
    assert table[1].clip_bias == pytest.approx(0.0)
    assert table[1].noise_sd == pytest.approx(math.sqrt(2 * 2000 ** 2 / 100))
    assert table[0].rmse == pytest.approx(math.hypot(table[0].clip_bias, table[0].noise_sd))


def test_more_reports_favour_a_wider_range():
    edges = [0, 50, 200, 1000, 3000, 4000]
    freqs = [0.7, 0.2, 0.07, 0.02, 0.01]
    cands = [100, 200, 500, 1000, 2000, 4000]
    few = best_range(range_tradeoff(edges, freqs, 45, 0.0, cands, laplace_var))
    many = best_range(range_tradeoff(edges, freqs, 1_000_000, 0.0, cands, laplace_var))
    assert few.x_max < many.x_max


def test_negative_debiased_shares_are_clipped_and_renormalised():
    t1 = range_tradeoff([0, 10, 30], [-0.1, 1.1], 10, 0.0, [5, 20], laplace_var)
    t2 = range_tradeoff([0, 10, 30], [0.0, 1.0], 10, 0.0, [5, 20], laplace_var)
    assert [r.clip_bias for r in t1] == pytest.approx([r.clip_bias for r in t2])


@pytest.mark.parametrize("edges,freqs,match", [
    ([0, 0, 1], [1, 1, 1], "increasing"),
    ([0, 1, 2], [1.0], "2 buckets need 2"),
    ([0, 1, 2], [0.0, -1.0], "no mass"),
])
def test_bad_input_is_a_clear_error(edges, freqs, match):
    with pytest.raises(ValueError, match=match):
        range_tradeoff(edges, freqs, 10, 0.0, [1.0], laplace_var)


def test_buckets_are_closed_at_the_top_edge():
    assert bucket_midpoints([0, 2, 4]).tolist() == [1.0, 3.0]


def test_clip_bias_standard_error_by_hand():
    # Only the bucket above x_max = 2 moves: by 3 - 2 = 1, variance 0.04.
    assert clip_bias_sd([0, 2, 4], [0.01, 0.04], 2.0) == pytest.approx(0.2)


def test_clip_bias_bound_counts_each_bucket_at_its_upper_edge_plus_z_se():
    # x_max = 150: bucket [100, 1000) can lose up to 850 per reading, [1000, 2000] up to 1850.
    edges, freqs, var = [0, 100, 1000, 2000], [0.8, 0.15, 0.05], [1e-4, 1e-4, 4e-4]
    est = 0.15 * 850 + 0.05 * 1850
    se = math.sqrt(850 ** 2 * 1e-4 + 1850 ** 2 * 4e-4)
    assert clip_bias_bound(edges, freqs, var, 150.0) == pytest.approx(est + 2.326 * se)
    assert clip_bias_bound(edges, freqs, None, 2000.0) == 0.0
    # Debiased shares may be negative (noise): they count as 0, so noise never argues the clipping away.
    assert clip_bias_bound(edges, [1.2, -0.1, 0.05], None, 150.0) == pytest.approx(0.05 * 1850)


def test_the_choice_minimises_the_bound_and_breaks_near_ties_towards_the_wider_range():
    edges = [0, 50, 200, 1000, 3000, 4000]
    freqs = [0.7, 0.2, 0.07, 0.02, 0.01]
    cands = [100, 200, 500, 1000, 2000, 4000]
    exact = range_tradeoff(edges, freqs, 1000, 0.0, cands, laplace_var)
    least = min(r.rmse_bound for r in exact)
    best = best_range(exact)
    assert best.rmse_bound <= least * 1.1
    assert all(r.x_max <= best.x_max for r in exact if r.rmse_bound <= least * 1.1)
    assert best_range(exact, tolerance=0.0).rmse_bound == least
    # The same shares known only roughly (large frequency variances): the bound keeps the range wide.
    rough = best_range(range_tradeoff(edges, freqs, 1000, 0.0, cands, laplace_var, [0.01] * 5))
    assert rough.x_max > best.x_max
