# The device's table of mechanisms: name -> its randomizer class (SPEC 2.1).
# Every randomizer has quantize(x), params(eps) (or BR's noise(eps)),
# randomize(x, eps) -> (y, clamped) and a `bits` RandomBits; only BR ever
# clamps. The mechanism modules are imported on first use, so a board running
# one mechanism keeps the others' code off its heap.
#
# This is the device's half of the mechanism registry: the server's half
# (support, variance, estimators) is rase_common.mechanisms, whose table is
# tested against this one so that the two never disagree. Adding a mechanism
# adds one row here.
#
# Mean mechanisms (built over the calibration: a reading in [x_min, x_max]):
#   br, duchi, piecewise, hybrid.
# Report kinds beyond the mean (issue 12):
#   binary: on/off (reading > on_above), randomized response (binary_rr);
#   categorical: the band of the reading among `bands` edges, kRR or OUE,
#                whichever has the lower variance for k and eps (categorical).

from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE

# (name, module in rase_device, class, what the randomizer is built over)
RANDOMIZERS = (
    ("br", "randomizer", "BudgetRandomizer", "calibration"),
    ("duchi", "duchi", "DuchiRandomizer", "calibration"),
    ("piecewise", "piecewise", "PiecewiseRandomizer", "calibration"),
    ("hybrid", "piecewise", "HybridRandomizer", "calibration"),
    ("binary", "binary_rr", "OnOffRandomizer", "on_above"),
    ("categorical", "categorical", "BandRandomizer", "bands"),
)
# The one place the deployment default is set: Duchi, nearest the floor of the
# error of the mean at the default eps (docs/evaluation.md, "The default
# mechanism"). The paper's BR is mechanism "br".
DEFAULT_MECHANISM = "duchi"
MECHANISMS = tuple(r[0] for r in RANDOMIZERS)
MEAN_MECHANISMS = tuple(r[0] for r in RANDOMIZERS if r[3] == "calibration")
# Secure aggregation (issue 20): not a local randomizer but Prio3 reports for two
# aggregators that add central noise (rase_device.secagg, built from the control message).
SECURE_MECHANISMS = ("prio3",)
ALL_MECHANISMS = MECHANISMS + SECURE_MECHANISMS


def check_mechanism(name):
    """Return name if it is a known mechanism (a randomizer's or prio3), else raise ValueError."""
    if name not in ALL_MECHANISMS:
        raise ValueError("mechanism must be one of %s, got %r" % (", ".join(ALL_MECHANISMS), name))
    return name


def randomizer_row(name):
    """(name, module, class, built over) of a known mechanism."""
    check_mechanism(name)
    if name in SECURE_MECHANISMS:
        raise ValueError("mechanism %r has no local randomizer: its client is rase_device.secagg.Prio3Client" % name)
    for row in RANDOMIZERS:
        if row[0] == name:
            return row


def randomizer_class(name):
    """The device randomizer class of a mechanism (its module imported now)."""
    _, module, cls, _ = randomizer_row(name)
    mod = __import__("rase_device." + module, None, None, (cls,))
    return getattr(mod, cls)


def make_randomizer(mechanism, calibration, bits=None, on_above=DEFAULT_ON_ABOVE, bands=None):
    """A fresh randomizer of the named mechanism over calibration (mean
    mechanisms), on_above (binary) or bands (categorical)."""
    over = randomizer_row(mechanism)[3]
    cls = randomizer_class(mechanism)
    if over == "on_above":
        return cls(on_above, bits)
    if over == "bands":
        return cls(DEFAULT_BANDS if bands is None else bands, bits)
    return cls(calibration, bits)
