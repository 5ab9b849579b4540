"""The fast replay's reading table is the documented REFIT mapping, the same
values a RefitColumnSource gives an agent reading at the end of each period."""

from simulators.fleet import ReadingTable
from simulators.refit import RefitColumnSource, bundled_dir, epoch0_of, grid_readings, load_house


def test_reading_table_equals_the_agent_source_at_each_period_end():
    h = load_house(bundled_dir(), 5)   # house 5 has gaps of 35-77 s
    e0 = epoch0_of([h], 8.0)
    t0, n_t = 100, 2000
    for dev, shift in (("h5a1", 0.0), ("h5a8", 3600.0)):
        table = ReadingTable(grid_readings(h, dev, e0, 8.0, t0 + n_t, shift_s=shift)[t0:], t0)
        src = RefitColumnSource(h, dev, phase_s=shift)
        got = [table.at(t) for t in range(t0, t0 + n_t)]
        want = [src.read(e0 + (t + 1) * 8.0 - 1e-3) for t in range(t0, t0 + n_t)]
        assert got == want
        assert any(v is not None for v in got)
    assert table.at(t0 - 1) is None and table.at(t0 + n_t) is None
