# Wire format of what the agent sends and reads (SPEC 3). The agent owns the
# report and status messages; rase_common.protocol.report holds the pydantic models that
# consumers validate them with. The precision control message is owned by the
# fusion center; the agent parses it defensively here.

import json

from rase_device.interval import check_interval
from rase_device.mechanisms import DEFAULT_MECHANISM, MEAN_MECHANISMS, check_mechanism
from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE, check_bands

VERSION = 1
STATES = ("online", "offline", "budget_exhausted", "no_eps_level", "control_rejected", "ledger_unreadable",
          "ledger_unwritable", "awaiting_control")
# Secure aggregation (rase_device.secagg): the Prio3 report kinds and products a control message may name.
PRIO3 = "prio3"
PRIO3_KINDS = ("sum", "count", "histogram")
# 0: the reporting period; None: the params' own interval_s ("interval": issue 28, rase_device.interval).
PRIO3_PRODUCT_PERIODS = (("per-t", 0), ("hourly", 3600), ("daily", 86400), ("interval", None))
MAX_PRIO3_BUCKETS = 32
MAX_CONTROL_BYTES = 4096
MAX_EPS_LEVELS = 16
CONTROL_TOPIC = "rase/v1/control/precision"


def report_topic(region, device):
    return "rase/v1/reports/%s/%s" % (region, device)


def status_topic(device):
    return "rase/v1/status/%s" % (device,)


def feedback_topic(region, device):
    """Where the fog tells one device why it rejects its reports (only that device reads it)."""
    return "rase/v1/feedback/%s/%s" % (region, device)


def check_name(field, value):
    """Topic levels must not contain MQTT separators or wildcards."""
    if not isinstance(value, str) or not value or len(value) > 64:
        raise ValueError("%s must be a non-empty string of at most 64 characters, got %r" % (field, value))
    for ch in "/+#\x00 ":
        if ch in value:
            raise ValueError("%s must not contain %r, got %r" % (field, ch, value))
    return value


def encode_report(t, y, eps, seq):
    return json.dumps({"v": VERSION, "t": t, "y": y, "eps": eps, "seq": seq}, separators=(",", ":"))


def encode_status(state, privacy=None, counts=None):
    """Status payload; `privacy` (AgentCore.privacy_spent) says what the device
    spends: eps per report, per hour at its cadence, and in this budget period;
    `counts` what became of its reports: made, delivered (acknowledged by the
    broker), rejected_by_fog (the fog said so on the device's feedback topic),
    late_by_fog (the fog's receipt said they came after its allowed lateness)."""
    if state not in STATES:
        raise ValueError("unknown status %r" % (state,))
    msg = {"v": VERSION, "state": state}
    if privacy:
        msg["privacy"] = privacy
    if counts:
        msg["counts"] = counts
    return json.dumps(msg, separators=(",", ":"))


MAX_RECEIPT_BYTES = 4096


def parse_receipt(payload):
    """The fog's receipt on the feedback topic (fog_shuffler.receipts):
    (list of timestamps kept, how many of them were late), None for another
    feedback message (no "kept"), ValueError for a malformed one."""
    if len(payload) > MAX_RECEIPT_BYTES:
        raise ValueError("receipt of %d bytes" % len(payload))
    try:
        msg = json.loads(payload)
    except (ValueError, TypeError):
        raise ValueError("receipt is not JSON") from None
    if not isinstance(msg, dict) or msg.get("v") != VERSION:
        raise ValueError("receipt is not a version %d object" % VERSION)
    kept = msg.get("kept")
    if kept is None:
        return None
    late = msg.get("late", 0)
    if not isinstance(kept, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in kept):
        raise ValueError("receipt kept must be a list of integers")
    if not isinstance(late, int) or isinstance(late, bool) or not 0 <= late <= len(kept):
        raise ValueError("receipt late must be an integer in [0, len(kept)]")
    return kept, late


_CONTROL_NUMBERS = ("beta", "rho", "x_min", "x_max", "gamma", "period_s")


def _finite_number(key, val):
    # NaN and infinities parse from JSON here (Python and MicroPython accept them).
    if not isinstance(val, (int, float)) or isinstance(val, bool) or val != val or val in (1e400, -1e400):
        raise ValueError("control field %s must be a finite number, got %r" % (key, val))
    return val


def parse_control(payload):
    """Decode a precision control message into a dict, or raise ValueError.

    Keys: beta, rho, x_min, x_max, gamma, period_s, eps_levels (sorted list),
    mechanism ("br" when absent), on_above and bands (the binary and
    categorical mechanisms' public mapping of a reading; defaults when
    absent), epoch0 when present, since_t, previous_period_s and
    previous_epoch0 when the schedule changes (rase_device.schedule), and
    interval_s for an interval product (one report per interval, the mean of
    its readings: rase_device.interval; absent: one report per period). Every
    number must be finite; range checks happen in Calibration and the
    device's LocalPolicy.
    """
    if len(payload) > MAX_CONTROL_BYTES:
        raise ValueError("control message is larger than %d bytes" % MAX_CONTROL_BYTES)
    try:
        msg = json.loads(payload)
    except (ValueError, TypeError):
        raise ValueError("control message is not JSON") from None
    if not isinstance(msg, dict) or msg.get("v") != VERSION:
        raise ValueError("control message has no supported version")
    out = {}  # type: dict
    for key in _CONTROL_NUMBERS:
        out[key] = _finite_number(key, msg.get(key))
    levels = msg.get("eps_levels")
    if not isinstance(levels, list) or not levels or len(levels) > MAX_EPS_LEVELS:
        raise ValueError("control field eps_levels must be a list of 1 to %d numbers" % MAX_EPS_LEVELS)
    for e in levels:
        if not (_finite_number("eps level", e) > 0):
            raise ValueError("control eps level must be a positive number, got %r" % (e,))
    out["eps_levels"] = sorted(levels)
    try:
        out["mechanism"] = check_mechanism(msg.get("mechanism", DEFAULT_MECHANISM))
    except ValueError as e:
        raise ValueError("control field " + str(e)) from None
    if "epoch0" in msg:
        out["epoch0"] = _finite_number("epoch0", msg["epoch0"])
    _parse_schedule_change(msg, out)
    out["on_above"] = _finite_number("on_above", msg.get("on_above", DEFAULT_ON_ABOVE))
    try:
        out["bands"] = check_bands(msg.get("bands", DEFAULT_BANDS))
    except ValueError as e:
        raise ValueError("control field " + str(e)) from None
    if msg.get("interval_s") is not None:
        try:
            out["interval_s"] = check_interval(_finite_number("interval_s", msg["interval_s"]), out["period_s"])
        except ValueError as e:
            raise ValueError("control field " + str(e)) from None
        if out["mechanism"] not in MEAN_MECHANISMS + (PRIO3,):
            raise ValueError("control field interval_s averages readings: it needs a mean mechanism or prio3 sum")
    if out["mechanism"] == PRIO3:
        out["prio3"] = parse_prio3(msg.get("prio3"))
        if out["eps_levels"] != [out["prio3"]["dp_eps"]]:
            raise ValueError("control field eps_levels must be [prio3.dp_eps] when mechanism is prio3")
        if out.get("interval_s") != out["prio3"].get("interval_s"):
            raise ValueError("control field interval_s must be prio3.interval_s (set exactly for prio3.product "
                             "interval)")
    return out


def _int_field(d, key, lo, hi):
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ValueError("control field prio3.%s must be an integer in [%d, %d], got %r" % (key, lo, hi, v))
    return v


def parse_prio3(d):
    """The control message's prio3 object: kind, product, dp_eps (per release),
    key_id (the helper's key the device must have pinned), and max_measurement
    (sum) or buckets and chunk_length (histogram). Raises ValueError."""
    if not isinstance(d, dict):
        raise ValueError("control field prio3 must be an object when mechanism is prio3")
    kind, product = d.get("kind"), d.get("product", "per-t")
    if kind not in PRIO3_KINDS:
        raise ValueError("control field prio3.kind must be one of %s, got %r" % (", ".join(PRIO3_KINDS), kind))
    if product not in [p[0] for p in PRIO3_PRODUCT_PERIODS]:
        raise ValueError("control field prio3.product must be per-t, hourly, daily or interval, got %r" % (product,))
    if product != "per-t" and kind != "sum":
        raise ValueError("control field prio3.product %r averages readings: it needs kind sum" % (product,))
    out = {"kind": kind, "product": product, "key_id": check_name("control field prio3.key_id", d.get("key_id")),
           "dp_eps": _finite_number("prio3.dp_eps", d.get("dp_eps"))}
    if (product == "interval") != (d.get("interval_s") is not None):
        raise ValueError("control field prio3.interval_s is set exactly for prio3.product interval")
    if product == "interval":
        try:
            out["interval_s"] = check_interval(_finite_number("prio3.interval_s", d["interval_s"]), 0)
        except ValueError as e:
            raise ValueError("control field prio3." + str(e)) from None
    if not out["dp_eps"] > 0:
        raise ValueError("control field prio3.dp_eps must be > 0")
    if kind == "sum":
        out["max_measurement"] = _int_field(d, "max_measurement", 1, (1 << 32) - 1)
    elif kind == "histogram":
        out["buckets"] = _int_field(d, "buckets", 2, MAX_PRIO3_BUCKETS)
        out["chunk_length"] = _int_field(d, "chunk_length", 1, out["buckets"])
    return out


def _parse_schedule_change(msg, out):
    """since_t, previous_period_s and previous_epoch0 come together (a change
    of schedule, rase_device.schedule), or not at all."""
    keys = ("since_t", "previous_period_s", "previous_epoch0")
    present = [k for k in keys if msg.get(k) is not None]
    if not present:
        return
    if len(present) != 3:
        raise ValueError("control fields since_t, previous_period_s and previous_epoch0 come together")
    since = msg["since_t"]
    if not isinstance(since, int) or isinstance(since, bool) or since < 0:
        raise ValueError("control field since_t must be an integer >= 0, got %r" % (since,))
    out["since_t"] = since
    out["previous_period_s"] = _finite_number("previous_period_s", msg["previous_period_s"])
    out["previous_epoch0"] = _finite_number("previous_epoch0", msg["previous_epoch0"])
    if not (out["previous_period_s"] > 0):
        raise ValueError("control field previous_period_s must be > 0")
