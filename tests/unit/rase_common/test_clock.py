"""SteadyClock: a wall-clock step cannot move a service's time by a minute
in one go; drift is followed gently; a step that lasts is adopted."""

import logging

from rase_common.clock import SteadyClock


class Fake:
    def __init__(self):
        self.mono = 1000.0
        self.wall = 1_700_000_000.0

    def tick(self, s: float, wall_offset: float = 0.0) -> None:
        self.mono += s
        self.wall += s + wall_offset


def clock(f: Fake, **kw) -> SteadyClock:
    return SteadyClock(wall=lambda: f.wall, mono=lambda: f.mono, **kw)


def test_a_transient_step_of_60_s_is_held_off(caplog):
    f = Fake()
    c = clock(f, hold_s=30.0)
    start = c.now()
    with caplog.at_level(logging.WARNING):
        f.tick(1.0, wall_offset=60.0)           # NTP steps the wall clock forward by a minute
        for _ in range(20):
            f.tick(1.0)
            assert abs(c.now() - (start + (f.mono - 1000.0))) < 0.5
        f.tick(1.0, wall_offset=-60.0)          # and back 20 s later
        for _ in range(5):
            f.tick(1.0)
            c.now()
    assert c.steps_held == 1 and c.steps_adopted == 0
    assert "jumped by +60" in caplog.text and "back in line" in caplog.text


def test_a_step_that_lasts_is_adopted():
    f = Fake()
    c = clock(f, hold_s=30.0)
    f.tick(1.0, wall_offset=-120.0)
    for _ in range(40):
        f.tick(1.0)
        c.now()
    assert c.steps_adopted == 1 and abs(c.now() - f.wall) < 1e-6


def test_small_drift_is_followed_at_most_at_the_slew_rate():
    f = Fake()
    c = clock(f, slew=0.01)
    for _ in range(10):
        f.tick(1.0, wall_offset=0.05)            # the wall clock runs 5% fast (well under step_s)
        c.now()
    lag = f.wall - c.now()
    assert 0.35 < lag < 0.45                     # followed 0.01 s per s, not jumped
