# Secure aggregation on the device (SPEC 2.5, issue 20): each reading becomes
# one Prio3 report for two aggregators that do not collude. The fog (Prio3's
# leader) gets the leader's input share in the clear; the fusion center (the
# helper) gets its share sealed with HPKE to the public key this device pinned
# when it was flashed (LocalPolicy), never to a key a control message names.
# MicroPython-compatible.
#
# Report kinds (the control message's prio3.kind):
#   sum:       the reading quantized on the grid as BR does, in [0, max_measurement]
#   count:     1 when the reading is above on_above, else 0
#   histogram: the reading's band among `bands` (rase_device.categorical.band_of)
# Products: "per-t" reports every period; "hourly" / "daily" report once per
# hour / day the average of that hour's quantized readings (sum only), so a
# device's guarantee over a day is 24 (or 1) releases instead of 10,800;
# "interval" (issue 28) reports once per params interval_s the clipped mean of
# the interval's readings, accumulated by the device core
# (rase_device.interval) as in the local-DP modes.

import json

from rase_device.prio3_report import make_report
from rase_device.wire import PRIO3_PRODUCT_PERIODS
_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64encode(data):
    """Standard base64 with padding, as a str (MicroPython's builtins only)."""
    out = bytearray()
    n = len(data)
    for i in range(0, n - n % 3, 3):
        v = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2]
        out += bytes((_B64[v >> 18], _B64[(v >> 12) & 63], _B64[(v >> 6) & 63], _B64[v & 63]))
    rest = n % 3
    if rest:
        v = data[n - rest] << 16
        if rest == 2:
            v |= data[n - 1] << 8
        out += bytes((_B64[v >> 18], _B64[(v >> 12) & 63]))
        out += (bytes((_B64[(v >> 6) & 63],)) + b"=") if rest == 2 else b"=="
    return out.decode()


def product_period_s(product, period_s, interval_s=None):
    """Seconds one report covers: the reporting period for per-t, the params'
    interval_s for interval, else the product's hour or day."""
    for name, seconds in PRIO3_PRODUCT_PERIODS:
        if name == product:
            if seconds is None:
                if interval_s is None:
                    raise ValueError("prio3 product interval needs its interval_s")
                return interval_s
            return seconds or period_s
    raise ValueError("prio3 product must be one of per-t, hourly, daily, interval, got %r" % (product,))


# Domain byte and label of the params digest (TurboSHAKE128): nothing else in RASE hashes with them.
PARAMS_DOMAIN = 0x52
PARAMS_LABEL = b"rase/v1/prio3 params\n"


def eps_text(eps):
    """dp_eps in the params text: 6 significant digits, the same on CPython and
    MicroPython ("1", "0.5", "0.416667")."""
    return "%.6g" % eps


def params_text(params):
    """The canonical text of a prio3 params dict (rase_device.wire.parse_prio3):
    everything that decides what a report means and what its release costs.
    docs/api.md ("The report context") gives the grammar; e.g.
    vdaf=2;max_measurement=4000|product=per-t|helper_key_id=fc-1|noise=discrete_laplace;dp_eps=1
    (an interval product binds its length: product=interval;interval_s=1800)"""
    from rase_device.prio3 import ID_COUNT, ID_HISTOGRAM, ID_SUM
    kind = params["kind"]
    if kind == "sum":
        vdaf = "vdaf=%d;max_measurement=%d" % (ID_SUM, params["max_measurement"])
    elif kind == "count":
        vdaf = "vdaf=%d" % ID_COUNT
    elif kind == "histogram":
        vdaf = "vdaf=%d;length=%d;chunk_length=%d" % (ID_HISTOGRAM, params["buckets"], params["chunk_length"])
    else:
        raise ValueError("prio3 kind must be sum, count or histogram, got %r" % (kind,))
    product = params["product"]
    if product == "interval":
        product = "interval;interval_s=%s" % eps_text(params["interval_s"])
    return "%s|product=%s|helper_key_id=%s|noise=discrete_laplace;dp_eps=%s" % (
        vdaf, product, params["key_id"], eps_text(params["dp_eps"]))


def params_id(params):
    """32 hex digits: TurboSHAKE128(PARAMS_LABEL || params_text, D=0x52), 16
    bytes. In every report's context and in its "p" field."""
    from rase_device.turboshake import TurboShake128
    digest = TurboShake128(PARAMS_DOMAIN).update(PARAMS_LABEL + params_text(params).encode()).read(16)
    return "".join("%02x" % b for b in digest)


def report_ctx(region, t, pid):
    """Prio3's application context: binds a report to its region, its
    timestamp and the deployment's params (pid = params_id(params): the VDAF
    and its parameters, the product, the helper key id and the noise), so a
    report replayed into another window, made under other params, or a sealed
    share moved to another report, fails verification (its helper share does
    not open; the VDAF's own checks use the context too)."""
    return ("rase/v1/prio3/%s/%d/%s" % (region, t, pid)).encode()


def isqrt(n):
    r = 0
    while (r + 1) * (r + 1) <= n:
        r += 1
    return r


def chunk_length(buckets):
    """Prio3Histogram's chunk length: the draft recommends about sqrt(length)."""
    return max(1, isqrt(buckets))


def make_vdaf(params):
    """The Prio3 instance a prio3 params dict (rase_device.wire.parse_prio3) names."""
    from rase_device import prio3
    kind = params["kind"]
    if kind == "sum":
        return prio3.prio3_sum(params["max_measurement"])
    if kind == "count":
        return prio3.prio3_count()
    return prio3.prio3_histogram(params["buckets"], params["chunk_length"])


def encode_report(t, eps, seq, report, pid):
    """A Prio3 report's JSON on the device's usual report topic; "p" is the
    params id its context was made with (the fog refuses another one at once)."""
    nonce, public, leader, sealed = report
    return json.dumps({"v": 1, "t": t, "eps": eps, "seq": seq, "p": pid, "nonce": b64encode(nonce),
                       "pub": b64encode(public), "leader": b64encode(leader), "sealed": b64encode(sealed)},
                      separators=(",", ":"))


class Prio3Client:
    """The device's side of a prio3 deployment: quantize, (average over the
    product's period), shard, prove, seal. Built from the control message's
    prio3 params and the device's own pinned helper key."""

    mechanism = "prio3"

    def __init__(self, params, calibration, helper_public_key, region, on_above=10.0, bands=None, read=None):
        from rase_device.entropy import RandomBits, system_read
        if len(helper_public_key) != 32:
            raise ValueError("the pinned helper public key must be 32 bytes")
        self.params = params
        self.kind = params["kind"]
        self.product = params["product"]
        self.read = read if read is not None else system_read()
        self.bits = RandomBits(self.read)
        self.vdaf = make_vdaf(params)
        self.params_id = params_id(params)     # every report's context binds it
        self.helper_public_key = bytes(helper_public_key)
        self.region = region
        self._measure = self._measurer(calibration, on_above, bands)
        self._acc = None          # (product t, sum of measurements, readings) of the current product period
        # (vdaf, ctx, measurement, helper key, read) -> report; a CPython simulator may hand a faster one
        # that makes the same bytes (rase_common.vdaf.fast_client).
        self.make_report = make_report
        self.control_key = None   # what it was built from (AgentCore keeps it while that does not change)
        # False: the binary encoding (rase_device.prio3_binary: 487 bytes for Sum(4000), read by the fog
        # without JSON); True: the JSON one (encode_report: readable, for debugging). The fog reads both.
        self.as_json = False

    def _measurer(self, calibration, on_above, bands):
        if self.kind == "sum":
            from rase_device.randomizer import BudgetRandomizer
            if calibration.grid_max != self.params["max_measurement"]:
                raise ValueError("prio3 max_measurement %r is not the grid's %d steps"
                                 % (self.params["max_measurement"], calibration.grid_max))
            return BudgetRandomizer(calibration, self.bits).quantize
        from rase_device.randomizer import check_finite
        if self.kind == "count":
            from rase_device.binary_rr import on_off
            return lambda x: on_off(check_finite("reading", x), on_above)
        from rase_device.categorical import band_of
        if bands is None or len(bands) + 1 != self.params["buckets"]:
            raise ValueError("prio3 histogram buckets must be len(bands) + 1")
        return lambda x: band_of(check_finite("reading", x), bands)

    def quantize(self, x):
        """The measurement of reading x (ValueError for a bad reading)."""
        return self._measure(x)

    def report_period_s(self, period_s):
        return product_period_s(self.product, period_s, self.params.get("interval_s"))

    def observe(self, x, now, epoch0, period_s):
        """Take reading x at unix time now: (t, measurement) of a report due
        now, or None. per-t: this period's. hourly/daily: the average of the
        previous product period's readings, once its first later reading comes.
        (An interval product's readings are averaged by the device core, which
        hands the mean to report_mean.)"""
        m = self._measure(x)
        span = self.report_period_s(period_s)
        t = int((now - epoch0) // span)
        if self.product == "per-t":
            return t, m
        due = None
        acc = self._acc
        if acc is not None and acc[0] != t:
            due = (acc[0], (2 * acc[1] + acc[2]) // (2 * acc[2]))   # the rounded mean of the period
            acc = None
        self._acc = (t, m, 1) if acc is None else (t, acc[1] + m, acc[2] + 1)
        return due

    def report(self, t, measurement, eps, seq):
        """The payload of one report of product timestamp t: binary bytes, or
        JSON text with as_json (eps is in the JSON only: the params id
        commits to it)."""
        ctx = report_ctx(self.region, t, self.params_id)
        report = self.make_report(self.vdaf, ctx, measurement, self.helper_public_key, self.read)
        if self.as_json:
            return encode_report(t, eps, seq, report, self.params_id)
        from rase_device.prio3_binary import encode
        return encode(t, seq, self.params_id, report)
