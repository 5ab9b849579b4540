"""What the two aggregators of the secure-aggregation mode share (issue 20):
their keys, the parts of a message, their noise on an aggregate share, and
unsharding to signed totals. Pure, apart from reading key files.

Keys (docs/deployment.md, "Two-party deployment"):
- the verification key, 32 random bytes both aggregators hold and devices
  never see (Prio3's verify_key): `verify_key_file`, 64 hex digits;
- the helper's HPKE key pair: the private key only on the fusion center
  (`private_key_file`), the public key and its key id pinned in every device.
`rase secagg-keys --out DIR` writes all three.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from rase_device.entropy import RandomBits
from rase_device.prio3 import VERIFY_KEY_SIZE, Prio3
from rase_common.errors import ConfigError
from rase_common.mechanisms.prio3 import central_noise, draw_noise
from rase_common.protocol.prio3 import Prio3Params
from rase_common.vdaf import open_helper_shares
from rase_common.vdaf.workers import VerifyPool


def read_key(path: Path, what: str, size: int = VERIFY_KEY_SIZE) -> bytes:
    """A key file: 2 x size hex digits (whitespace around them ignored)."""
    try:
        text = Path(path).read_text().strip()
        key = bytes.fromhex(text)
    except OSError as err:
        raise ConfigError(f"{what}: cannot read {path}: {err.strerror or err}") from None
    except ValueError:
        raise ConfigError(f"{what}: {path} must hold {2 * size} hex digits") from None
    if len(key) != size:
        raise ConfigError(f"{what}: {path} holds {len(key)} bytes, expected {size}")
    return key


def key_id_of(public_key: bytes) -> str:
    """A short name for a helper public key (what control messages carry)."""
    return "fc-" + hashlib.sha256(public_key).hexdigest()[:12]


def new_verify_key() -> bytes:
    return os.urandom(VERIFY_KEY_SIZE)


def noisy_share(vdaf: Prio3, share: bytes, params: Prio3Params, *, noise: bool = True,
                bits: RandomBits | None = None) -> bytes:
    """An aggregate share with this aggregator's discrete Laplace noise added to
    every element (scale sensitivity / dp_eps; the exact integer sampler over
    os.urandom). noise=False is for tests only."""
    vec = vdaf.field.decode_vec(share)
    if noise:
        draws = draw_noise(central_noise(params.sensitivity, params.dp_eps), len(vec), bits)
        p = vdaf.field.MODULUS
        vec = [(x + z) % p for x, z in zip(vec, draws)]
    return vdaf.field.encode_vec(vec)


MASK_DST = b"rase/v1/prio3 part mask"


def part_mask(vdaf: Prio3, key: bytes, region: str, t: int, part: int, parts: int) -> list[int]:
    """The zero-sum mask a leader worker adds to its part's aggregate share
    (issue 30): the masks of parts 0 .. parts-1 of (region, t) sum to zero, so
    the helper can use the parts' shares only all together (their sum is the
    region's share), and any one of them on its own is uniformly random. From
    TurboSHAKE128 under the leader workers' parts key, which the helper never
    holds; the last part's mask is minus the sum of the others'."""
    from rase_common.vdaf.field import vector_field
    from rase_common.vdaf.xof import _expand_one

    if not 0 <= part < parts:
        raise ValueError(f"part must be in [0, {parts}), got {part}")
    F, p = vector_field(vdaf.field), vdaf.field.MODULUS

    def prf(k: int) -> list[int]:
        binder = region.encode() + b"\0" + t.to_bytes(8, "big") + k.to_bytes(2, "big") + parts.to_bytes(2, "big")
        return _expand_one(F, key, MASK_DST, binder, vdaf.OUTPUT_LEN)

    if part < parts - 1:
        return prf(part)
    total = [0] * vdaf.OUTPUT_LEN
    for k in range(parts - 1):
        total = [(a + b) % p for a, b in zip(total, prf(k))]
    return [(-x) % p for x in total]


def masked_share(vdaf: Prio3, share: bytes, mask: Sequence[int]) -> bytes:
    """An aggregate share with a part's mask added (element by element, mod p)."""
    p = vdaf.field.MODULUS
    return vdaf.field.encode_vec([(x + m) % p for x, m in zip(vdaf.field.decode_vec(share), mask)])


def unshard_signed(vdaf: Prio3, shares: Sequence[bytes]) -> list[int]:
    """The sum of the aggregate shares, element by element, as signed integers
    (noise can take a small total below zero: a field element above p/2 is negative)."""
    p = vdaf.field.MODULUS
    total = [0] * vdaf.OUTPUT_LEN
    for share in shares:
        vec = vdaf.field.decode_vec(share)
        if len(vec) != vdaf.OUTPUT_LEN:
            raise ValueError(f"an aggregate share has {len(vec)} elements, expected {vdaf.OUTPUT_LEN}")
        total = [(a + b) % p for a, b in zip(total, vec)]
    return [x - p if x > p // 2 else x for x in total]


def tile(parts: Sequence, total: int):
    """The parts (anything with .first and .count) in order when they cover
    0 .. total - 1 exactly once; None while some are missing. ValueError
    when they overlap or stick out (they were not cut from one batch)."""
    ordered = sorted(parts, key=lambda p: p.first)
    at = 0
    for p in ordered:
        if p.first != at:
            if p.first < at:
                raise ValueError(f"parts overlap at report {p.first}")
            return None
        at += p.count
    if at > total:
        raise ValueError(f"parts cover {at} reports of {total}")
    return ordered if at == total and (ordered or total == 0) else None


class ShareOpener(VerifyPool):
    """The helper's worker processes (rase_common.vdaf.workers.VerifyPool)
    with its HPKE private key: `helper_verify` opens a window's sealed shares
    and verifies them chunk by chunk on `workers` processes (each opening is
    one X25519 exchange and the key schedule, about 60 us, mostly under the
    GIL, so threads gain little where processes scale with the cores), and
    `open` only opens (small windows in the calling process). close() stops
    the workers."""

    def __init__(self, private_key: bytes, workers: int = 2, small: int | None = None):
        super().__init__(workers, small, preload=(Prio3Params.__module__,))
        self.private_key = private_key

    def open(self, ctx: bytes, nonces: Sequence[bytes], public_shares: Sequence[bytes], sealed: Sequence[bytes]
             ) -> list[bytes | None]:
        n = len(nonces)
        if self.workers <= 1 or n < self.small:
            return open_helper_shares(self.private_key, ctx, nonces, public_shares, sealed)
        pool = self._executor()
        step = (n + self.workers - 1) // self.workers
        futures = [pool.submit(open_helper_shares, self.private_key, ctx, list(nonces[i:i + step]),
                               list(public_shares[i:i + step]), list(sealed[i:i + step]))
                   for i in range(0, n, step)]
        return [x for f in futures for x in f.result()]


async def compute(fn, *args, in_thread: bool, **kw):  # noqa: ANN001, ANN201
    """fn(*args, **kw): in a worker thread for a large window (the loop keeps
    taking input meanwhile), on the loop for a small one."""
    if in_thread:
        return await asyncio.to_thread(fn, *args, **kw)
    return fn(*args, **kw)


def write_keys(out_dir: Path) -> dict[str, str]:
    """A new deployment's keys in out_dir: verify.key (both aggregators),
    helper.key (the fusion center only), helper.pub and helper.id (its key
    id: public, in every party's config); returns the paths, the public key
    and its key id (what every device pins). Existing files are never
    overwritten."""
    from rase_common.vdaf import generate_keypair

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {name: out / name for name in ("verify.key", "helper.key", "helper.pub", "helper.id")}
    for path in files.values():
        if path.exists():
            raise FileExistsError(f"{path} exists: keys are never overwritten (devices pinned the old one)")
    private, public = generate_keypair()
    for name, text in (("verify.key", new_verify_key().hex()), ("helper.key", private.hex()),
                       ("helper.pub", public.hex()), ("helper.id", key_id_of(public))):
        fd = os.open(files[name], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if name.endswith(".key") else 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
    return {"verify_key_file": str(files["verify.key"]), "private_key_file": str(files["helper.key"]),
            "public_key_file": str(files["helper.pub"]), "public_key": public.hex(), "key_id": key_id_of(public)}


class Alarm:
    """A refusal or a discrepancy, logged at WARNING once per episode and
    reason (the metric counts every one): the first of a reason starts an
    episode, cleared() (a window went through cleanly) ends them all with one
    INFO line saying how many there were."""

    def __init__(self, name: str, log):  # noqa: ANN001 - a logging.Logger
        self.name = name
        self.log = log
        self.active: dict[str, int] = {}

    def raised(self, reason: str, detail: str) -> None:
        if reason not in self.active:
            self.log.warning("%s: %s (%s); further ones are counted in the metrics until a window goes through "
                             "cleanly", self.name, reason, detail)
            self.active[reason] = 0
        self.active[reason] += 1

    def cleared(self) -> None:
        if self.active:
            self.log.info("%s: a window went through cleanly after %s", self.name,
                          ", ".join(f"{k} x {v}" for k, v in sorted(self.active.items())))
            self.active = {}


async def work_loop(name: str, step, wakeup, storage, idle_s: float) -> None:  # noqa: ANN001
    """An aggregator's exchange task: step(now) again at once while it finds
    work, else when woken (an answer or a share came) or every idle_s
    (deadlines); a storage failure is an outage (retried with its backoff),
    any other error one window's bug: logged, retried, never the end of the
    service."""
    import logging
    import time

    from rase_common.errors import StorageError

    wakeup.bind()
    while True:
        busy = 0
        if not storage.down:
            try:
                busy = await step(time.time())
            except StorageError as err:
                storage.failed(err)
            except Exception:  # noqa: BLE001 - a bug one window triggers must not stop the service
                logging.getLogger(__name__).exception("%s: a window could not be processed; retried", name)
        if busy:
            await asyncio.sleep(0)          # others' turn, then on with the queue
            continue
        await wakeup.wait(None, idle_s)
