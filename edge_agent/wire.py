# Wire format of what the agent sends and reads (SPEC 3). The agent owns the
# report and status messages; edge_agent.schema holds the pydantic models that
# consumers validate them with. The precision control message is owned by the
# fusion center; the agent parses it defensively here.

import json

VERSION = 1
STATES = ("online", "offline", "budget_exhausted", "no_eps_level")
CONTROL_TOPIC = "rase/v1/control/precision"


def report_topic(region, device):
    return "rase/v1/reports/%s/%s" % (region, device)


def status_topic(device):
    return "rase/v1/status/%s" % (device,)


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


def encode_status(state):
    if state not in STATES:
        raise ValueError("unknown status %r" % (state,))
    return json.dumps({"v": VERSION, "state": state}, separators=(",", ":"))


_CONTROL_NUMBERS = ("beta", "rho", "x_min", "x_max", "gamma", "period_s")


def parse_control(payload):
    """Decode a precision control message into a dict, or raise ValueError.

    Keys: beta, rho, x_min, x_max, gamma, period_s, eps_levels (list), and
    epoch0 when present. Range checks happen in Calibration.
    """
    try:
        msg = json.loads(payload)
    except ValueError:
        raise ValueError("control message is not JSON")
    if not isinstance(msg, dict) or msg.get("v") != VERSION:
        raise ValueError("control message has no supported version")
    out = {}
    for key in _CONTROL_NUMBERS:
        val = msg.get(key)
        if not isinstance(val, (int, float)) or isinstance(val, bool):
            raise ValueError("control field %s must be a number, got %r" % (key, val))
        out[key] = val
    levels = msg.get("eps_levels")
    if not isinstance(levels, list) or not levels:
        raise ValueError("control field eps_levels must be a non-empty list")
    for e in levels:
        if not isinstance(e, (int, float)) or isinstance(e, bool) or not (e > 0):
            raise ValueError("control eps level must be a positive number, got %r" % (e,))
    out["eps_levels"] = sorted(levels)
    if "epoch0" in msg:
        out["epoch0"] = msg["epoch0"]
    return out
