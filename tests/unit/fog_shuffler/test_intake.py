"""When the fog takes reports: a batch the journal refused is held and
retried first, windows wait until what queued behind it is taken, and a full
outbox pauses ingest."""

from fog_shuffler.intake import IntakeHold, OutboxCount


class Queue:
    def __init__(self, n: int):
        self.items = list(range(n))

    def take(self, k: int) -> list[int]:
        got, self.items = self.items[:k], self.items[k:]
        return got


def test_normal_batches_are_stamped_with_their_t_and_windows_may_close():
    hold, q = IntakeHold(batch_size=3), Queue(4)
    assert hold.next_batch(q.take, 7) == ([(0, 7), (1, 7), (2, 7)], False)
    assert hold.next_batch(q.take, 8) == ([(3, 8)], False)
    assert hold.next_batch(q.take, 8) == ([], True)          # nothing left: the closer may look
    assert hold.may_close and not hold.stale


def test_a_refused_batch_is_retried_first_with_its_arrival_t_and_windows_wait_for_the_backlog():
    hold, q = IntakeHold(batch_size=3), Queue(7)
    batch, _ = hold.next_batch(q.take, 7)
    hold.failed(batch)                                        # the disk was full
    assert not hold.may_close and hold.stale
    assert hold.next_batch(q.take, 9) == (batch, False)       # the same reports, still stamped t = 7
    assert not hold.may_close                                 # the reports queued meanwhile come first
    assert hold.next_batch(q.take, 9) == ([(3, 9), (4, 9), (5, 9)], False)
    assert not hold.may_close
    assert hold.next_batch(q.take, 9) == ([(6, 9)], True)     # a short batch: the backlog is taken
    assert hold.may_close


def test_the_outbox_count_pauses_ingest_at_its_limit_and_wakes_the_forwarder():
    woken, gauge = [], type("G", (), {"value": None, "set": lambda self, v: setattr(self, "value", v)})()
    out = OutboxCount(limit=2, gauge=gauge, wakeup=lambda: woken.append(1))
    out.restored(1)
    assert not out.full and gauge.value == 1
    out.added()
    assert out.full and gauge.value == 2 and woken == [1]
    out.sent()
    out.sent()
    out.sent()                                                # never below zero
    assert out.size == 0 and gauge.value == 0 and not out.full
