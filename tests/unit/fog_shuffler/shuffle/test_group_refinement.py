"""Group refinement: the paper's Example 2, brute-force optima, complexity."""

import random

import pytest

from fog_shuffler.shuffle.group_refinement import (agglomerative, delta_k, merged_width, optimal_contiguous,
                                           paper_agglomerative, refine, width_of_positions)


def test_rase_example_2():
    # Six contributors at sigma_0 positions (1,4,5,6,3,2).
    assert width_of_positions([{1, 4, 5, 6, 3}, {2}]) == 5
    assert delta_k(5) == 15
    assert width_of_positions([{1, 4, 5}, {6, 3, 2}]) == 4
    assert delta_k(4) == 10
    # Refining the singletons of those six positions into two groups does at
    # least as well as the paper's refined grouping.
    spans = [(p, p) for p in (1, 4, 5, 6, 3, 2)]
    assert merged_width(spans, refine(spans, 2)) <= 4


def set_partitions(items, k):
    """All partitions of `items` into exactly k non-empty blocks."""
    if k == 1:
        yield [list(items)]
        return
    if len(items) == k:
        yield [[i] for i in items]
        return
    if len(items) < k:
        return
    first, rest = items[0], items[1:]
    for p in set_partitions(rest, k - 1):
        yield [[first]] + p
    for p in set_partitions(rest, k):
        for i in range(len(p)):
            yield p[:i] + [[first] + p[i]] + p[i + 1:]


def brute_force_width(spans, k):
    return min(merged_width(spans, p) for p in set_partitions(list(range(len(spans))), min(k, len(spans))))


def contiguous_spans(sizes):
    spans, pos = [], 0
    for s in sizes:
        spans.append((pos, pos + s - 1))
        pos += s
    return spans


def test_matches_brute_force_optimum_for_contiguous_groups():
    rng = random.Random(4)
    for _ in range(300):
        m = rng.randint(1, 8)
        sizes = [rng.randint(1, 6) for _ in range(m)]
        spans = contiguous_spans(sizes)
        rng.shuffle(spans)  # input order must not matter
        for k in range(1, m + 1):
            got = refine(spans, k)
            assert sorted(i for g in got for i in g) == list(range(m))
            assert len(got) == k
            assert merged_width(spans, got) == brute_force_width(spans, k), (sizes, k)


def test_agglomerative_alone_is_not_always_optimal():
    # Sizes [2,1,1,2], k=2: agglomeration merges the two singles first (width 1),
    # ending at width 3; the optimum {2,1},{1,2} has width 2. refine() finds it.
    spans = contiguous_spans([2, 1, 1, 2])
    assert merged_width(spans, agglomerative(spans, 2)) == 3
    assert merged_width(spans, refine(spans, 2)) == 2 == brute_force_width(spans, 2)


def test_non_contiguous_groups_use_agglomeration_and_never_beat_brute_force():
    rng = random.Random(8)
    for _ in range(200):
        n = rng.randint(2, 9)
        pos = list(range(n))
        rng.shuffle(pos)
        cuts = sorted(rng.sample(range(1, n), rng.randint(0, n - 1))) if n > 1 else []
        groups = [pos[a:b] for a, b in zip([0] + cuts, cuts + [n])]
        spans = [(min(g), max(g)) for g in groups]
        for k in range(1, len(spans) + 1):
            got = refine(spans, k)
            assert len(got) == k
            assert merged_width(spans, got) >= brute_force_width(spans, k)


def test_same_choice_as_the_papers_all_pairs_version_on_singletons():
    rng = random.Random(2)
    for _ in range(50):
        n = rng.randint(2, 30)
        k = rng.randint(1, n)
        singles = [[p] for p in range(n)]
        paper = paper_agglomerative(singles, k)
        spans = [(p, p) for p in range(n)]
        assert merged_width(spans, refine(spans, k)) <= width_of_positions(paper)


def test_optimal_contiguous_makes_exactly_k_blocks():
    assert optimal_contiguous([3, 3, 3, 3], 2) == [[0, 1], [2, 3]]
    assert optimal_contiguous([1, 1, 1, 1, 1], 5) == [[0], [1], [2], [3], [4]]
    assert optimal_contiguous([5], 3) == [[0]]


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k must be >= 1"):
        refine([(0, 1)], 0)
