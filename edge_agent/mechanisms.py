# The device's randomizer for a deployment's mechanism name (SPEC 2.1 BR by
# default). Every randomizer has quantize(x), params(eps) (or BR's noise(eps)),
# randomize(x, eps) -> (y, clamped) and a `bits` RandomBits; only BR ever
# clamps. The mechanism modules are imported on first use, so a board running
# BR keeps their code off its heap.
#
# Mean mechanisms: br, duchi, piecewise, hybrid (the reading in [x_min, x_max]).
# Report kinds beyond the mean (issue 12):
#   binary: on/off (reading > on_above), randomized response (binary_rr);
#   categorical: the band of the reading among `bands` edges, kRR or OUE,
#                whichever has the lower variance for k and eps (categorical).

DEFAULT_MECHANISM = "br"
MEAN_MECHANISMS = ("br", "duchi", "piecewise", "hybrid")
MECHANISMS = MEAN_MECHANISMS + ("binary", "categorical")
DEFAULT_ON_ABOVE = 10.0                  # W: an appliance drawing more is on
DEFAULT_BANDS = [10.0, 100.0, 1000.0]    # W: off / low / medium / high
MAX_BANDS = 31                           # k <= 32 categories: an OUE mask fits 32 bits


def check_bands(bands):
    """Band edges: 1 to MAX_BANDS strictly increasing finite numbers."""
    if not isinstance(bands, list) or not 1 <= len(bands) <= MAX_BANDS:
        raise ValueError("bands must be a list of 1 to %d edges" % MAX_BANDS)
    from edge_agent.randomizer import check_finite
    prev = None
    for b in bands:
        check_finite("band edge", b)
        if prev is not None and not b > prev:
            raise ValueError("band edges must increase strictly, got %r" % (bands,))
        prev = b
    return [float(b) for b in bands]


def check_mechanism(name):
    """Return name if it is a known mechanism, else raise ValueError."""
    if name not in MECHANISMS:
        raise ValueError("mechanism must be one of %s, got %r" % (", ".join(MECHANISMS), name))
    return name


class ReportKindRandomizer:
    """Base of the binary and categorical randomizers: one exact oracle per eps
    level, built by the subclass's _oracle(eps) and kept, applied to the
    reading's public mapping (the subclass's quantize)."""

    def __init__(self, bits=None):
        from edge_agent.entropy import RandomBits
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


def make_randomizer(mechanism, calibration, bits=None, on_above=DEFAULT_ON_ABOVE, bands=None):
    """A fresh randomizer of the named mechanism over calibration (mean
    mechanisms), on_above (binary) or bands (categorical)."""
    check_mechanism(mechanism)
    if mechanism == "binary":
        from edge_agent.binary_rr import OnOffRandomizer
        return OnOffRandomizer(on_above, bits)
    if mechanism == "categorical":
        from edge_agent.categorical import BandRandomizer
        return BandRandomizer(DEFAULT_BANDS if bands is None else bands, bits)
    if mechanism == "br":
        from edge_agent.randomizer import BudgetRandomizer
        return BudgetRandomizer(calibration, bits)
    if mechanism == "duchi":
        from edge_agent.duchi import DuchiRandomizer
        return DuchiRandomizer(calibration, bits)
    from edge_agent.piecewise import HybridRandomizer, PiecewiseRandomizer
    if mechanism == "piecewise":
        return PiecewiseRandomizer(calibration, bits)
    return HybridRandomizer(calibration, bits)
