# The device's randomizer for a deployment's mechanism name (SPEC 2.1 BR by
# default). Every randomizer has quantize(x), randomize(x, eps) -> (y, clamped)
# and a `bits` RandomBits; only BR ever clamps. The mechanism modules are
# imported on first use, so a board running BR keeps their code off its heap.

DEFAULT_MECHANISM = "br"
MECHANISMS = ("br", "duchi", "piecewise", "hybrid")


def check_mechanism(name):
    """Return name if it is a known mechanism, else raise ValueError."""
    if name not in MECHANISMS:
        raise ValueError("mechanism must be one of %s, got %r" % (", ".join(MECHANISMS), name))
    return name


def make_randomizer(mechanism, calibration, bits=None):
    """A fresh randomizer of the named mechanism over calibration."""
    check_mechanism(mechanism)
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
