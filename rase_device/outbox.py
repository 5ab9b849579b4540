# The device's reports until the fog has them. MicroPython-compatible.
#
# Two parts, bounded together by `capacity`:
# - queued: made, not yet handed to the broker (pop / push_front);
# - awaiting: handed to the broker, kept until the fog's receipt says it
#   journaled them (fog_shuffler.receipts). The broker's PUBACK is not
#   enough: Mosquitto acknowledges before its snapshot (a broker SIGKILL
#   loses what it acknowledged since), and a client that wipes the fog's
#   session sends what the broker routes meanwhile to nobody. An awaiting
#   report goes back to the queue, the same bytes (no budget is spent again:
#   the ledger charged it when it was made), after a reconnect or once
#   `confirm_s` passed without a receipt, doubling that wait each time up to
#   `confirm_max_s`; the fog drops the repeat by (device, t).
# confirm_s = 0 (a fog that sends no receipts) forgets a report at its PUBACK.
# When full, the oldest report is dropped and counted: fresh readings matter
# more than stale ones and a board has little RAM.


class Outbox:
    def __init__(self, capacity, confirm_s=0, confirm_max_s=300):
        if capacity < 1:
            raise ValueError("outbox capacity must be >= 1, got %r" % (capacity,))
        if confirm_s < 0 or confirm_max_s < confirm_s:
            raise ValueError("outbox needs 0 <= confirm_s <= confirm_max_s")
        self.capacity = capacity
        self.confirm_s = confirm_s
        self.confirm_max_s = confirm_max_s
        self._items = []          # (topic, payload, t), oldest first
        self._awaiting = []       # [t, (topic, payload, t), handed at], oldest first
        self._waits = {}          # t -> how long a re-sent report waits for its receipt this time
        self._early = []          # receipted before the transport handed them here (its PUBACK came later)
        self.dropped = 0
        self.resent = 0           # reports handed to the broker again for want of a receipt
        self.kept = 0             # reports the fog's receipts confirmed

    def __len__(self):
        """Reports still to hand to the broker."""
        return len(self._items)

    @property
    def awaiting(self):
        """Reports handed to the broker and not yet receipted by the fog."""
        return len(self._awaiting)

    def _full(self):
        return len(self._items) + len(self._awaiting) >= self.capacity

    def put(self, item):
        while self._full():
            old = self._awaiting.pop(0)[1] if self._awaiting else self._items.pop(0)
            if isinstance(old, tuple) and len(old) > 2:
                self._waits.pop(old[2], None)
            self.dropped += 1
        self._items.append(item)

    def peek(self):
        return self._items[0] if self._items else None

    def pop(self):
        return self._items.pop(0)

    def push_front(self, item):
        """Return an item that could not be sent to the head of the queue."""
        if self._full():
            self.dropped += 1
            return
        self._items.insert(0, item)

    def handed(self, item, now):
        """The broker has `item` (its PUBACK came, or the transport resends it
        itself): kept until the fog's receipt when receipts are on."""
        if not self.confirm_s or not isinstance(item, tuple) or len(item) < 3:
            return
        if item[2] in self._early:          # the fog's receipt overtook the broker's PUBACK
            self._early.remove(item[2])
            self.kept += 1
            return
        for entry in self._awaiting:
            if entry[0] == item[2]:
                entry[2] = now
                return
        self._awaiting.append([item[2], item, now])

    def _wait(self, t):
        return self._waits.get(t, self.confirm_s)

    def confirm(self, ts):
        """The fog's receipt: it has the reports of these timestamps; how many were awaited."""
        kept = {}
        for t in ts:
            kept[t] = True
            self._waits.pop(t, None)
        before = len(self._awaiting)
        found = {}
        for e in self._awaiting:
            if e[0] in kept:
                found[e[0]] = True
        self._awaiting = [e for e in self._awaiting if e[0] not in kept]
        # One re-queued and receipted meanwhile needs no second hand-off.
        self._items = [i for i in self._items if not isinstance(i, tuple) or len(i) < 3 or i[2] not in kept]
        # One not yet handed here (the receipt came before the transport saw its PUBACK): remembered, a few.
        for t in ts:
            if t not in found and t not in self._early:
                self._early.append(t)
        del self._early[:-16]
        n = before - len(self._awaiting)
        self.kept += n
        return n

    def resend_due(self, now, all_of_them=False):
        """Put back at the head of the queue what waited its time without a
        receipt (all of them: after a reconnect); how many. Each waits twice
        as long the next time, so a fog that is down costs few repeats."""
        due = []  # type: list
        keep = []  # type: list
        for e in self._awaiting:
            (due if all_of_them or now - e[2] >= self._wait(e[0]) else keep).append(e)
        if not due:
            return 0
        self._awaiting = keep
        for e in reversed(due):
            self._items.insert(0, e[1])
            if not all_of_them:
                self._waits[e[0]] = min(self._wait(e[0]) * 2, self.confirm_max_s)
        self.resent += len(due)
        return len(due)

    def next_resend_s(self, now):
        """Seconds until the oldest awaiting report is due again; None when none waits."""
        if not self._awaiting:
            return None
        return max(0.0, min(e[2] + self._wait(e[0]) for e in self._awaiting) - now)
