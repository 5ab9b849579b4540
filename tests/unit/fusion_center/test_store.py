"""The fusion center's store marks aggregated exactly the windows an
aggregate was estimated from (issue 29, item 1)."""

from __future__ import annotations

import json

from fusion_center.store import AggregateStore


def _window(region: str, t: int, rev: int, n: int) -> tuple[str, int, int, str, float]:
    return (region, t, rev, json.dumps({"region": region, "t": t, "revision": rev, "n": n}), 0.0)


def _n(payloads: list[str]) -> int:
    return sum(json.loads(p)["n"] for p in payloads)


def test_a_late_batch_that_arrives_while_a_revision_is_estimated_is_in_the_next_revision_once(tmp_path):
    store = AggregateStore(tmp_path / "fusion.db")
    store.add_windows([_window("r1", 7, 0, 3000)])
    store.store_aggregates("all", [(7, '{"n": 3000}', 0, [("r1", 0)])], 1.0)
    store.add_windows([_window("r1", 7, 1, 100)])                   # a late batch: revision 1 of t=7
    # The closer reads what revision 1 is estimated from ...
    estimated_from = [p for _, t, p, _ in store.pending_windows() if t == 7]
    n1 = _n(store.aggregated_windows(7)) + _n(estimated_from)
    # ... and another late batch arrives before revision 1 is stored.
    store.add_windows([_window("r1", 7, 2, 50)])
    store.store_aggregates("all", [(7, json.dumps({"n": n1}), 1, [("r1", 1)])], 2.0)
    assert n1 == 3100
    assert _n(store.aggregated_windows(7)) == 3100               # the batch of 50 is not in it
    pending = [p for _, t, p, _ in store.pending_windows() if t == 7]
    assert _n(pending) == 50                                       # still to fold in, once
    # Revision 2: every report of t once, 3,150 in all.
    n2 = _n(store.aggregated_windows(7)) + _n(pending)
    store.store_aggregates("all", [(7, json.dumps({"n": n2}), 2, [("r1", 2)])], 3.0)
    assert n2 == 3150 and store.pending_windows() == [] and store.revision("all", 7) == 2


def test_a_restart_after_that_revision_still_has_the_batch_pending(tmp_path):
    """The crash half of the bug: the batch that was not estimated is pending on disk, not lost."""
    path = tmp_path / "fusion.db"
    store = AggregateStore(path)
    store.add_windows([_window("r1", 3, 0, 10), _window("r2", 3, 0, 12)])
    store.add_windows([_window("r2", 3, 1, 5)])                    # arrives during the estimate of revision 0
    store.store_aggregates("all", [(3, '{"n": 22}', 0, [("r1", 0), ("r2", 0)])], 1.0)
    store.close()
    again = AggregateStore(path)
    assert [(region, t) for region, t, _, _ in again.pending_windows()] == [("r2", 3)]
    assert _n(again.aggregated_windows(3)) == 22


def test_marking_is_per_timestamp_and_idempotent(tmp_path):
    store = AggregateStore(tmp_path / "fusion.db")
    store.add_windows([_window("r1", 1, 0, 4), _window("r1", 2, 0, 6)])
    assert store.store_aggregates("all", [(1, "{}", 0, [("r1", 0)])], 1.0) == [True]
    assert store.store_aggregates("all", [(1, "{}", 0, [("r1", 0)])], 1.0) == [False]   # a repeat
    assert [t for _, t, _, _ in store.pending_windows()] == [2]
