"""The messages of the secure-aggregation mode (issue 20; docs/privacy.md, "Secure aggregation").

The fog is Prio3's leader and the fusion center its helper. Per window
(region, t) they exchange three messages, every per-report field a
concatenation of fixed-size byte strings in one base64 string, in the batch's
order (which the leader shuffled and fixed when the window closed):

1. Prio3Batch (leader -> helper, on the fog's usual sink: rase/v1/windows/{region}
   or Kafka rase.windows), possibly in parts of consecutive reports: each
   report's nonce, public share and sealed helper share, and the leader's
   verifier share (none where the leader already rejected the report). No
   device id, no arrival time, no leader share.
2. Prio3Verify (helper -> leader, rase/v1/prio3/verify/{region} or Kafka
   rase.prio3.verify), in parts too: the helper's verifier shares and the
   reports it accepted.
3. Prio3Share (leader -> helper, same channel as 1): the reports the leader
   accepted, its aggregate share over the reports both accepted, with its
   discrete Laplace noise already added, or why it dropped the window.

The helper adds its own noise, unshards and publishes; an aggregate then
carries a Prio3Summary. The control message's `prio3` object is Prio3Params.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
from datetime import datetime, timezone
from typing import Literal

import struct

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from rase_device import prio3_binary, wire
from rase_device.interval import check_interval
from rase_device.prio3 import NONCE_SIZE, Prio3
from rase_device.secagg import chunk_length, make_vdaf, params_text, product_period_s, report_ctx

PRIO3_TYPES = ("prio3_batch", "prio3_verify", "prio3_share")
MAX_REPORTS = 10_000_000
# A part of a batch or of the helper's reply stays under this many raw bytes,
# so that its JSON (base64: 4/3 of it) fits Kafka's default 1 MB record.
MAX_PART_BYTES = 600_000
SEAL_OVERHEAD = 32 + 16         # HPKE: the encapsulated key and ChaCha20-Poly1305's tag
Region = Field(min_length=1, max_length=64, pattern=r"^[^/+#\s]+$")


class Prio3Params(BaseModel):
    """The control message's `prio3` object (parsed on the device by
    rase_device.wire.parse_prio3, tested against this model)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["sum", "count", "histogram"] = "sum"
    product: Literal["per-t", "hourly", "daily", "interval"] = "per-t"
    interval_s: float | None = Field(None, gt=0, le=86400)   # product "interval" only: its length (issue 28)
    dp_eps: float = Field(1.0, gt=0, le=100)            # eps of each release (per timestamp of the product)
    key_id: str = Field(min_length=1, max_length=64, pattern=r"^[^/+#\s]+$")   # the helper key devices pinned
    max_measurement: int | None = Field(None, ge=1, lt=1 << 32)               # sum: grid steps of the range
    buckets: int | None = Field(None, ge=2, le=wire.MAX_PRIO3_BUCKETS)        # histogram: len(bands) + 1
    chunk_length: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _kind_fields(self) -> "Prio3Params":
        if (self.kind == "sum") != (self.max_measurement is not None):
            raise ValueError("prio3.max_measurement is set exactly for kind sum")
        if (self.kind == "histogram") != (self.buckets is not None and self.chunk_length is not None):
            raise ValueError("prio3.buckets and prio3.chunk_length are set exactly for kind histogram")
        if self.buckets is not None and self.chunk_length is not None and self.chunk_length > self.buckets:
            raise ValueError("prio3.chunk_length must be <= buckets")
        if self.product != "per-t" and self.kind != "sum":
            raise ValueError(f"prio3.product {self.product!r} averages readings: it needs kind sum")
        if (self.product == "interval") != (self.interval_s is not None):
            raise ValueError("prio3.interval_s is set exactly for prio3.product \"interval\"")
        if self.interval_s is not None:
            check_interval(self.interval_s, 0)
        return self

    @classmethod
    def for_deployment(cls, kind: str, *, key_id: str, dp_eps: float, grid_steps: int, bands: list[float],
                       product: str = "per-t", interval_s: float | None = None) -> "Prio3Params":
        """The params of a kind on a deployment's grid (sum) or bands (histogram)."""
        buckets = len(bands) + 1
        return cls(kind=kind, product=product, interval_s=interval_s, dp_eps=dp_eps, key_id=key_id,
                   max_measurement=grid_steps if kind == "sum" else None,
                   buckets=buckets if kind == "histogram" else None,
                   chunk_length=chunk_length(buckets) if kind == "histogram" else None)

    def wire(self) -> dict:
        return self.model_dump(exclude_none=True)

    def vdaf(self) -> Prio3:
        """The Prio3 instance (built once per distinct params: a Prio3 is never changed)."""
        return _vdaf_of(self.kind, self.max_measurement, self.buckets, self.chunk_length)

    @property
    def text(self) -> str:
        """The canonical text every report's context commits to (rase_device.secagg.params_text)."""
        return _text_of(self)

    @property
    def params_id(self) -> str:
        """The digest of `text` in every report's context and "p" field: two
        params with the same id make and verify the same reports."""
        hit = _IDS.get(id(self))
        if hit is not None and hit[0] is self:       # the fog checks every report against its own params
            return hit[1]
        pid = _params_id_of(self.text)
        if len(_IDS) > 256:
            _IDS.clear()
        _IDS[id(self)] = (self, pid)
        return pid

    def ctx(self, region: str, t: int) -> bytes:
        """The Prio3 context of a report of (region, t) under these params."""
        return report_ctx(region, t, self.params_id)

    @property
    def sensitivity(self) -> int:
        """How far one device's report moves the aggregate (L1, replacing one
        report): the range in grid steps (sum), 1 (count), 2 (histogram: one
        bucket loses a count, another gains one)."""
        return {"sum": self.max_measurement or 0, "count": 1, "histogram": 2}[self.kind]

    def window_period_s(self, period_s: float) -> float:
        return float(product_period_s(self.product, period_s, self.interval_s))

    def report_sizes(self) -> tuple[int, int, int, int]:
        """Bytes of (nonce, public share, leader share, sealed helper share)."""
        return _sizes_of(self.vdaf())


_IDS: dict[int, tuple[Prio3Params, str]] = {}    # id(params) -> (params, its params id): by identity, no hashing


@functools.lru_cache(maxsize=64)
def _text_of(params: Prio3Params) -> str:
    """Prio3Params.text, once per distinct params (a frozen model: its hash and equality are its fields'):
    the fog checks every report's params id against it."""
    return params_text(params.wire())


@functools.lru_cache(maxsize=64)
def _params_id_of(text: str) -> str:
    from rase_device.turboshake import TurboShake128
    from rase_device.secagg import PARAMS_DOMAIN, PARAMS_LABEL

    return TurboShake128(PARAMS_DOMAIN).update(PARAMS_LABEL + text.encode()).read(16).hex()


@functools.lru_cache(maxsize=64)
def _sizes_of(v: Prio3) -> tuple[int, int, int, int]:
    return NONCE_SIZE, v.public_share_size(), v.input_share_size(0), v.input_share_size(1) + SEAL_OVERHEAD


@functools.lru_cache(maxsize=64)
def _vdaf_of(kind: str, max_measurement: int | None, buckets: int | None, chunk_length: int | None) -> Prio3:
    return make_vdaf({"kind": kind, "max_measurement": max_measurement, "buckets": buckets,
                      "chunk_length": chunk_length})


# -- per-report byte strings and masks in one base64 string --------------------------------------

def pack(items: list[bytes | None], size: int) -> str:
    """Fixed-size byte strings, concatenated (zeros for None), as base64."""
    zero = bytes(size)
    return base64.b64encode(b"".join(zero if x is None else bytes(x) for x in items)).decode()


def unpack(text: str, size: int, count: int, field: str) -> list[bytes]:
    raw = b64(text, field)
    if len(raw) != size * count:
        raise ValueError(f"{field}: {len(raw)} bytes, expected {count} x {size}")
    return [raw[i * size:(i + 1) * size] for i in range(count)]


def pack_rows(matrix: np.ndarray) -> str:
    """A uint8 matrix's rows (fixed-size byte strings, one per report), concatenated, as base64."""
    return base64.b64encode(np.ascontiguousarray(matrix, dtype=np.uint8).tobytes()).decode()


def unpack_rows(text: str, size: int, count: int, field: str) -> np.ndarray:
    """unpack() as a (count, size) uint8 matrix: the share bytes stay in one array."""
    raw = b64(text, field)
    if len(raw) != size * count:
        raise ValueError(f"{field}: {len(raw)} bytes, expected {count} x {size}")
    return np.frombuffer(raw, dtype=np.uint8).reshape(count, size)


def pack_mask(mask) -> str:
    return base64.b64encode(np.packbits(np.asarray(mask, dtype=bool)).tobytes()).decode()


def unpack_mask(text: str, count: int, field: str) -> np.ndarray:
    raw = b64(text, field)
    if len(raw) != (count + 7) // 8:
        raise ValueError(f"{field}: {len(raw)} bytes for {count} reports")
    return np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=count).astype(bool)


def b64(text: str, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{field} is not base64") from None


def parts_of(total: int, per_report_bytes: int) -> list[tuple[int, int]]:
    """(first, count) of each part of a batch of `total` reports."""
    step = max(1, MAX_PART_BYTES // max(1, per_report_bytes))
    return [(i, min(step, total - i)) for i in range(0, total, step)] or [(0, 0)]


MAX_PARTS = 64      # leader workers a region's reports may be partitioned over (issue 30)


def slot(region: str, part: int, parts: int) -> str:
    """The key of a region's window part in each party's exchange and in its
    topics: the region itself when the leader runs as one worker, else
    "region/part" (rase/v1/prio3/verify/r1/1; "/" is never in a region)."""
    return region if parts <= 1 else f"{region}/{part}"


def split_slot(key: str) -> tuple[str, int]:
    """(region, part) of slot()'s key."""
    region, _, part = key.partition("/")
    return region, int(part) if part else 0


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str                            # first on the wire: is_prio3_message looks at it
    v: Literal[1] = 1
    region: str = Region
    # Which leader worker's part of the region's reports (issue 30: the devices partitioned over
    # `parts` leader workers; 0 when the leader is one worker). The number of parts is each party's own.
    part: StrictInt = Field(0, ge=0, lt=MAX_PARTS)
    t: StrictInt = Field(ge=0, lt=1 << 40)
    total: StrictInt = Field(ge=0, le=MAX_REPORTS)     # reports in the whole batch
    first: StrictInt = Field(0, ge=0)                  # this part covers reports first .. first + count - 1
    count: StrictInt = Field(0, ge=0)

    @model_validator(mode="after")
    def _within(self):
        if self.first + self.count > self.total:
            raise ValueError("a part must lie within its batch")
        return self


class Prio3Batch(_Part):
    """Leader -> helper: the reports of one window (or a part of them)."""
    type: Literal["prio3_batch"] = "prio3_batch"
    params: Prio3Params
    nonces: str
    public_shares: str
    sealed: str
    leader_verifier_shares: str
    leader_live: str                    # packed bits: the leader sent a verifier share for the report
    ingest_rejected: StrictInt = Field(0, ge=0)   # reports the fog refused at ingest since its previous window

    def columns(self, vdaf: Prio3) -> tuple[list[bytes], list[bytes], list[bytes], list[bytes | None]]:
        """(nonces, public shares, sealed helper shares, leader verifier shares or None), validated."""
        n = self.count
        sizes = (NONCE_SIZE, vdaf.public_share_size(), vdaf.input_share_size(1) + SEAL_OVERHEAD)
        nonces = unpack(self.nonces, sizes[0], n, "nonces")
        pubs = unpack(self.public_shares, sizes[1], n, "public_shares")
        sealed = unpack(self.sealed, sizes[2], n, "sealed")
        live = unpack_mask(self.leader_live, n, "leader_live")
        shares = unpack(self.leader_verifier_shares, vdaf.verifier_share_size(), n, "leader_verifier_shares")
        return nonces, pubs, sealed, [s if ok else None for s, ok in zip(shares, live)]

    def arrays(self, vdaf: Prio3) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """columns() as uint8 matrices, one row per report: (nonces, public shares,
        sealed helper shares, leader verifier shares, the leader-live mask), validated."""
        n = self.count
        return (unpack_rows(self.nonces, NONCE_SIZE, n, "nonces"),
                unpack_rows(self.public_shares, vdaf.public_share_size(), n, "public_shares"),
                unpack_rows(self.sealed, vdaf.input_share_size(1) + SEAL_OVERHEAD, n, "sealed"),
                unpack_rows(self.leader_verifier_shares, vdaf.verifier_share_size(), n, "leader_verifier_shares"),
                unpack_mask(self.leader_live, n, "leader_live"))


class Prio3Verify(_Part):
    """Helper -> leader: the helper's verifier shares and what it accepted (a
    part), with its reasons for the part's reports it did not accept; or, with
    `refused`, why it will not verify the batch at all (then no shares)."""
    type: Literal["prio3_verify"] = "prio3_verify"
    helper_verifier_shares: str = ""
    helper_live: str = ""
    helper_accepted: str = ""
    helper_rejected: dict[str, StrictInt] = {}          # by reason; they add up to the part's rejected reports
    refused: str | None = Field(None, max_length=64)     # e.g. params_mismatch, batch_conflict

    @model_validator(mode="after")
    def _small_reasons(self) -> "Prio3Verify":
        if len(self.helper_rejected) > 16 or any(len(k) > 40 for k in self.helper_rejected):
            raise ValueError("helper_rejected must be a small table of reasons")
        return self

    def columns(self, vdaf: Prio3) -> tuple[list[bytes | None], np.ndarray]:
        n = self.count
        shares = unpack(self.helper_verifier_shares, vdaf.verifier_share_size(), n, "helper_verifier_shares")
        live = unpack_mask(self.helper_live, n, "helper_live")
        return [s if ok else None for s, ok in zip(shares, live)], unpack_mask(self.helper_accepted, n,
                                                                               "helper_accepted")

    def arrays(self, vdaf: Prio3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the helper's verifier shares as a uint8 matrix, its live mask, its accepted mask), validated."""
        n = self.count
        return (unpack_rows(self.helper_verifier_shares, vdaf.verifier_share_size(), n, "helper_verifier_shares"),
                unpack_mask(self.helper_live, n, "helper_live"), unpack_mask(self.helper_accepted, n,
                                                                             "helper_accepted"))


class Prio3Statement(BaseModel):
    """The leader's own account of one window (region, t): what it sent, what
    it and the helper accepted and rejected, by reason, as the leader saw it,
    and where the helper's answer contradicted the leader's checks. The fog
    publishes it on rase/v1/prio3/statements/{region}, a topic only the fog
    may write (so a lying fusion center cannot forge it), and sends it inside
    its Prio3Share (the aggregate carries it). Counts only: no device, no position."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["prio3_statement"] = "prio3_statement"
    v: Literal[1] = 1
    region: str = Region
    part: StrictInt = Field(0, ge=0, lt=MAX_PARTS)     # the leader worker's part (issue 30)
    t: StrictInt = Field(ge=0, lt=1 << 40)
    params_id: str = Field(max_length=64)          # the leader's own params (Prio3Params.params_id)
    received: StrictInt = Field(ge=0)              # reports in the batch the leader sent
    ingest_rejected: dict[str, StrictInt] = {}     # refused at the fog's ingest since its previous window, by reason
    leader_rejected: dict[str, StrictInt] = {}     # failed the leader's verification, by reason
    helper_accepted: StrictInt = Field(0, ge=0)    # what the helper's answer said it accepted
    helper_rejected: dict[str, StrictInt] = {}     # the reasons the helper's answer gave
    accepted: StrictInt = Field(0, ge=0)           # both accepted: what the leader's share sums
    discrepancies: dict[str, StrictInt] = {}       # the helper's answer against the leader's checks, by kind
    dropped: str | None = Field(None, max_length=64)
    noise_draws: StrictInt = Field(1, ge=0, le=1)

    @model_validator(mode="after")
    def _small_tables(self) -> "Prio3Statement":
        for table in (self.ingest_rejected, self.leader_rejected, self.helper_rejected, self.discrepancies):
            if len(table) > 32 or any(len(k) > 48 for k in table):
                raise ValueError("a statement's tables are small tables of reasons")
        return self


class Prio3Share(_Part):
    """Leader -> helper: the leader's accepted mask and its noisy aggregate
    share over the reports both accepted; or `dropped` with the reason (no share)."""
    type: Literal["prio3_share"] = "prio3_share"
    leader_accepted: str
    accepted: StrictInt = Field(ge=0)                  # reports both accepted (what the share sums)
    # sha256 of their nonces in batch order: both sides must agree on the set by nonce.
    accepted_digest: str = Field("", max_length=64)
    agg_share: str | None = None
    dropped: str | None = Field(None, max_length=64)
    # Reports the helper accepted but the leader rejected, by the leader's reason.
    leader_rejected: dict[str, StrictInt] = {}
    noise_draws: StrictInt = Field(1, ge=0, le=1)      # 0: the leader added none (a test-only setting)
    statement: Prio3Statement | None = None            # the leader's account (also on its own topic)

    @model_validator(mode="after")
    def _share_or_reason(self) -> "Prio3Share":
        if (self.agg_share is None) == (self.dropped is None):
            raise ValueError("a prio3 share carries either agg_share or dropped")
        if len(self.leader_rejected) > 16 or any(len(k) > 40 for k in self.leader_rejected):
            raise ValueError("leader_rejected must be a small table of reasons")
        return self


def parse_leader_message(payload: bytes) -> Prio3Batch | Prio3Share:
    """A leader -> helper message (ValueError or pydantic's ValidationError when it is not one)."""
    head = payload[:40]
    if b'"prio3_batch"' in head:
        return Prio3Batch.model_validate_json(payload)
    if b'"prio3_share"' in head:
        return Prio3Share.model_validate_json(payload)
    raise ValueError("not a prio3 leader message")


def is_prio3_message(payload: bytes) -> bool:
    """Whether a payload on the windows channel is a prio3 message (its type comes first)."""
    return payload[:24].startswith(b'{"type":"prio3_')


class Prio3Report(BaseModel):
    """A device's Prio3 report on rase/v1/reports/{region}/{device} (the
    device writes it with rase_device.secagg.encode_report)."""
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    v: Literal[1]
    t: StrictInt = Field(ge=0)
    eps: float | StrictInt = Field(gt=0)
    seq: StrictInt = Field(ge=0)
    # The params id the report's context was made with (rase_device.secagg.params_id);
    # None: a device from before issue 26, refused as params_mismatch.
    p: str | None = Field(None, max_length=64)
    nonce: str = Field(max_length=64)
    pub: str = Field(max_length=256)
    leader: str = Field(max_length=16_384)
    sealed: str = Field(max_length=1024)

    @field_validator("eps")
    @classmethod
    def _finite(cls, v):
        if not math.isfinite(v):
            raise ValueError("eps must be finite")
        return v

    def shares(self, sizes: tuple[int, int, int, int]) -> tuple[bytes, bytes, bytes, bytes]:
        """(nonce, public share, leader share, sealed helper share), each checked against sizes."""
        out = []
        for text, size, name in zip((self.nonce, self.pub, self.leader, self.sealed), sizes,
                                    ("nonce", "pub", "leader", "sealed")):
            raw = b64(text, name)
            if len(raw) != size:
                raise ValueError(f"{name} has {len(raw)} bytes, expected {size}")
            out.append(raw)
        return tuple(out)  # type: ignore[return-value]


MAX_PRIO3_REPORT_BYTES = 24_576


class Prio3BinaryReport(BaseModel):
    """A device's Prio3 report in its binary encoding (issue 30;
    rase_device.prio3_binary writes it, docs/api.md gives the layout): the
    same report as Prio3Report, 487 bytes for Sum(4000) against about 720 of
    JSON, read without JSON or base64. No eps: the params id `p` commits to
    dp_eps. `from_bytes` validates (sizes against the deployment's); the
    fog's ingest reads with `read_binary_report`, the same checks without
    building the model."""
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    v: Literal[1] = 1
    t: StrictInt = Field(ge=0, lt=1 << 64)
    seq: StrictInt = Field(ge=0, lt=1 << 32)
    p: str = Field(min_length=32, max_length=32)       # the params id of the report's context, hex
    nonce: bytes = Field(min_length=NONCE_SIZE, max_length=NONCE_SIZE)
    pub: bytes
    leader: bytes
    sealed: bytes                                      # enc (32 bytes) || the sealed share

    @classmethod
    def from_bytes(cls, payload: bytes, sizes: tuple[int, int, int, int] | None = None) -> "Prio3BinaryReport":
        """The report, or ValueError whose text starts with the reason
        (malformed_report, unknown_version, malformed_share)."""
        t, seq, pid, nonce, pub, leader, sealed = read_binary_report(payload, sizes)
        if sizes is not None and (why := share_size_error((nonce, pub, leader, sealed), sizes)):
            raise ValueError("malformed_share: " + why)
        return cls(t=t, seq=seq, p=pid, nonce=nonce, pub=pub, leader=leader, sealed=sealed)

    def to_bytes(self) -> bytes:
        return prio3_binary.encode(self.t, self.seq, self.p, (self.nonce, self.pub, self.leader, self.sealed))

    def as_json(self, eps: float) -> str:
        """The same report as Prio3Report's JSON (for reading one; eps: the deployment's dp_eps)."""
        return Prio3Report(v=1, t=self.t, eps=eps, seq=self.seq, p=self.p, nonce=_b64s(self.nonce),
                           pub=_b64s(self.pub), leader=_b64s(self.leader),
                           sealed=_b64s(self.sealed)).model_dump_json(exclude_none=True)


def _b64s(data: bytes) -> str:
    return base64.b64encode(data).decode()


@functools.lru_cache(maxsize=64)
def _binary_layout(sizes: tuple[int, int, int, int]) -> tuple[int, tuple[tuple[int, bytes], ...]]:
    """(total size, (offset, expected bytes) of each length field) of a binary report with these share sizes."""
    _, pub, leader, sealed = sizes
    enc = prio3_binary.ENC_SIZE
    at = prio3_binary.FIXED_SIZE
    checks = []
    for k in (pub, leader, enc, sealed - enc):
        checks.append((at, k.to_bytes(2, "big")))
        at += 2 + k
    return at, tuple(checks)


_HEAD_V1 = prio3_binary.MAGIC + bytes((prio3_binary.VERSION,))


def _lengths_are(payload: bytes, checks: tuple[tuple[int, bytes], ...]) -> bool:
    for at, want in checks:
        if payload[at:at + 2] != want:
            return False
    return True


def read_binary_report(payload: bytes, sizes: tuple[int, int, int, int] | None = None
                       ) -> tuple[int, int, str, bytes, bytes, bytes, bytes]:
    """(t, seq, params id, nonce, public share, leader share, sealed helper
    share) of a binary report; ValueError("reason: detail") with reason
    malformed_report or unknown_version. A report of the share sizes `sizes`
    (Prio3Params.report_sizes) takes a fast path (fixed offsets), any other
    the device's own decoder; share_size_error checks the sizes."""
    layout = _binary_layout(sizes) if sizes is not None else None
    if layout is not None and len(payload) == layout[0] and payload[:3] == _HEAD_V1 \
            and _lengths_are(payload, layout[1]):
        assert sizes is not None
        _, pub_n, leader_n, _ = sizes
        hi, lo, seq = _T_SEQ.unpack_from(payload, 3)
        at = prio3_binary.FIXED_SIZE                     # the public share's length field
        pid = payload[prio3_binary.HEAD_SIZE:at - NONCE_SIZE].hex()
        nonce = payload[at - NONCE_SIZE:at]
        pub = payload[at + 2:at + 2 + pub_n]
        at += 4 + pub_n                                  # the leader share
        leader = payload[at:at + leader_n]
        at += leader_n + 2                               # enc
        sealed = payload[at:at + prio3_binary.ENC_SIZE] + payload[at + prio3_binary.ENC_SIZE + 2:]
        return (hi << 32) | lo, seq, pid, nonce, pub, leader, sealed
    _, t, seq, pid, nonce, pub, leader, sealed = prio3_binary.decode(payload)
    return t, seq, pid, nonce, pub, leader, sealed


def share_size_error(shares: tuple[bytes, bytes, bytes, bytes], sizes: tuple[int, int, int, int]) -> str | None:
    """Why a report's (nonce, public, leader, sealed) do not have the deployment's sizes (None: they do)."""
    for name, have, want in zip(("nonce", "pub", "leader", "sealed"), shares, sizes):
        if len(have) != want:
            return f"{name} has {len(have)} bytes, expected {want}"
    return None


_T_SEQ = struct.Struct(">III")


class WallClock(BaseModel):
    """When an aggregate's timestamp t was, in Unix seconds and ISO 8601 UTC."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    t_start: float
    t_end: float
    t_start_iso: str
    t_end_iso: str
    period_s: float

    @classmethod
    def of(cls, t: int, epoch0: float, period_s: float) -> "WallClock":
        return cls.span(epoch0 + t * period_s, epoch0 + (t + 1) * period_s)

    @classmethod
    def span(cls, start: float, end: float) -> "WallClock":
        return cls(t_start=start, t_end=end, t_start_iso=_iso(start), t_end_iso=_iso(end), period_s=end - start)


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, timezone.utc).isoformat().replace("+00:00", "Z")


class PartyView(BaseModel):
    """One region's window as one aggregator saw it."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    received: int                              # reports in the batch
    accepted: int                              # reports both accepted, by this party's count
    rejected: dict[str, int] = {}              # by this party's verification, by reason
    ingest_rejected: dict[str, int] = {}       # the leader: refused at the fog's ingest, by reason


class RegionViews(BaseModel):
    """A region's window as each aggregator saw it: the helper's own view and
    the leader's statement as its share carried it (the fog publishes the same
    statement on rase/v1/prio3/statements/{region}: compare the two)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    leader: PartyView | None = None            # None: the leader sent no statement
    helper: PartyView


class Prio3Summary(BaseModel):
    """What a secure aggregate says about itself (Aggregate.prio3)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str
    product: str
    received: int                  # reports in the verified batches
    accepted: int                  # reports both aggregators accepted (the aggregate's n)
    rejected: dict[str, int]       # by reason: verification (either side) and "ingest" (refused at the fog)
    dropped_regions: dict[str, str] = {}   # region -> why its window was not aggregated
    total: float                   # the noisy sum (sum: in grid steps; count: devices on)
    counts: list[float] = []       # histogram: the noisy count per bucket
    noise: dict[str, float | int | str]   # distribution, scale per draw (grid steps), draws, off_for_tests
    interval: str = "exact-noise"  # intervals are exact under the known noise distribution
    wall_clock: WallClock
    privacy: dict[str, float | str]
    regions: dict[str, RegionViews] = {}   # region -> received/accepted/rejected as each party saw them
    # Where one party's account contradicts the other's, by kind (docs/privacy.md section 7): an alarm.
    discrepancies: dict[str, int] = {}
    params_id: str = ""                    # the params the aggregate was verified and noised under (the helper's own)


def nonce_digest(nonces: list[bytes] | np.ndarray, mask) -> str:
    """sha256 (hex) of the nonces of the reports in mask, in batch order: what
    both aggregators compare before a window is published. nonces: a list of
    byte strings or a (N, 16) uint8 matrix (the same digest)."""
    import hashlib

    if isinstance(nonces, np.ndarray):
        keep = np.asarray(mask, dtype=bool)[:nonces.shape[0]]
        return hashlib.sha256(np.ascontiguousarray(nonces[:len(keep)][keep]).tobytes()).hexdigest()
    h = hashlib.sha256()
    for nonce, keep in zip(nonces, mask):
        if keep:
            h.update(nonce)
    return h.hexdigest()
