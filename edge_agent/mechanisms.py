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

from edge_agent.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE

DEFAULT_MECHANISM = "br"
MEAN_MECHANISMS = ("br", "duchi", "piecewise", "hybrid")
MECHANISMS = MEAN_MECHANISMS + ("binary", "categorical")


def check_mechanism(name):
    """Return name if it is a known mechanism, else raise ValueError."""
    if name not in MECHANISMS:
        raise ValueError("mechanism must be one of %s, got %r" % (", ".join(MECHANISMS), name))
    return name


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
