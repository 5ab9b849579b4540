"""Forwarded windows the fusion center has not yet confirmed. Pure: the
service records each window's PUBACK, each WindowReceipt
(rase_common.protocol.window), and sends again what `due` returns.

The broker's PUBACK only says the broker has the window: a Mosquitto SIGKILL
loses what it acknowledged since its last snapshot, and a clean connection
with the fusion center's client id wipes its session, so the broker routes
the window to nobody. The fusion center stores a window before it tells the
fog (rase/v1/windows-kept/{region}); until then the fog's journal keeps the
window as sent but unconfirmed, and after `confirm_s` (doubling each time,
at most `max_s`) it goes out again, the same bytes, which the fusion center
counts as a duplicate. After a restart every unconfirmed window starts its
wait anew.
"""

from __future__ import annotations

Key = tuple[str, int, int]      # region, t, revision


class Unconfirmed:
    def __init__(self, confirm_s: float, max_s: float = 300.0):
        if not 0 < confirm_s <= max_s:
            raise ValueError(f"need 0 < confirm_s <= max_s, got {confirm_s}, {max_s}")
        self.confirm_s = confirm_s
        self.max_s = max_s
        self._since: dict[Key, tuple[float, float]] = {}    # key -> (sent at, wait)
        self._waits: dict[Key, float] = {}                   # the next wait of a window sent again
        self.confirmed = 0
        self.resent = 0

    def __len__(self) -> int:
        return len(self._since)

    def sent(self, key: Key, now: float) -> None:
        """Its PUBACK came (or, after a restart, it was sent before)."""
        self._since[key] = (now, self._waits.get(key, self.confirm_s))

    def confirm(self, keys: list[Key]) -> int:
        """The fusion center stored these; how many were awaited."""
        n = 0
        for key in keys:
            n += self._since.pop(key, None) is not None
            self._waits.pop(key, None)
        self.confirmed += n
        return n

    def due(self, now: float) -> list[Key]:
        """Windows to send again now (forgotten here until their next PUBACK), oldest first."""
        out = sorted(k for k, (at, wait) in self._since.items() if now - at >= wait)
        for key in out:
            _, wait = self._since.pop(key)
            self._waits[key] = min(wait * 2, self.max_s)
        self.resent += len(out)
        return out

    def next_due_s(self, now: float) -> float | None:
        if not self._since:
            return None
        return max(0.0, min(at + wait for at, wait in self._since.values()) - now)

    def forget(self, keys: list[Key]) -> None:
        """Windows the journal no longer has to send (confirmed or pruned meanwhile)."""
        for key in keys:
            self._since.pop(key, None)
            self._waits.pop(key, None)
