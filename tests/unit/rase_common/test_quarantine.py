"""The quarantine table: every rejected input counted and (best effort)
stored; a batch of them in one transaction, so a flood of bad reports costs
one fsync per batch, not two per report."""

from __future__ import annotations

import logging
import sqlite3

from prometheus_client import CollectorRegistry, Counter

from rase_common.quarantine import Quarantine
from rase_common.sqlite import open_wal

LOG = logging.getLogger("test.quarantine")


def make(tmp_path, keep: int = 1000) -> tuple[Quarantine, Counter, list[str]]:
    db = open_wal(tmp_path / "q.sqlite", "")
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    counter = Counter("rejected", "rejected", ["reason"], registry=CollectorRegistry())
    return Quarantine(db, counter, LOG, keep=keep), counter, statements


def test_a_batch_is_one_transaction_pruned_once(tmp_path):
    q, counter, statements = make(tmp_path, keep=50)
    statements.clear()
    with q.batch():
        for i in range(120):
            q.put("rase/v1/reports/r1/d1", "t_out_of_range" if i % 2 else "oversized", f"#{i}", b"{}")
    kinds = [s.split()[0].upper() for s in statements]
    assert kinds.count("BEGIN") == 1 and kinds.count("COMMIT") == 1 and kinds.count("DELETE") == 1
    assert kinds.index("BEGIN") == 0 and kinds[-1] == "COMMIT"
    assert counter.labels("t_out_of_range")._value.get() == 60 and counter.labels("oversized")._value.get() == 60
    details = [r[3] for r in q.rows(1000)]
    assert details == [f"#{i}" for i in range(119, 69, -1)]     # the newest 50 kept


def test_outside_a_batch_each_row_is_stored_and_pruned_at_once(tmp_path):
    q, _, statements = make(tmp_path, keep=3)
    for i in range(5):
        q.put("windows", "schema", f"#{i}", b"x")
    assert [r[3] for r in q.rows()] == ["#4", "#3", "#2"]
    assert not any(s.upper().startswith("BEGIN") for s in statements)


def test_a_store_that_cannot_be_written_loses_the_rows_not_the_counts(tmp_path):
    q, counter, _ = make(tmp_path)
    q.put("windows", "schema", "first", b"x")
    ro = sqlite3.connect(f"file:{tmp_path / 'q.sqlite'}?mode=ro", uri=True, isolation_level=None)
    q.db = ro                                      # as if the disk went read-only
    with q.batch():
        q.put("windows", "schema", "second", b"x")
        q.put("windows", "not_json", "third", b"x")
    assert counter.labels("schema")._value.get() == 2 and counter.labels("not_json")._value.get() == 1
    assert not ro.in_transaction
    assert [r[3] for r in q.rows()] == ["first"]
