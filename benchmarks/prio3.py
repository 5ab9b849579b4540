"""Prio3 benchmark: the device's shard + prove + seal, and the aggregators'
batch verification.

Device: reports/s of rase_device.prio3_report.make_report (Prio3Sum with
12-bit measurements, Prio3Count, Prio3Histogram of 20 bands) under CPython,
the MicroPython unix port and the MicroPython WebAssembly port, each beside
BR (rase_device.randomizer.BudgetRandomizer) in the same run; the device
core's heap under both MicroPython ports (gc.mem_alloc deltas).

Aggregators: windows of 1,000 / 10,000 / 100,000 reports: helper-share
decryption (HPKE, cryptography), verify_init by the leader and by the
helper, combining and checking (both sides), aggregation; seconds on one
core (wall clock, and the process's CPU time beside it, which a loaded
machine inflates less), and each window's per-report time against the
1,000-report window.
The windows' reports are made by the device code with xoflib's
TurboSHAKE128 swapped in for speed (making them is not what is measured);
Count and Sum reuse a pool of 1,000 shards under fresh nonces, which is
exactly what sharding with those nonces gives (no joint randomness).

Field: one Field128 operation over 10,000 elements (product, sum, a dot
product of 16 products, equality) on rase_common.vdaf.field's 32-bit limbs,
beside the same operation on numpy object arrays of Python ints (the
representation before issue 19's follow-up) in the same run.

    python benchmarks/prio3.py [--parts device,aggregators,field]
                               [--variants sum12,count,histogram20]
                               [--device-n 30] [--sizes 1000,10000,100000]
                               [--hist-sizes 1000,10000,100000] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rase_device.prio3 as p3  # noqa: E402
from rase_device.entropy import RandomBits  # noqa: E402
from rase_device.prio3_report import helper_share_info, make_report  # noqa: E402
from rase_device.randomizer import BudgetRandomizer, Calibration  # noqa: E402
from rase_device.vdaf_field import FIELD128  # noqa: E402
from rase_common.vdaf import Prio3Aggregator, generate_keypair, open_helper_shares, xof  # noqa: E402
from rase_common.vdaf import hpke as server_hpke  # noqa: E402
from rase_common.vdaf.field import vector_field  # noqa: E402
from simulators.unix_board import run_unix  # noqa: E402
from simulators.wasm_board import WASM_URANDOM, run_micropython  # noqa: E402

VARIANTS = {  # name: (constructor expression, factory, measurement drawn per report, device measurement)
    "sum12": ("prio3_sum(4095)", lambda: p3.prio3_sum(4095), lambda rng: rng.randrange(4096), 2345),
    "count": ("prio3_count()", p3.prio3_count, lambda rng: rng.randrange(2), 1),
    "histogram20": ("prio3_histogram(20, 4)", lambda: p3.prio3_histogram(20, 4), lambda rng: rng.randrange(20), 7),
}
CTX = b"rase bench"
BR_N = 2000

DEVICE_SNIPPET = """
import json, time
from rase_device.entropy import RandomBits
from rase_device.randomizer import BudgetRandomizer, Calibration
from rase_device.prio3 import prio3_sum, prio3_count, prio3_histogram
from rase_device.prio3_report import make_report
read = %(read)s
pk = bytes.fromhex(%(pk)r)
res = {}
br = BudgetRandomizer(Calibration(), RandomBits(read=read))
br.randomize(1.0, 1.0)
t0 = time.ticks_us()
for i in range(%(br_n)d):
    br.randomize(1000.0 + (i & 1023), 1.0)
res['br'] = [%(br_n)d, time.ticks_diff(time.ticks_us(), t0)]
for name, v, m in %(variants)s:
    make_report(v, b'bench', m, pk, read)
    t0 = time.ticks_us()
    for i in range(%(n)d):
        make_report(v, b'bench', m, pk, read)
    res[name] = [%(n)d, time.ticks_diff(time.ticks_us(), t0)]
# What a device sends (issue 30): a Prio3Sum(4000) report, its context bound to the params id, binary.
from rase_device.prio3_binary import encode
from rase_device.secagg import report_ctx
v = prio3_sum(4000)
pid = '9fe0d8c2014a9ee236e3dffc07958726'
encode(9, 1, pid, make_report(v, report_ctx('r1', 9, pid), 2345, pk, read))
t0 = time.ticks_us()
for i in range(%(n)d):
    encode(9 + i, 1 + i, pid, make_report(v, report_ctx('r1', 9 + i, pid), 2345, pk, read))
res['sum4000_binary'] = [%(n)d, time.ticks_diff(time.ticks_us(), t0)]
print(json.dumps(res))
"""

# Each reading in its own snippet: the WebAssembly port frees memory only
# when control returns to JavaScript (the unix port runs them as one script).
HEAP_SNIPPETS = [
    "import gc\ngc.collect()\nprint(gc.mem_alloc())",
    "from rase_device.prio3 import prio3_sum, prio3_count, prio3_histogram\n"
    "from rase_device.prio3_report import make_report\nfrom rase_device.prio3_binary import encode",
    "gc.collect()\nprint(gc.mem_alloc())",
    "v = prio3_sum(4000)\npk = bytes.fromhex(%(pk)r)\nread = %(read)s\n"
    "encode(1, 1, '9fe0d8c2014a9ee236e3dffc07958726', make_report(v, b'bench', 5, pk, read))",
    "gc.collect()\nprint(gc.mem_alloc())",
    "for i in range(20):\n    encode(1, i, '9fe0d8c2014a9ee236e3dffc07958726', make_report(v, b'bench', i, pk, read))",
    "gc.collect()\nprint(gc.mem_alloc())",
    "for i in range(20):\n    encode(1, i, '9fe0d8c2014a9ee236e3dffc07958726', make_report(v, b'bench', i, pk, read))",
    "gc.collect()\nprint(gc.mem_alloc())",
    "def alloc(v, m):\n    gc.collect()\n    gc.disable()\n    a = gc.mem_alloc()\n"
    "    make_report(v, b'bench', m, pk, read)\n    b = gc.mem_alloc()\n    gc.enable()\n    return b - a\n"
    "print(alloc(v, 4000))\nprint(alloc(prio3_count(), 1))\nprint(alloc(prio3_histogram(20, 4), 7))",
]


def device_variants_literal() -> str:
    return "(" + ", ".join(f"({name!r}, {expr}, {m})" for name, (expr, _, _, m) in VARIANTS.items()) + ")"


def per_s(raw: dict) -> dict:
    raw = dict(raw)
    rates = {k: n / (us / 1e6) for k, (n, us) in raw.items()}
    return {k: {"per_s": v, "ratio_to_br": v / rates["br"]} for k, v in rates.items()}


def device_cpython(n: int, pk: bytes) -> dict:
    raw = {}
    br = BudgetRandomizer(Calibration(), RandomBits())
    t0 = time.perf_counter()
    for i in range(BR_N):
        br.randomize(1000.0 + (i & 1023), 1.0)
    raw["br"] = [BR_N, (time.perf_counter() - t0) * 1e6]
    for name, (_, make, _, m) in VARIANTS.items():
        vdaf = make()
        make_report(vdaf, b"bench", m, pk)
        t0 = time.perf_counter()
        for _ in range(n):
            make_report(vdaf, b"bench", m, pk)
        raw[name] = [n, (time.perf_counter() - t0) * 1e6]
    from rase_device.prio3_binary import encode
    from rase_device.secagg import report_ctx

    v, pid = p3.prio3_sum(4000), "9fe0d8c2014a9ee236e3dffc07958726"
    t0 = time.perf_counter()
    for i in range(n):
        encode(9 + i, 1 + i, pid, make_report(v, report_ctx("r1", 9 + i, pid), 2345, pk))
    raw["sum4000_binary"] = [n, (time.perf_counter() - t0) * 1e6]
    return per_s(raw)


def heap_from(values: list[int]) -> dict:
    base, imported, setup, a20, a40, per_sum, per_count, per_hist = values
    return {"import_bytes": imported - base, "after_setup_and_1_report_bytes": setup - base,
            "after_21_reports_bytes": a20 - base, "after_41_reports_bytes": a40 - base,
            "growth_reports_22_41_bytes": a40 - a20,
            "allocated_per_report_bytes": {"sum4000": per_sum, "count": per_count, "histogram20": per_hist}}


def device_micropython(n: int, pk: bytes) -> dict:
    fill = {"variants": device_variants_literal(), "n": n, "br_n": BR_N, "pk": pk.hex()}
    unix_raw = json.loads(run_unix(DEVICE_SNIPPET % dict(fill, read="__import__('os').urandom")).strip())
    wasm_raw = json.loads(run_micropython([DEVICE_SNIPPET % dict(fill, read=WASM_URANDOM)],
                                          heapsize=8 << 20)[0].strip())
    # A big heap: with the collector off, one report's garbage must fit.
    heap_unix = run_unix("\n".join(s % {"pk": pk.hex(), "read": "__import__('os').urandom"} if "%(" in s else s
                                   for s in HEAP_SNIPPETS), heap="256M")
    outs = run_micropython([s % {"pk": pk.hex(), "read": WASM_URANDOM} if "%(" in s else s
                            for s in HEAP_SNIPPETS], heapsize=256 << 20)
    heap_wasm = [int(x) for o in outs for x in o.split()]
    return {"unix": {"rates": per_s(unix_raw), "heap": heap_from([int(x) for x in heap_unix.split()]),
                     "smallest_heap_kib": smallest_heap(pk)},
            "wasm": {"rates": per_s(wasm_raw), "heap": heap_from(heap_wasm)}}


SMALL_HEAP_SNIPPET = """
from rase_device.prio3 import prio3_sum, prio3_count, prio3_histogram
from rase_device.prio3_report import make_report
from rase_device.prio3_binary import encode
pk = bytes.fromhex(%(pk)r)
for v, m in ((prio3_sum(4000), 4000), (prio3_count(), 1), (prio3_histogram(20, 4), 7)):
    for i in range(3):
        encode(1, i, '9fe0d8c2014a9ee236e3dffc07958726', make_report(v, b'bench', m, pk))
print('ok')
"""


def smallest_heap(pk: bytes) -> int | None:
    """The smallest unix-port heap (KiB, of those tried) in which all three variants report."""
    for kib in (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512):
        try:
            if run_unix(SMALL_HEAP_SNIPPET % {"pk": pk.hex()}, heap=f"{kib}K").strip() == "ok":
                return kib
        except Exception:  # noqa: BLE001 - MemoryError on the board surfaces as UnixPortError
            continue
    return None


@contextlib.contextmanager
def c_xof():
    """The device code's XOF calls answered by xoflib (report generation only)."""
    saved = p3.expand_into_vec, p3.derive_seed

    def expand(field, seed, dst, binder, length):
        return xof._expand_one(type("Scalar", (), {"scalar": field}), seed, dst, binder, length)
    p3.expand_into_vec, p3.derive_seed = expand, lambda seed, dst, binder: xof.stream(seed, dst, binder, 32)
    try:
        yield
    finally:
        p3.expand_into_vec, p3.derive_seed = saved


def make_window(name: str, n: int, pk: bytes, rng: random.Random) -> tuple[list, list]:
    _, make, draw, _ = VARIANTS[name]
    vdaf = make()
    pool: list = []
    reports, meas = [], []
    with c_xof():
        for i in range(n):
            nonce = rng.randbytes(16)
            if vdaf.uses_joint_rand or i < 1000:
                m = draw(rng)
                public, shares = vdaf.shard(CTX, m, nonce, rng.randbytes(vdaf.RAND_SIZE))
                if not vdaf.uses_joint_rand:
                    pool.append((m, public, shares))
            else:
                m, public, shares = pool[i % len(pool)]
            sealed = server_hpke.seal(pk, helper_share_info(CTX, nonce, public), shares[1])
            reports.append((nonce, public, shares[0], sealed))
            meas.append(m)
    return reports, meas


def verify_window(name: str, reports: list, meas: list, sk: bytes, repeat: int) -> dict:
    vdaf = VARIANTS[name][1]()
    nonces, publics = [r[0] for r in reports], [r[1] for r in reports]
    best: dict = {}
    for _ in range(repeat):
        gc.collect()
        t = {}
        t0 = time.perf_counter()
        helper_inputs = open_helper_shares(sk, CTX, nonces, publics, [r[3] for r in reports])
        t["decrypt_s"] = time.perf_counter() - t0
        leader, helper = (Prio3Aggregator(vdaf, b"k" * 32, CTX, a) for a in (0, 1))
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        to_helper = leader.start(nonces, publics, [r[2] for r in reports])
        t["leader_init_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        to_leader = helper.start(nonces, publics, helper_inputs)
        t["helper_init_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        both = leader.finish(to_leader) & helper.finish(to_helper)
        t["finish_both_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        shares = [leader.aggregate(both), helper.aggregate(both)]
        t["aggregate_both_s"] = time.perf_counter() - t0
        t["verify_both_cpu_s"] = time.process_time() - cpu0
        t["verify_both_s"] = t["leader_init_s"] + t["helper_init_s"] + t["finish_both_s"] + t["aggregate_both_s"]
        result = vdaf.unshard(shares, int(both.sum()))
        want = [meas.count(b) for b in range(20)] if name == "histogram20" else sum(meas)
        if not both.all() or result != want:
            raise SystemExit(f"{name}: the benchmark's window did not verify to the true aggregate")
        if not best or t["verify_both_s"] < best["verify_both_s"]:
            best = t
    best["per_report_us"] = best["verify_both_s"] / len(reports) * 1e6
    best["cpu_per_report_us"] = best["verify_both_cpu_s"] / len(reports) * 1e6
    return best


def aggregators(variants: list[str], sizes: list[int], hist_sizes: list[int], repeat: int) -> dict:
    sk, pk = generate_keypair()
    rng = random.Random(2026)
    out: dict = {}
    for name in variants:
        rows = {}
        for n in (hist_sizes if name == "histogram20" else sizes):
            t0 = time.perf_counter()
            reports, meas = make_window(name, n, pk, rng)
            print(f"  [{name}] made {n:,} reports in {time.perf_counter() - t0:.1f} s; verifying", file=sys.stderr)
            rows[n] = verify_window(name, reports, meas, sk, repeat if n <= 10_000 else 1)
        first = min(rows)
        for n, r in rows.items():
            r["growth_per_report_vs_smallest"] = r["per_report_us"] / rows[first]["per_report_us"]
            r["cpu_growth_per_report_vs_smallest"] = r["cpu_per_report_us"] / rows[first]["cpu_per_report_us"]
        out[name] = rows
    return out


def field_ops(n: int, repeat: int) -> dict:
    """Best-of-repeat microseconds of one Field128 operation over n elements:
    32-bit limbs (rase_common.vdaf.field) and Python ints in object arrays."""
    F, p = vector_field(FIELD128), FIELD128.MODULUS
    rng = random.Random(7)
    a, b = ([rng.randrange(p) for _ in range(n)] for _ in range(2))
    A, B = F.from_ints(a), F.from_ints(b)
    a_obj, b_obj = np.array(a, dtype=object), np.array(b, dtype=object)
    ops = {"product": (lambda: F.mul(A, B), lambda: a_obj * b_obj % p),
           "sum": (lambda: F.add(A, B), lambda: (a_obj + b_obj) % p),
           "dot of 16 products": (lambda: F.dot([A] * 16, [B] * 16),
                                  lambda: sum(a_obj * b_obj for _ in range(16)) % p),
           "equality": (lambda: F.equal(A, B), lambda: a_obj == b_obj)}

    def best_us(fn) -> float:
        fn()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times) * 1e6

    out = {}
    for name, (limbs, objects) in ops.items():
        got, want = limbs(), objects()
        same = F.to_ints(got) == [int(x) for x in want] if name != "equality" else list(got) == list(want)
        if not same:
            raise SystemExit(f"Field128 {name}: the limb result differs from Python's")
        lu, ou = best_us(limbs), best_us(objects)
        out[name] = {"limbs_us": lu, "python_int_objects_us": ou, "speedup": ou / lu}
    return out


# -- both parties per report, as the services run them (issue 30) -------------------------------------------------

LIBPRIO_RS = {"prepare_init_us": 18.6, "shard_us": 31.0}   # published for Prio3Sum 8-bit (the figures)
PARTY_MAX = 4000          # Prio3Sum(4000): the deployment's 0..4,000 W grid


def _party_setup(work: Path, n: int, workers: int, min_reports: int) -> dict:
    """A leader (an in-memory FogService, its real journal) and a helper
    (Prio3Helper on a real store) of one Prio3Sum(4000) deployment, and n
    devices' binary reports of one window."""
    from fog_shuffler.config import FogConfig
    from rase_common.protocol.control import ControlMessage
    from rase_common.protocol.prio3 import Prio3Params
    from rase_common.secagg import write_keys
    from rase_common.vdaf.fast_client import FastPrio3, fast_make_report
    from rase_device import prio3_binary
    from rase_device.secagg import encode_report

    keys = write_keys(work / "keys")
    params = Prio3Params.for_deployment("sum", key_id=keys["key_id"], dp_eps=1.0, grid_steps=PARTY_MAX, bands=[10.0])
    devices = [f"dev{i:06d}" for i in range(n)]
    t = 20
    vdaf, ctx, pk = FastPrio3(params.vdaf()), params.ctx("r1", t), bytes.fromhex(keys["public_key"])
    rng = random.Random(30)
    reports = [fast_make_report(vdaf, ctx, rng.randrange(PARTY_MAX + 1), pk) for _ in devices]
    payloads = [prio3_binary.encode(t, 1, params.params_id, r) for r in reports]
    fog = FogConfig.load(None, name="bench-fog", regions={"r1": {"devices": devices}}, period_s=8.0, k_min=10,
                         lateness_periods=1, allowed_lateness_s=0, device_mechanism="prio3", x_max=float(PARTY_MAX),
                         bands=[10.0], eps_levels=[1.0], journal_path=str(work / "fog.sqlite"), broker={"port": 1},
                         prio3={"verify_key_file": keys["verify_key_file"], "params": params.model_dump(),
                                "verify_workers": workers, "workers_min_reports": min_reports})
    control = ControlMessage(mechanism="prio3", eps_levels=[1.0], bands=[10.0], period_s=8.0, x_max=float(PARTY_MAX),
                             prio3=params)
    return {"keys": keys, "params": params, "t": t, "devices": devices, "payloads": payloads, "fog": fog,
            "control": control, "json_bytes": len(encode_report(t, 1.0, 1, reports[0], params.params_id)),
            "binary_bytes": len(payloads[0])}


def _children_cpu_s() -> float:
    """CPU seconds of this process's live child processes (the verification workers), from /proc."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for c in children:
            try:
                fields = Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                pass
    return total


class _Clock:
    """CPU seconds (this process and its workers) and wall seconds of a step."""

    def __init__(self) -> None:
        self.cpu0, self.kids0, self.wall0 = time.process_time(), _children_cpu_s(), time.perf_counter()

    def done(self) -> tuple[float, float]:
        return (time.process_time() - self.cpu0 + _children_cpu_s() - self.kids0, time.perf_counter() - self.wall0)


def parties(n: int, workers: int, min_reports: int = 2000) -> dict:
    """One window of n Prio3Sum(4000) binary reports through both parties'
    real code (no broker): the leader's ingest, close, and finish, the
    helper's intake, answer, combine and publication; CPU (with the worker
    processes') and wall seconds of each step."""
    import asyncio
    import shutil
    import tempfile

    from prometheus_client import CollectorRegistry

    from fog_shuffler.service import FogService
    from fusion_center.prio3.helper import Prio3FusionConfig, Prio3Helper
    from fusion_center.store import AggregateStore
    from rase_common.channels import MemorySink, MemorySource, Message
    from rase_common.clock import ManualClock
    from rase_common.errors import Outage
    from rase_common.protocol import topics

    work = Path(tempfile.mkdtemp(prefix="rase-bench-parties-"))
    try:
        d = _party_setup(work, n, workers, min_reports)
        t = d["t"]
        fog = FogService(d["fog"], clock=ManualClock(8.0 * t + 1), source=MemorySource(), sink=MemorySink())
        store = AggregateStore(work / "fusion.sqlite")
        hcfg = Prio3FusionConfig(private_key_file=d["keys"]["private_key_file"], key_id=d["keys"]["key_id"],
                                 verify_key_file=d["keys"]["verify_key_file"], k_min=10, decrypt_workers=workers,
                                 workers_min_reports=min_reports)
        helper = Prio3Helper(hcfg, regions=["r1"], merge_deadline_s=5.0, registry=CollectorRegistry(),
                             storage=Outage("bench fusion store", None))
        helper.open(store.db)
        helper.follow(d["control"], 8.0 * t + 1)
        steps: dict[str, tuple[float, float]] = {}

        async def run() -> None:
            import contextlib

            async with contextlib.AsyncExitStack() as stack:
                await fog.open(stack)
                leader = fog.roles.get("prio3").leader
                await asyncio.to_thread(leader.pool.warm)
                helper.opener.warm()
                batch = [(Message(topics.report_topic("r1", dev), p, mid=i), t)
                         for i, (dev, p) in enumerate(zip(d["devices"], d["payloads"]))]
                gc.collect()
                c = _Clock()
                for i in range(0, n, 5000):                 # the fog's ingest batches
                    fog.roles.ingest(batch[i:i + 5000])
                steps["leader ingest (decode, validate, journal, receipts)"] = c.done()
                c = _Clock()
                await fog.roles.close_due(t + 2)
                steps["leader close (shuffle, verify_init, batch, journal)"] = c.done()
                sent = [r[3] for r in leader.journal.unsent()]
                for r in leader.journal.unsent():
                    leader.journal.mark_sent(*r[:3])
                c = _Clock()
                helper.take([m.encode() for m in sent], time.time(), lambda _t: False)
                steps["helper intake (store the batch)"] = c.done()
                c = _Clock()
                while await helper.step(time.time()):
                    pass
                steps["helper answer (open, verify_init, decide, answer)"] = c.done()
                answers = helper.store.unsent()
                for r in answers:
                    helper.store.mark_sent(*r[:3])
                c = _Clock()
                fog.roles.ingest([(Message(topics.prio3_verify_topic("r1"), a[3].encode(), mid=n + i), t)
                                  for i, a in enumerate(answers)])
                await leader.step(time.time())
                steps["leader finish (answer, decide, aggregate, noise, share)"] = c.done()
                share = [r[3] for r in leader.journal.unsent() if r[2] == 1 << 30]
                c = _Clock()
                helper.take([m.encode() for m in share], time.time(), lambda _t: False)
                while await helper.step(time.time()):
                    pass
                (tt, ready, _), = helper.due(time.time() + 60)
                agg = helper.aggregate(tt, ready, d["control"], level=0.95, history={}, windows_w=())
                steps["helper combine and publish (share, noise, aggregate)"] = c.done()
                assert agg is not None and agg[0].n == n, "the benchmark's window was not published whole"
                helper.opener.close()

        asyncio.run(run())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    leader_cpu = sum(v[0] for k, v in steps.items() if k.startswith("leader"))
    helper_cpu = sum(v[0] for k, v in steps.items() if k.startswith("helper"))
    return {"reports": n, "workers": workers, "binary_report_bytes": d["binary_bytes"],
            "json_report_bytes": d["json_bytes"],
            "steps": {k: {"cpu_us_per_report": v[0] / n * 1e6, "wall_s": v[1]} for k, v in steps.items()},
            "leader_cpu_us_per_report": leader_cpu / n * 1e6, "helper_cpu_us_per_report": helper_cpu / n * 1e6}


def verification_alone(n: int, repeat: int) -> dict:
    """Per report and party, verification alone (Prio3Sum(4000), the array
    path the services run: verify_init, then combining both verifier shares
    and deciding), and the helper's HPKE opening beside it; best of repeat, CPU."""
    from rase_common.protocol.prio3 import Prio3Params
    from rase_common.vdaf import batch
    from rase_common.vdaf.workers import open_columns

    sk, pk = generate_keypair()
    params = Prio3Params.for_deployment("sum", key_id="fc-bench", dp_eps=1.0, grid_steps=PARTY_MAX, bands=[10.0])
    vdaf = params.vdaf()
    ctx = params.ctx("r1", 1)
    from rase_common.vdaf.fast_client import FastPrio3, fast_make_report

    fast = FastPrio3(vdaf)
    rng = random.Random(31)
    reports = [fast_make_report(fast, ctx, rng.randrange(PARTY_MAX + 1), pk) for _ in range(n)]

    def mat(k: int) -> np.ndarray:
        return np.frombuffer(b"".join(r[k] for r in reports), dtype=np.uint8).reshape(n, -1)
    nonces, pubs, leaders, sealed = mat(0), np.zeros((n, 0), dtype=np.uint8), mat(2), mat(3)
    best = {"leader_verify_us": 1e9, "helper_verify_us": 1e9, "helper_open_us": 1e9}
    for _ in range(repeat):
        gc.collect()
        c0 = time.process_time()
        helper_in, present = open_columns(sk, ctx, nonces, pubs, sealed, vdaf.input_share_size(1))
        c1 = time.process_time()
        s0, v0, l0 = batch.verify_init_columns(vdaf, b"k" * 32, ctx, 0, nonces, pubs, leaders, [None] * n)
        c2 = time.process_time()
        s1, v1, l1 = batch.verify_init_columns(vdaf, b"k" * 32, ctx, 1, nonces, pubs, helper_in, [None] * n)
        c3 = time.process_time()
        valid, seeds, _ = batch.verifier_messages_columns(vdaf, ctx, [v0, v1], [l0, l1])
        batch.verify_next_columns(s0, valid, seeds)
        c4 = time.process_time()
        valid, seeds, _ = batch.verifier_messages_columns(vdaf, ctx, [v0, v1], [l0, l1])
        batch.verify_next_columns(s1, valid, seeds)
        c5 = time.process_time()
        assert present.all() and s0.accepted.all() and s1.accepted.all()
        best["helper_open_us"] = min(best["helper_open_us"], (c1 - c0) / n * 1e6)
        best["leader_verify_us"] = min(best["leader_verify_us"], (c2 - c1 + c4 - c3) / n * 1e6)
        best["helper_verify_us"] = min(best["helper_verify_us"], (c3 - c2 + c5 - c4) / n * 1e6)
    best["reports"] = n
    best["vs_libprio_rs_prepare_init"] = {k: best[k] / LIBPRIO_RS["prepare_init_us"]
                                          for k in ("leader_verify_us", "helper_verify_us")}
    return best


def print_parties(rows: list[dict], alone: dict) -> None:
    first = rows[0]
    print(f"\nreport size, Prio3Sum(4000): binary {first['binary_report_bytes']} B, "
          f"JSON {first['json_report_bytes']} B")
    print(f"verification alone, {alone['reports']:,} reports, CPU us per report (libprio-rs prepare_init: "
          f"{LIBPRIO_RS['prepare_init_us']} us): leader {alone['leader_verify_us']:.1f} "
          f"({alone['vs_libprio_rs_prepare_init']['leader_verify_us']:.2f}x), helper {alone['helper_verify_us']:.1f} "
          f"({alone['vs_libprio_rs_prepare_init']['helper_verify_us']:.2f}x), the helper's HPKE open "
          f"{alone['helper_open_us']:.1f}")
    print(f"\n{'step':<58}" + "".join(f"{'cpu us/rep':>12}{'wall s':>9}  (workers {r['workers']})" for r in rows))
    for step in first["steps"]:
        print(f"{step:<58}" + "".join(f"{r['steps'][step]['cpu_us_per_report']:>12.1f}"
                                       f"{r['steps'][step]['wall_s']:>9.3f}{'':>13}" for r in rows))
    for who in ("leader", "helper"):
        print(f"{who + ' end to end, CPU us per report':<58}" + "".join(
            f"{r[who + '_cpu_us_per_report']:>12.1f}{'':>22}" for r in rows))


def print_device(cp: dict, mp: dict) -> None:
    names = list(VARIANTS) + ["sum4000_binary"]
    print(f"{'runtime':<26}{'BR rep/s':>12}" + "".join(f"{n + ' rep/s (/BR)':>28}" for n in names))
    for label, rates in (("CPython " + sys.version.split()[0], cp), ("MicroPython unix", mp["unix"]["rates"]),
                         ("MicroPython WebAssembly", mp["wasm"]["rates"])):
        cells = "".join(f"{rates[n]['per_s']:>16,.1f} ({rates[n]['ratio_to_br']:.5f})" for n in names)
        print(f"{label:<26}{rates['br']['per_s']:>12,.0f}{cells}")
    for port in ("unix", "wasm"):
        h = mp[port]["heap"]
        print(f"\nMicroPython {port} heap (bytes above a fresh interpreter, gc.mem_alloc after gc.collect):")
        for key in ("import_bytes", "after_setup_and_1_report_bytes", "after_21_reports_bytes",
                    "after_41_reports_bytes", "growth_reports_22_41_bytes"):
            print(f"  {key:<34}{h[key]:>10,}")
        print("  allocated during one report (gc off): "
              + ", ".join(f"{k} {v:,}" for k, v in h["allocated_per_report_bytes"].items()))
    print(f"\nsmallest unix-port heap that makes all three kinds of report: {mp['unix']['smallest_heap_kib']} KiB")


def print_aggregators(agg: dict) -> None:
    print(f"\n{'variant':<13}{'reports':>9}{'decrypt s':>11}{'leader s':>10}{'helper s':>10}{'finish s':>10}"
          f"{'agg s':>8}{'verify both s':>15}{'(cpu s)':>9}{'us/report':>11}{'growth':>8}{'(cpu)':>7}")
    for name, rows in agg.items():
        for n, r in rows.items():
            print(f"{name:<13}{n:>9,}{r['decrypt_s']:>11.3f}{r['leader_init_s']:>10.3f}{r['helper_init_s']:>10.3f}"
                  f"{r['finish_both_s']:>10.3f}{r['aggregate_both_s']:>8.3f}{r['verify_both_s']:>15.3f}"
                  f"{r['verify_both_cpu_s']:>9.3f}{r['per_report_us']:>11.1f}{r['growth_per_report_vs_smallest']:>8.2f}"
                  f"{r['cpu_growth_per_report_vs_smallest']:>7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="device,aggregators,parties,field",
                    help="which of device, aggregators, parties, field to run")
    ap.add_argument("--parties-n", type=int, default=10_000, help="parties: reports in the window")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="aggregator variants to run")
    ap.add_argument("--device-n", type=int, default=30, help="reports per variant on each device runtime")
    ap.add_argument("--sizes", default="1000,10000,100000", help="window sizes for Count and Sum")
    ap.add_argument("--hist-sizes", default="1000,10000,100000",
                    help="window sizes for Histogram (making 100,000 of its reports takes minutes)")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs for windows <= 10,000")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    variants = args.variants.split(",")
    if parts - {"device", "aggregators", "parties", "field"} or set(variants) - set(VARIANTS):
        ap.error(f"--parts is a subset of device,aggregators,parties,field and --variants of {','.join(VARIANTS)}")
    result: dict = {"benchmark": "prio3", "device_n": args.device_n}
    targets: dict = {}
    if "device" in parts:
        _, pk = generate_keypair()
        cp = device_cpython(args.device_n, pk)
        mp = device_micropython(args.device_n, pk)
        print_device(cp, mp)
        result["device"] = {"cpython": cp, "micropython_unix": mp["unix"], "micropython_wasm": mp["wasm"]}
        targets["unix_sum12_reports_per_s"] = mp["unix"]["rates"]["sum12"]["per_s"]
        targets["unix_sum4000_binary_reports_per_s"] = mp["unix"]["rates"]["sum4000_binary"]["per_s"]
        targets["wasm_sum4000_binary_reports_per_s"] = mp["wasm"]["rates"]["sum4000_binary"]["per_s"]
        targets["unix_smallest_heap_kib"] = mp["unix"]["smallest_heap_kib"]
    if "aggregators" in parts:
        agg = aggregators(variants, [int(x) for x in args.sizes.split(",")],
                          [int(x) for x in args.hist_sizes.split(",")], args.repeat)
        print_aggregators(agg)
        result["aggregators"] = {k: {str(n): r for n, r in v.items()} for k, v in agg.items()}
        for name, rows in agg.items():
            targets[f"{name}_10000_verify_both_s"] = rows.get(10_000, {}).get("verify_both_s")
            targets[f"{name}_worst_growth"] = max(r["growth_per_report_vs_smallest"] for r in rows.values())
            targets[f"{name}_worst_cpu_growth"] = max(r["cpu_growth_per_report_vs_smallest"] for r in rows.values())
    if "parties" in parts:
        alone = verification_alone(args.parties_n, 3)
        rows = [parties(args.parties_n, w) for w in (1, 2)]
        print_parties(rows, alone)
        result["parties"] = {"verification_alone": alone, "by_workers": rows}
        targets["binary_report_bytes"] = rows[0]["binary_report_bytes"]
        targets["leader_cpu_us_per_report"] = rows[0]["leader_cpu_us_per_report"]
        targets["helper_cpu_us_per_report"] = rows[0]["helper_cpu_us_per_report"]
        targets["leader_verify_alone_us"] = alone["leader_verify_us"]
        targets["helper_verify_alone_us"] = alone["helper_verify_us"]
        answer = "helper answer (open, verify_init, decide, answer)"
        close = "leader close (shuffle, verify_init, batch, journal)"
        targets["helper_answer_wall_1_over_2_workers"] = (rows[0]["steps"][answer]["wall_s"]
                                                          / rows[1]["steps"][answer]["wall_s"])
        targets["leader_close_wall_1_over_2_workers"] = (rows[0]["steps"][close]["wall_s"]
                                                         / rows[1]["steps"][close]["wall_s"])
    if "field" in parts:
        ops = field_ops(10_000, 20)
        print(f"\n{'Field128, 10,000 elements':<28}{'limbs us':>10}{'Python ints us':>16}{'speed-up':>10}")
        for name, r in ops.items():
            print(f"{name:<28}{r['limbs_us']:>10.0f}{r['python_int_objects_us']:>16.0f}{r['speedup']:>10.1f}")
        result["field128_10000_elements"] = ops
    print("\ntargets: unix port >= 20 Prio3Sum(12-bit) reports/s; 10,000 reports verified by both < 2 s; growth "
          "(per-report time / smallest window's) no worse than linear:")
    for key, value in targets.items():
        print(f"  {key:<36}{value if value is None else round(value, 3)}")
    result["targets"] = targets
    result["load_average"] = os.getloadavg()
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
