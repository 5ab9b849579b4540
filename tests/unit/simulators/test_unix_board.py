"""The MicroPython unix port runs the device core as a board would."""

import pytest

from simulators.unix_board import UnixPortError

pytestmark = pytest.mark.micropython


def test_device_core_imports_and_draws_from_the_os_csprng(micropython_unix):
    out = micropython_unix("""
import sys
from rase_device.randomizer import BudgetRandomizer, Calibration
r = BudgetRandomizer(Calibration(0.5, 0.9, 0.0, 4000.0, 1.0))
y, clamped = r.randomize(100.0, 1.0)
print(sys.implementation.name, type(y).__name__, clamped)
""")
    assert out.split() == ["micropython", "float", "True"]


def test_a_failing_snippet_raises_with_its_traceback(micropython_unix):
    with pytest.raises(UnixPortError, match="ZeroDivisionError"):
        micropython_unix("print(1 // 0)")
