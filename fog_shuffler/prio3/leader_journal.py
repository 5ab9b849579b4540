"""The leader's durable state (secure aggregation, issue 20), in the fog's
journal database (SQLite, WAL, synchronous=FULL), beside fog_shuffler.journal.

A report's shares are kept as one `record`: nonce || public share || leader
share || sealed helper share, of the sizes the leader's params fix
(Prio3Params.report_sizes), so a window's reports are one matrix of bytes,
one row per report (issue 30: the share bytes stay in arrays end to end).

- `prio3_open`: accepted Prio3 reports of open windows, one row each, with
  the device (the fog may know who reported; nothing leaves with it). A batch
  of them is committed before the broker gets its acknowledgement.
- `prio3_seen`: per closed window, the nonces of its reports and their
  devices (a repeat is rejected at ingest; with those of `prio3_open`, what a
  restart rebuilds the leader's nonces from).
- `prio3_batch_blob`: a closed window's records in the order the leader
  shuffled and fixed at close, concatenated, WITHOUT the devices: identities
  are stripped at close, in the same transaction that marks the window closed.
- `prio3_windows`: each closed window's step: `forwarded` (its batch is in the
  outbox; waiting for the helper's verifier shares), `done` (the leader's
  noisy aggregate share is in the outbox), `dropped` (with the reason).
- `prio3_replies`: the helper's verifier-share parts, stored before they are
  acknowledged.
- `prio3_outbox`: the messages for the helper, stored before the first send,
  so a restart resends the same bytes. In particular the leader's noise is
  drawn once: its noisy share is stored in the transaction that forgets the
  window's shares, and only ever resent.
- `prio3_views`: per window, the reports refused at ingest since the region's
  previous window (by reason, written at close) and the leader's statement
  (written with its share, and queued for rase/v1/prio3/statements/{region}
  at seq STATEMENT_SEQ): what a published aggregate is compared with.

A journal written before issue 30 (`prio3_reports`, `prio3_nonces`,
`prio3_batch`: a row per report) is moved into these tables when it is opened.
"""

from __future__ import annotations

import json

from rase_common import deadletter
from rase_common.sqlite import storage_errors

SHARE_SEQ = 1 << 30   # the leader's share follows its batch parts (0, 1, ...) in the outbox
STATEMENT_SEQ = SHARE_SEQ + 1   # then its statement, for its own topic (a sender of its own)

SCHEMA = """
CREATE TABLE IF NOT EXISTS prio3_open (region TEXT, t INTEGER, device TEXT, record BLOB, eps REAL);
CREATE TABLE IF NOT EXISTS prio3_seen (region TEXT, t INTEGER, devices TEXT, nonces BLOB, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_batch_blob (region TEXT, t INTEGER, records BLOB, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_windows (region TEXT, t INTEGER, state TEXT, params TEXT, total INTEGER,
                                          forwarded_at REAL, reason TEXT, sent_at REAL, PRIMARY KEY (region, t));
CREATE TABLE IF NOT EXISTS prio3_replies (region TEXT, t INTEGER, first INTEGER, payload TEXT,
                                          PRIMARY KEY (region, t, first));
CREATE TABLE IF NOT EXISTS prio3_outbox (region TEXT, t INTEGER, seq INTEGER, payload TEXT, sent INTEGER DEFAULT 0,
                                         PRIMARY KEY (region, t, seq));
CREATE TABLE IF NOT EXISTS prio3_views (region TEXT, t INTEGER, ingest TEXT, statement TEXT,
                                        PRIMARY KEY (region, t));
"""
NONCE = 16

# region, t, device, record (nonce || public || leader || sealed), eps
ReportRow = tuple[str, int, str, bytes, float]


# Its answers' outbox may hold dead letters (rase_common.deadletter).
deadletter.register_outbox("prio3_outbox", "sent")

class LeaderJournal:
    def __init__(self, db):  # noqa: ANN001 - the fog journal's sqlite3 connection
        self.db = db
        with storage_errors("fog journal"):
            db.executescript(SCHEMA)
            self._move_old_tables()

    def _move_old_tables(self) -> None:
        """A journal of before issue 30 (a row per report in prio3_reports, prio3_batch, prio3_nonces): its rows
        moved into this layout, in one transaction, then the old tables dropped."""
        old = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name IN "
                                             "('prio3_reports', 'prio3_batch', 'prio3_nonces')")}
        if not old:
            return
        with self.db:
            self.db.execute("BEGIN")
            if "prio3_reports" in old:
                self.db.execute("INSERT INTO prio3_open SELECT region, t, device, nonce || public || leader || sealed, "
                                "eps FROM prio3_reports ORDER BY rowid")
            if "prio3_batch" in old:
                rows: dict[tuple[str, int], list[bytes]] = {}
                for region, t, record in self.db.execute("SELECT region, t, nonce || public || leader || sealed "
                                                         "FROM prio3_batch ORDER BY region, t, pos"):
                    rows.setdefault((region, t), []).append(bytes(record))
                self.db.executemany("INSERT OR REPLACE INTO prio3_batch_blob VALUES (?,?,?)",
                                    [(r, t, b"".join(v)) for (r, t), v in rows.items()])
            if "prio3_nonces" in old:
                seen: dict[tuple[str, int], list[tuple[str, bytes]]] = {}
                for nonce, region, t, device in self.db.execute("SELECT nonce, region, t, device FROM prio3_nonces"):
                    seen.setdefault((region, t), []).append((device, bytes(nonce)))
                self.db.executemany("INSERT OR REPLACE INTO prio3_seen VALUES (?,?,?,?)",
                                    [(r, t, "\n".join(d for d, _ in v), b"".join(n for _, n in v))
                                     for (r, t), v in seen.items()])
            for name in sorted(old):
                self.db.execute(f"DROP TABLE {name}")

    # -- ingest ------------------------------------------------------------------
    def add(self, reports: list[ReportRow], replies: list[tuple[str, int, int, str]]) -> None:
        """One transaction: accepted reports and helper replies."""
        if not reports and not replies:
            return
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            self.write(reports, replies)

    def write(self, reports: list[ReportRow], replies: list[tuple[str, int, int, str]]) -> None:
        """What add() writes, inside a transaction the caller opened (the fog's one per batch).
        A report is never written twice: the windows take a (device, t) once, across restarts."""
        if reports:
            self.db.executemany("INSERT INTO prio3_open VALUES (?,?,?,?,?)", reports)
        if replies:
            self.db.executemany("INSERT OR IGNORE INTO prio3_replies VALUES (?,?,?,?)", replies)

    def open_reports(self) -> list[tuple[str, int, str, float, float, str]]:
        """The windows' view of the open reports (region, t, device, y, eps, mechanism)."""
        with storage_errors("fog journal"):
            rows = self.db.execute("SELECT region, t, device, eps FROM prio3_open ORDER BY rowid").fetchall()
        return [(r, t, d, 0.0, eps, "prio3") for r, t, d, eps in rows]

    def nonces(self) -> dict[bytes, tuple[str, int, str]]:
        """Every nonce the leader took and has not pruned: (region, t, device) by nonce."""
        out: dict[bytes, tuple[str, int, str]] = {}
        with storage_errors("fog journal"):
            for region, t, devices, nonces in self.db.execute("SELECT region, t, devices, nonces FROM prio3_seen"):
                raw = bytes(nonces)
                for i, d in enumerate(devices.split("\n") if devices else []):
                    out[raw[i * NONCE:(i + 1) * NONCE]] = (region, t, d)
            for region, t, device, record in self.db.execute("SELECT region, t, device, record FROM prio3_open"):
                out[bytes(record[:NONCE])] = (region, t, device)
        return out

    def seen_devices(self) -> dict[tuple[str, int], set[str]]:
        """The devices of every closed window kept in prio3_seen, by (region, t)."""
        with storage_errors("fog journal"):
            return {(region, t): set(devices.split("\n")) for region, t, devices in
                    self.db.execute("SELECT region, t, devices FROM prio3_seen") if devices}

    def records_of(self, region: str, t: int, devices: list[str]) -> bytes:
        """The records of the given devices' reports of a window, in that order, concatenated."""
        with storage_errors("fog journal"):
            got = {d: rec for d, rec in self.db.execute(
                "SELECT device, record FROM prio3_open WHERE region=? AND t=?", (region, t))}
        return b"".join(got[d] for d in devices)

    # -- closing -----------------------------------------------------------------------
    def close(self, region: str, t: int, batch: bytes | None, params: str, messages: list[str], now: float,
              reason: str | None = None, *, ingest: dict | None = None, total: int = 0) -> None:
        """Atomically: the window is closed (the fog's `closed` marker), its
        reports lose their devices and become the ordered batch (`total`
        records, concatenated), the nonces of all its reports are kept with
        their devices, and its messages for the helper are queued; batch
        None: suppressed (reason)."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT OR IGNORE INTO closed VALUES (?,?,0)", (region, t))
            self._keep_nonces(region, t)
            self.db.execute("DELETE FROM prio3_open WHERE region=? AND t=?", (region, t))
            if batch is None or not total:
                # Suppressed (or a leader worker's empty part): whatever else the window held goes too
                # (fog_shuffler.journal's rows).
                self.db.execute("DELETE FROM reports WHERE region=? AND t=?", (region, t))
                self.db.execute("DELETE FROM duplicates WHERE region=? AND t=?", (region, t))
            if batch is None:
                return
            self.db.execute("INSERT OR REPLACE INTO prio3_batch_blob VALUES (?,?,?)", (region, t, batch))
            self.db.execute("INSERT OR REPLACE INTO prio3_windows VALUES (?,?,?,?,?,?,?,?)",
                            (region, t, "forwarded", params, total, now, reason, now))
            self.db.executemany("INSERT OR IGNORE INTO prio3_outbox (region, t, seq, payload) VALUES (?,?,?,?)",
                                [(region, t, i, m) for i, m in enumerate(messages)])
            self.db.execute("INSERT OR REPLACE INTO prio3_views (region, t, ingest) VALUES (?,?,?)",
                            (region, t, json.dumps(ingest or {})))

    def _keep_nonces(self, region: str, t: int) -> None:
        """The window's reports' nonces and devices into prio3_seen (beside those of its earlier batches)."""
        pairs: dict[str, bytes] = {}
        prev = self.db.execute("SELECT devices, nonces FROM prio3_seen WHERE region=? AND t=?", (region, t)).fetchone()
        if prev is not None and prev[0]:
            raw = bytes(prev[1])
            pairs = {d: raw[i * NONCE:(i + 1) * NONCE] for i, d in enumerate(prev[0].split("\n"))}
        for device, nonce in self.db.execute("SELECT device, substr(record, 1, ?) FROM prio3_open WHERE region=? "
                                             "AND t=?", (NONCE, region, t)):
            pairs[device] = bytes(nonce)
        if pairs:
            self.db.execute("INSERT OR REPLACE INTO prio3_seen VALUES (?,?,?,?)",
                            (region, t, "\n".join(pairs), b"".join(pairs.values())))

    def ingest(self, region: str, t: int) -> dict[str, int]:
        """The reports refused at ingest that the window's batch counted, by reason."""
        with storage_errors("fog journal"):
            row = self.db.execute("SELECT ingest FROM prio3_views WHERE region=? AND t=?", (region, t)).fetchone()
        return json.loads(row[0]) if row and row[0] else {}

    def statement(self, region: str, t: int) -> str | None:
        """The leader's statement of a finished window (None: not finished, or forgotten)."""
        with storage_errors("fog journal"):
            row = self.db.execute("SELECT statement FROM prio3_views WHERE region=? AND t=?", (region, t)).fetchone()
        return row[0] if row else None

    def knows(self, region: str, t: int) -> bool:
        """Whether (region, t) is within what this journal remembers (a closed window, or not yet pruned)."""
        with storage_errors("fog journal"):
            if self.db.execute("SELECT 1 FROM prio3_windows WHERE region=? AND t=?", (region, t)).fetchone():
                return True
            row = self.db.execute("SELECT MIN(t) FROM prio3_windows WHERE region=?", (region,)).fetchone()
        return row[0] is not None and t >= row[0]

    def has_reports(self, region: str, t: int) -> bool:
        with storage_errors("fog journal"):
            return self.db.execute("SELECT 1 FROM prio3_open WHERE region=? AND t=? LIMIT 1",
                                   (region, t)).fetchone() is not None

    def batch(self, region: str, t: int) -> bytes:
        """A closed window's records in batch order, concatenated (b"": none, or forgotten)."""
        with storage_errors("fog journal"):
            row = self.db.execute("SELECT records FROM prio3_batch_blob WHERE region=? AND t=?", (region, t)).fetchone()
        return bytes(row[0]) if row else b""

    # -- the exchange ------------------------------------------------------------------------
    def waiting(self) -> list[tuple[str, int, str, int, float, float]]:
        """Windows forwarded and not finished: (region, t, params, total, first forwarded, last sent)."""
        with storage_errors("fog journal"):
            return self.db.execute("SELECT region, t, params, total, forwarded_at, sent_at FROM prio3_windows "
                                   "WHERE state='forwarded' ORDER BY t, region").fetchall()

    def state(self, region: str, t: int) -> str | None:
        with storage_errors("fog journal"):
            row = self.db.execute("SELECT state FROM prio3_windows WHERE region=? AND t=?", (region, t)).fetchone()
        return row[0] if row else None

    def replies(self, region: str, t: int) -> list[str]:
        with storage_errors("fog journal"):
            return [p for (p,) in self.db.execute("SELECT payload FROM prio3_replies WHERE region=? AND t=? "
                                                  "ORDER BY first", (region, t))]

    def finish(self, region: str, t: int, message: str, state: str, reason: str | None = None, *,
               statement: str | None = None) -> None:
        """Atomically: the leader's last message (its noisy share, or why it
        dropped the window) and its statement are queued, and the window's
        shares are forgotten."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM prio3_batch_blob WHERE region=? AND t=?", (region, t))
            self.db.execute("DELETE FROM prio3_replies WHERE region=? AND t=?", (region, t))
            self.db.execute("UPDATE prio3_windows SET state=?, reason=? WHERE region=? AND t=?",
                            (state, reason, region, t))
            self.db.execute("INSERT OR IGNORE INTO prio3_outbox (region, t, seq, payload) VALUES (?,?,?,?)",
                            (region, t, SHARE_SEQ, message))
            if statement is not None:
                self.db.execute("INSERT OR IGNORE INTO prio3_outbox (region, t, seq, payload) VALUES (?,?,?,?)",
                                (region, t, STATEMENT_SEQ, statement))
                self.db.execute("INSERT INTO prio3_views (region, t, statement) VALUES (?,?,?) ON CONFLICT "
                                "(region, t) DO UPDATE SET statement=excluded.statement", (region, t, statement))

    def forget_replies(self, region: str, t: int) -> None:
        """The helper's answer did not fit the batch: forget it (the batch is sent again)."""
        with storage_errors("fog journal"):
            self.db.execute("DELETE FROM prio3_replies WHERE region=? AND t=?", (region, t))

    def resend(self, region: str, t: int, now: float) -> None:
        """The helper has not answered: queue the window's batch again."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            self.db.execute("UPDATE prio3_outbox SET sent=0 WHERE region=? AND t=?", (region, t))
            self.db.execute("UPDATE prio3_windows SET sent_at=? WHERE region=? AND t=?", (now, region, t))

    def unsent(self) -> list[tuple[str, int, int, str]]:
        """The messages for the helper not yet sent (not the statements: they have their own sender)."""
        with storage_errors("fog journal"):
            return self.db.execute("SELECT region, t, seq, payload FROM prio3_outbox WHERE sent=0 AND seq != ? "
                                   "ORDER BY t, region, seq", (STATEMENT_SEQ,)).fetchall()

    def unsent_statements(self) -> list[tuple[str, int, int, str]]:
        with storage_errors("fog journal"):
            return self.db.execute("SELECT region, t, seq, payload FROM prio3_outbox WHERE sent=0 AND seq = ? "
                                   "ORDER BY t, region", (STATEMENT_SEQ,)).fetchall()

    def mark_sent(self, region: str, t: int, seq: int) -> None:
        with storage_errors("fog journal"):
            self.db.execute("UPDATE prio3_outbox SET sent=1 WHERE region=? AND t=? AND seq=?", (region, t, seq))

    def prune(self, t_min: int) -> None:
        """Forget nonces, finished windows and sent messages older than t_min."""
        with storage_errors("fog journal"), self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM prio3_seen WHERE t < ?", (t_min,))
            self.db.execute("DELETE FROM prio3_replies WHERE t < ? AND NOT EXISTS (SELECT 1 FROM prio3_windows w "
                            "WHERE w.region=prio3_replies.region AND w.t=prio3_replies.t AND w.state='forwarded')",
                            (t_min,))
            self.db.execute("DELETE FROM prio3_windows WHERE t < ? AND state != 'forwarded'", (t_min,))
            self.db.execute("DELETE FROM prio3_views WHERE t < ? AND NOT EXISTS (SELECT 1 FROM prio3_windows w "
                            "WHERE w.region=prio3_views.region AND w.t=prio3_views.t)", (t_min,))
            self.db.execute("DELETE FROM prio3_outbox WHERE sent=1 AND t < ? AND NOT EXISTS (SELECT 1 FROM "
                            "prio3_windows w WHERE w.region=prio3_outbox.region AND w.t=prio3_outbox.t "
                            "AND w.state='forwarded')", (t_min,))
