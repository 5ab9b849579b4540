"""Issue 29, item 1, against a real `rase fusion` process: late batches that
arrive while the previous revision of their t is being estimated (a batch
of 30,000 reports, estimated in a worker thread, then three small ones
right behind it) are each in the final revision exactly once. Before the
store marked aggregated only what an aggregate was estimated from, a batch
that arrived during the estimate was marked with it and then counted again
by the next revision (n 3,100 for 3,000 acknowledged)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from rase_common.protocol.window import WindowMessage
from tests.integration.test_fusion_crash import fusion_and_fog, stop

pytestmark = pytest.mark.integration
T = 1000          # recent_epoch0 makes the wall clock's t this


def newest(db: Path) -> tuple[int, int] | None:
    """(n, revision) of t's stored aggregate."""
    if not db.exists():
        return None
    con = sqlite3.connect(db)
    try:
        row = con.execute("SELECT payload, revision FROM aggregates WHERE t=?", (T,)).fetchone()
    except sqlite3.OperationalError:
        row = None
    finally:
        con.close()
    return None if row is None else (json.loads(row[0])["n"], row[1])


def test_late_batches_arriving_during_a_revisions_estimate_are_counted_once(own_mosquitto, tmp_path):
    db, cfg, log_path, log, proc, pub = fusion_and_fog(tmp_path, own_mosquitto.port, "revisions", 0.2)
    sizes = {0: 3000, 1: 30_000, 2: 100, 3: 50, 4: 20}

    def send(rev: int) -> None:
        values = [float((7 * i + rev) % 4000) for i in range(sizes[rev])]
        w = WindowMessage.uniform("r1", T, values, kind="br", revision=rev)
        pub.publish("rase/v1/windows/r1", w.model_dump_json(), qos=1).wait_for_publish(10)

    try:
        deadline = time.monotonic() + 60
        while "fusion subscribed" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        send(0)
        deadline = time.monotonic() + 60
        while newest(db) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert newest(db) == (3000, 0), log_path.read_text()[-3000:]
        send(1)                                   # its revision takes a while to estimate ...
        time.sleep(0.3)
        for rev in (2, 3, 4):                     # ... and these arrive meanwhile
            send(rev)
            time.sleep(0.05)
        total = sum(sizes.values())
        deadline, last, since = time.monotonic() + 120, None, time.monotonic()
        while time.monotonic() < deadline:
            now = newest(db)
            if now is not None and now[0] >= total:
                break
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > 20:
                break
            time.sleep(0.1)
        time.sleep(1.0)                           # a revision counting a batch twice would come now
        n, revision = newest(db)
        assert n == total, f"n {n} for {total} reports (revision {revision})\n{log_path.read_text()[-3000:]}"
        con = sqlite3.connect(db)
        pending = con.execute("SELECT COUNT(*) FROM windows WHERE done=0").fetchone()[0]
        con.close()
        assert pending == 0 and 1 <= revision <= 4
    finally:
        stop(proc, log_path)
        log.close()
        pub.disconnect()
        pub.loop_stop()
