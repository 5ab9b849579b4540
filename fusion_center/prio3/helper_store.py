"""The helper's durable state (secure aggregation, issue 20), in the fusion
center's store database (SQLite, WAL, synchronous=FULL), beside
fusion_center.store.

- `prio3_batches`: the leader's batch parts (nonce, public share, sealed
  helper share, the leader's verifier share), stored before they are
  acknowledged. No device id ever reaches them.
- `prio3_shares`: the leader's last message per window (its accepted reports
  and noisy aggregate share, or why it dropped the window).
- `prio3_windows`: `answered` once the helper's verifier shares are queued.
- `prio3_outbox`: the helper's answers, stored before the first send; a
  repeated batch part (the leader asking again) queues them again.
- `prio3_ready`: a window both sides finished: the region's unsharded total
  (the exact sum plus the leader's noise), its counts and reasons. Written in
  the transaction that forgets the window's shares; aggregated per t with the
  helper's own noise, and deleted once the aggregate is stored. The helper's
  noise is drawn when the aggregate is made: nothing carries it before the
  aggregate's own commit, so a crash before that loses nothing but a draw.
- `prio3_done`: windows finished (aggregated or dropped): a late repeat of
  their messages is ignored.

A batch is collected once (DAP's rule; issue 26), across restarts:
- `prio3_part_digests` and `prio3_share_digests`: sha256 of every batch part
  and leader share taken, kept as long as the window's done marker. The same
  bytes again are a retry (answered again while the window is open, ignored
  after); other bytes for a (region, t) already taken, or a new part once it
  is answered or finished, are refused: a second membership never reaches
  verification, let alone a second release.
- `prio3_nonces`: the nonce of every report the helper verified, with its
  window: a nonce seen in another window is rejected (nonce_replayed).
- `prio3_meta`: `pruned_before`, the t below which markers are forgotten; a
  message for an older t is refused (too_old), so pruning never reopens a window.
- `prio3_params`: the helper's own params and the t from which it used them
  (the control messages it published): a batch is verified under the params
  of its t, never under the batch's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from rase_common import deadletter
from rase_common.sqlite import storage_errors

SCHEMA = """
CREATE TABLE IF NOT EXISTS prio3_batches (region TEXT, t INTEGER, first INTEGER, payload TEXT, received REAL,
                                          PRIMARY KEY (region, t, first));
CREATE TABLE IF NOT EXISTS prio3_shares (region TEXT, t INTEGER, payload TEXT, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_windows (region TEXT, t INTEGER, state TEXT, updated REAL, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_outbox (region TEXT, t INTEGER, seq INTEGER, payload TEXT, sent INTEGER DEFAULT 0,
                                         PRIMARY KEY (region, t, seq));
CREATE TABLE IF NOT EXISTS prio3_ready (region TEXT, t INTEGER, record TEXT, ready REAL, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_done (region TEXT, t INTEGER, reason TEXT, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_part_digests (region TEXT, t INTEGER, first INTEGER, digest TEXT,
                                               PRIMARY KEY (region, t, first));
CREATE TABLE IF NOT EXISTS prio3_share_digests (region TEXT, t INTEGER, digest TEXT, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_nonces (nonce BLOB PRIMARY KEY, region TEXT, t INTEGER);
CREATE TABLE IF NOT EXISTS prio3_meta (key TEXT PRIMARY KEY, value INTEGER);
CREATE TABLE IF NOT EXISTS prio3_params (since_t INTEGER PRIMARY KEY, params TEXT);
"""
REFUSAL_SEQ = -1      # the outbox row of a refusal (the helper will not verify the batch)


def digest(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


# Its answers' outbox may hold dead letters (rase_common.deadletter).
deadletter.register_outbox("prio3_outbox", "sent")

class HelperStore:
    def __init__(self, db):  # noqa: ANN001 - the fusion store's sqlite3 connection
        self.db = db
        with storage_errors("fusion store"):
            db.executescript(SCHEMA)

    def add(self, parts: list[tuple[str, int, int, str]], shares: list[tuple[str, int, str]], now: float
            ) -> tuple[list[tuple[str, int]], dict[int, str], dict[int, str]]:
        """One transaction: each part and share judged (part_verdict,
        share_verdict) and the ones taken written. Returns (the windows whose
        batch came again although answered: the leader asked again, their
        answers are queued again; refused parts by index -> reason; refused
        shares by index -> reason)."""
        again: list[tuple[str, int]] = []
        bad_parts: dict[int, str] = {}
        bad_shares: dict[int, str] = {}
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            for i, part in enumerate(parts):
                verdict = self.part_verdict(*part[:3], digest(part[3]))
                if verdict in (None, "repeat"):
                    again += self.write([part], [], now)
                else:
                    bad_parts[i] = verdict
            for j, share in enumerate(shares):
                verdict = self.share_verdict(*share[:2], digest(share[2]))
                if verdict is None:
                    self.write([], [share], now)
                elif verdict not in ("repeat", "late"):
                    bad_shares[j] = verdict
        return again, bad_parts, bad_shares

    def part_verdict(self, region: str, t: int, first: int, d: str) -> str | None:
        """None: a new part, to take; "repeat": the same bytes again (the
        leader's retry); else why it is refused: too_old (below the pruning
        horizon), batch_conflict (other bytes for a part taken, or a new part
        once the window is answered: another membership), batch_after_release."""
        with storage_errors("fusion store"):
            if t < self.pruned_before():
                return "too_old"
            prev = self._one("SELECT digest FROM prio3_part_digests WHERE region=? AND t=? AND first=?",
                             (region, t, first))
            if prev == d:
                return "repeat"
            if prev is not None or self.state(region, t) == "answered":
                return "batch_conflict"
            return "batch_after_release" if self._finished(region, t) else None

    def share_verdict(self, region: str, t: int, d: str) -> str | None:
        """None: a share to take; "repeat" (the same bytes again) and "late"
        (the helper finished the window without one) are ignored; else why it
        is refused: too_old, share_conflict (another share for the window)."""
        with storage_errors("fusion store"):
            if t < self.pruned_before():
                return "too_old"
            prev = self._one("SELECT digest FROM prio3_share_digests WHERE region=? AND t=?", (region, t))
            if prev == d:
                return "repeat"
            if prev is not None:
                return "share_conflict"
            return "late" if self._finished(region, t) else None

    def write(self, parts: list[tuple[str, int, int, str]], shares: list[tuple[str, int, str]], now: float,
              refusals: Sequence[tuple[str, int, str, str | None]] = ()) -> list[tuple[str, int]]:
        """Inside a transaction the caller opened (the fusion center's one per
        intake batch): parts judged new or a repeat, shares judged new, and the
        helper's refusals (region, t, message, finish reason or None). Returns
        the windows whose answers are queued again."""
        again: list[tuple[str, int]] = []
        for region, t, first, payload in parts:
            d = digest(payload)
            prev = self._one("SELECT digest FROM prio3_part_digests WHERE region=? AND t=? AND first=?",
                             (region, t, first))
            if prev == d:                           # the same bytes: answered again while the window is open
                if not self._finished(region, t) and self.state(region, t) == "answered":
                    self.db.execute("UPDATE prio3_outbox SET sent=0 WHERE region=? AND t=? AND seq >= 0",
                                    (region, t))
                    again.append((region, t))
                continue
            self.db.execute("INSERT INTO prio3_batches VALUES (?,?,?,?,?)", (region, t, first, payload, now))
            self.db.execute("INSERT INTO prio3_part_digests VALUES (?,?,?,?)", (region, t, first, d))
        for region, t, payload in shares:
            d = digest(payload)
            if self.db.execute("INSERT OR IGNORE INTO prio3_share_digests VALUES (?,?,?)", (region, t, d)).rowcount:
                self.db.execute("INSERT INTO prio3_shares VALUES (?,?,?)", (region, t, payload))
        for region, t, message, finish in refusals:
            self._refusal(region, t, message, finish)
        return again

    def _one(self, sql: str, args: tuple):  # noqa: ANN202
        row = self.db.execute(sql, args).fetchone()
        return row[0] if row else None

    def pruned_before(self) -> int:
        with storage_errors("fusion store"):
            v = self._one("SELECT value FROM prio3_meta WHERE key='pruned_before'", ())
        return int(v) if v is not None else -(1 << 62)

    def refuse(self, region: str, t: int, message: str, *, finish: str | None = None) -> bool:
        """One transaction: _refusal(); True if the refusal is new."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            return self._refusal(region, t, message, finish)

    def _refusal(self, region: str, t: int, message: str, finish: str | None) -> bool:
        """Queue the helper's refusal of a batch (once per window), and with
        `finish` mark the window finished for that reason (nothing is ever
        released for it); True if the refusal is new."""
        new = self.db.execute("INSERT OR IGNORE INTO prio3_outbox (region, t, seq, payload) VALUES (?,?,?,?)",
                              (region, t, REFUSAL_SEQ, message)).rowcount > 0
        if finish is not None:
            for table in ("prio3_batches", "prio3_shares", "prio3_windows"):
                self.db.execute(f"DELETE FROM {table} WHERE region=? AND t=?", (region, t))
            self.db.execute("INSERT OR IGNORE INTO prio3_done VALUES (?,?,?)", (region, t, finish))
        return new

    def seen_nonces(self, region: str, t: int, nonces: list[bytes]) -> set[bytes]:
        """The nonces among `nonces` the helper verified in another window."""
        out: set[bytes] = set()
        with storage_errors("fusion store"):
            for i in range(0, len(nonces), 500):
                chunk = nonces[i:i + 500]
                rows = self.db.execute(f"SELECT nonce FROM prio3_nonces WHERE nonce IN ({','.join('?' * len(chunk))}) "
                                       "AND NOT (region=? AND t=?)", (*chunk, region, t))
                out.update(bytes(n) for (n,) in rows)
        return out

    # -- the helper's own params, by the t it took them from ---------------------------------------
    def follow_params(self, params_json: str, now_t: int) -> bool:
        """Record the helper's params from now_t on, if they changed; True if so."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            last = self._one("SELECT params FROM prio3_params ORDER BY since_t DESC LIMIT 1", ())
            if last == params_json:
                return False
            if last is not None and json.loads(last).get("product") != json.loads(params_json).get("product"):
                # Another product counts t in other units (hours, days): the old horizon means nothing.
                self.db.execute("DELETE FROM prio3_meta WHERE key='pruned_before'")
            self.db.execute("INSERT OR REPLACE INTO prio3_params VALUES (?,?)", (now_t, params_json))
            self.db.execute("DELETE FROM prio3_params WHERE since_t NOT IN (SELECT since_t FROM prio3_params "
                            "ORDER BY since_t DESC LIMIT 2)")
            return True

    def params_log(self) -> list[tuple[int, str]]:
        """(since_t, params JSON), newest first (at most the current and the previous)."""
        with storage_errors("fusion store"):
            return self.db.execute("SELECT since_t, params FROM prio3_params ORDER BY since_t DESC").fetchall()

    def finished(self, region: str, t: int) -> bool:
        with storage_errors("fusion store"):
            return self._finished(region, t)

    def _finished(self, region: str, t: int) -> bool:
        return self.db.execute("SELECT 1 FROM prio3_done WHERE region=? AND t=?", (region, t)).fetchone() is not None

    def state(self, region: str, t: int) -> str | None:
        with storage_errors("fusion store"):
            row = self.db.execute("SELECT state FROM prio3_windows WHERE region=? AND t=?", (region, t)).fetchone()
        return row[0] if row else None

    def windows(self) -> list[tuple[str, int, str | None, float]]:
        """Windows with a stored batch: (region, t, state, first part received)."""
        with storage_errors("fusion store"):
            return self.db.execute(
                "SELECT b.region, b.t, w.state, MIN(b.received) FROM prio3_batches b LEFT JOIN prio3_windows w "
                "ON w.region=b.region AND w.t=b.t GROUP BY b.region, b.t ORDER BY b.t, b.region").fetchall()

    def parts(self, region: str, t: int) -> list[str]:
        with storage_errors("fusion store"):
            return [p for (p,) in self.db.execute("SELECT payload FROM prio3_batches WHERE region=? AND t=? "
                                                  "ORDER BY first", (region, t))]

    def share(self, region: str, t: int) -> str | None:
        with storage_errors("fusion store"):
            row = self.db.execute("SELECT payload FROM prio3_shares WHERE region=? AND t=?", (region, t)).fetchone()
        return row[0] if row else None

    def answered(self, region: str, t: int, messages: list[str], now: float, nonces: Sequence[bytes] = ()) -> None:
        """Atomically: the answer's parts are queued, the window is `answered`,
        and the nonces it verified are recorded (never verified again elsewhere)."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR IGNORE INTO prio3_nonces VALUES (?,?,?)", [(n, region, t) for n in nonces])
            self.db.executemany("INSERT OR IGNORE INTO prio3_outbox (region, t, seq, payload) VALUES (?,?,?,?)",
                                [(region, t, i, m) for i, m in enumerate(messages)])
            self.db.execute("INSERT OR REPLACE INTO prio3_windows VALUES (?,?,?,?)", (region, t, "answered", now))

    def finish(self, region: str, t: int, record: dict | None, now: float, reason: str | None = None) -> None:
        """Atomically: the window's shares are forgotten, and its record is
        ready to aggregate (record None: dropped, for `reason`)."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            for table in ("prio3_batches", "prio3_shares", "prio3_windows"):
                self.db.execute(f"DELETE FROM {table} WHERE region=? AND t=?", (region, t))
            # The answers go; a refusal stays until it is sent (then pruned).
            self.db.execute("DELETE FROM prio3_outbox WHERE region=? AND t=? AND (seq >= 0 OR sent=1)", (region, t))
            self.db.execute("INSERT OR REPLACE INTO prio3_done VALUES (?,?,?)", (region, t, reason))
            if record is not None:
                self.db.execute("INSERT OR IGNORE INTO prio3_ready VALUES (?,?,?,?)",
                                (region, t, json.dumps(record), now))

    def ready(self) -> list[tuple[str, int, dict, float]]:
        with storage_errors("fusion store"):
            return [(r, t, json.loads(rec), at) for r, t, rec, at in self.db.execute(
                "SELECT region, t, record, ready FROM prio3_ready ORDER BY t, region")]

    def aggregated(self, t: int) -> None:
        """The aggregate of t is stored: its ready records are done."""
        with storage_errors("fusion store"):
            self.db.execute("DELETE FROM prio3_ready WHERE t=?", (t,))

    def unsent(self) -> list[tuple[str, int, int, str]]:
        with storage_errors("fusion store"):
            return self.db.execute("SELECT region, t, seq, payload FROM prio3_outbox WHERE sent=0 "
                                   "ORDER BY t, region, seq").fetchall()

    def mark_sent(self, region: str, t: int, seq: int) -> None:
        with storage_errors("fusion store"):
            self.db.execute("UPDATE prio3_outbox SET sent=1 WHERE region=? AND t=? AND seq=?", (region, t, seq))

    def prune(self, t_min: int) -> None:
        """Forget finished windows' markers, digests, nonces and answers older
        than t_min; from now on a message for a t below it is refused (too_old)."""
        with storage_errors("fusion store"), self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT INTO prio3_meta VALUES ('pruned_before', ?) ON CONFLICT (key) DO UPDATE SET "
                            "value=MAX(value, excluded.value)", (t_min,))
            self.db.execute("DELETE FROM prio3_done WHERE t < ?", (t_min,))
            self.db.execute("DELETE FROM prio3_outbox WHERE sent=1 AND t < ?", (t_min,))
            for table in ("prio3_part_digests", "prio3_share_digests", "prio3_nonces"):
                self.db.execute(f"DELETE FROM {table} WHERE t < ?", (t_min,))
