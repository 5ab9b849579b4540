# The device's local policy over the precision control message (SPEC 3).
#
# The control message comes from the fusion center over the broker: anyone
# who can publish it could try to make a device report faster, spend more
# budget, or use a calibration its sampler refuses. The device's own config
# bounds what it accepts; a message outside these bounds is ignored whole.
# eps is bounded elsewhere: the device never uses a menu level above its own
# configured eps (AgentCore.eps).
#
# Secure aggregation (mechanism "prio3"): the device seals every helper share
# to the fusion center's HPKE public key pinned here when it was flashed, with
# its key id. A control message names a key id only, never a key: one with
# another key id is refused whole, so nobody who can publish on the control
# topic can make the device seal its shares to them.

from rase_device.mechanisms import ALL_MECHANISMS as KNOWN_MECHANISMS, DEFAULT_MECHANISM

# Grid steps over the range: beyond this the exact sampler's integers grow
# past what small boards handle well (and a hostile range/grid pair is refused).
MAX_GRID_STEPS = 1 << 24


def _hex_key(text):
    """32 bytes from 64 hex digits (None stays None)."""
    if text is None:
        return None
    if not isinstance(text, str) or len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise ValueError("policy prio3_public_key must be 64 hex digits")
    return bytes(int(text[i:i + 2], 16) for i in range(0, 64, 2))


def _num(d, key, default):
    v = d.get(key, default) if d else default
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v:
        raise ValueError("policy %s must be a number, got %r" % (key, v))
    return v


class LocalPolicy:
    """Bounds a control message must respect. Built from the device config's
    "policy" dict; missing keys take defaults derived from its own settings."""

    def __init__(self, period_min_s, x_min_floor=-1e9, x_max_ceiling=1e9, gamma_min=1e-6, gamma_max=1e9,
                 mechanisms=KNOWN_MECHANISMS, max_grid_steps=MAX_GRID_STEPS, eps_min=0.0, eps_max=1e9,
                 period_max_s=1e9, prio3_key_id=None, prio3_public_key=None):
        if not (period_min_s > 0):
            raise ValueError("policy period_min_s must be > 0, got %r" % (period_min_s,))
        if not (x_min_floor < x_max_ceiling):
            raise ValueError("policy x_min_floor must be < x_max_ceiling")
        if not (0 < gamma_min <= gamma_max):
            raise ValueError("policy needs 0 < gamma_min <= gamma_max")
        for m in mechanisms:
            if m not in KNOWN_MECHANISMS:
                raise ValueError("policy mechanism %r is not one this device knows %r" % (m, KNOWN_MECHANISMS))
        if not (0 <= eps_min <= eps_max):
            raise ValueError("policy needs 0 <= eps_min <= eps_max")
        if not (period_max_s >= period_min_s):
            raise ValueError("policy needs period_max_s >= period_min_s")
        self.period_min_s = period_min_s
        self.period_max_s = period_max_s
        self.eps_min = eps_min        # a device never uses a level above its own eps anyway; the fog bounds
        self.eps_max = eps_max        # the menu it will accept reports of
        self.x_min_floor = x_min_floor
        self.x_max_ceiling = x_max_ceiling
        self.gamma_min = gamma_min
        self.gamma_max = gamma_max
        self.mechanisms = tuple(mechanisms)
        self.max_grid_steps = max_grid_steps
        if (prio3_key_id is None) != (prio3_public_key is None):
            raise ValueError("policy prio3_key_id and prio3_public_key are pinned together")
        if prio3_public_key is not None and len(prio3_public_key) != 32:
            raise ValueError("policy prio3_public_key must be 32 bytes (64 hex digits)")
        self.prio3_key_id = prio3_key_id
        self.prio3_public_key = prio3_public_key

    @classmethod
    def from_dict(cls, d, period_s):
        d = d or {}
        return cls(period_min_s=_num(d, "period_min_s", period_s),
                   x_min_floor=_num(d, "x_min_floor", -1e9), x_max_ceiling=_num(d, "x_max_ceiling", 1e9),
                   gamma_min=_num(d, "gamma_min", 1e-6), gamma_max=_num(d, "gamma_max", 1e9),
                   mechanisms=tuple(d.get("mechanisms", KNOWN_MECHANISMS)),
                   eps_min=_num(d, "eps_min", 0.0), eps_max=_num(d, "eps_max", 1e9),
                   period_max_s=_num(d, "period_max_s", 1e9),
                   prio3_key_id=d.get("prio3_key_id"), prio3_public_key=_hex_key(d.get("prio3_public_key")))

    def check(self, msg, seals=True):
        """Raise ValueError naming the first field outside policy. seals: the
        receiver seals Prio3 helper shares (a device), so a prio3 message
        must name the key it pinned; the fog seals nothing and skips that."""
        if msg["period_s"] < self.period_min_s:
            raise ValueError("period_s %r is below this device's minimum %r" % (msg["period_s"], self.period_min_s))
        if msg["period_s"] > self.period_max_s:
            raise ValueError("period_s %r is above this device's maximum %r" % (msg["period_s"], self.period_max_s))
        for e in msg["eps_levels"]:
            if not (self.eps_min <= e <= self.eps_max):
                raise ValueError("eps level %r is outside this device's [%r, %r]" % (e, self.eps_min, self.eps_max))
        if msg["x_min"] < self.x_min_floor or msg["x_max"] > self.x_max_ceiling:
            raise ValueError("range [%r, %r] is outside this device's [%r, %r]"
                             % (msg["x_min"], msg["x_max"], self.x_min_floor, self.x_max_ceiling))
        if not (self.gamma_min <= msg["gamma"] <= self.gamma_max):
            raise ValueError("gamma %r is outside this device's [%r, %r]" % (msg["gamma"], self.gamma_min,
                                                                             self.gamma_max))
        if msg["x_max"] > msg["x_min"] and (msg["x_max"] - msg["x_min"]) / msg["gamma"] > self.max_grid_steps:
            raise ValueError("range / gamma = %r grid steps is more than this device handles (%d)"
                             % ((msg["x_max"] - msg["x_min"]) / msg["gamma"], self.max_grid_steps))
        if msg.get("mechanism", DEFAULT_MECHANISM) not in self.mechanisms:
            raise ValueError("mechanism %r is not allowed on this device %r" % (msg.get("mechanism"), self.mechanisms))
        if seals and "prio3" in msg:
            self.check_prio3_key(msg["prio3"]["key_id"])

    def check_prio3_key(self, key_id):
        """Raise ValueError unless key_id is the helper key this device pinned."""
        if self.prio3_key_id is None:
            raise ValueError("prio3: this device pinned no helper key at flash time (policy prio3_key_id)")
        if key_id != self.prio3_key_id:
            raise ValueError("prio3 key id %r is not this device's pinned key %r" % (key_id, self.prio3_key_id))
