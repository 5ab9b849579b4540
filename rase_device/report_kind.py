# Base of the binary and categorical device randomizers (report kinds beyond
# the mean): one exact oracle per eps level, built on first use and kept.
# MicroPython-compatible. Its own module, so that the mechanism registry
# (rase_device.mechanisms) and the randomizers do not import each other.

from rase_device.randomizer import check_finite


DEFAULT_ON_ABOVE = 10.0                  # W: an appliance drawing more is on
DEFAULT_BANDS = [10.0, 100.0, 1000.0]    # W: off / low / medium / high
MAX_BANDS = 31                           # k <= 32 categories: an OUE mask fits 32 bits


def check_bands(bands):
    """Band edges: 1 to MAX_BANDS strictly increasing finite numbers."""
    if not isinstance(bands, list) or not 1 <= len(bands) <= MAX_BANDS:
        raise ValueError("bands must be a list of 1 to %d edges" % MAX_BANDS)
    prev = None
    for b in bands:
        check_finite("band edge", b)
        if prev is not None and not b > prev:
            raise ValueError("band edges must increase strictly, got %r" % (bands,))
        prev = b
    return [float(b) for b in bands]


class ReportKindRandomizer:
    """Base of the binary and categorical randomizers: one exact oracle per eps
    level, built by the subclass's _oracle(eps) and kept, applied to the
    reading's public mapping (the subclass's quantize)."""

    def __init__(self, bits=None):
        from rase_device.entropy import RandomBits
        self.bits = bits if bits is not None else RandomBits()
        self._oracles = {}

    def params(self, eps):
        o = self._oracles.get(eps)
        if o is None:
            if not eps > 0:
                raise ValueError("eps must be > 0, got %r" % (eps,))
            o = self._oracles[eps] = self._oracle(eps)
        return o

    def _oracle(self, eps):
        raise NotImplementedError

    def quantize(self, x):
        raise NotImplementedError

    def randomize(self, x, eps):
        return self.params(eps).randomize(self.quantize(x)), False
