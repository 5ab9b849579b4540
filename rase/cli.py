"""`rase`: one command line for every RASE component."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from rase.settings import ConfigError


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def _run_until_interrupted(coro) -> int:
    """Run a service until it returns or Ctrl-C (its finally blocks clean up)."""
    try:
        asyncio.run(coro)
    except KeyboardInterrupt:
        pass
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from edge_agent.config import AgentConfig
    from edge_agent.service import AgentService

    return _run_until_interrupted(AgentService(AgentConfig.load(args.config)).run(max_reports=args.max_reports))


def cmd_flash(args: argparse.Namespace) -> int:
    import tempfile

    from edge_agent.config import AgentConfig
    from edge_agent.flash import FlashError, build_bundle, copy_to_board

    cfg = AgentConfig.load(args.config)
    try:
        if args.bundle_only:
            files = build_bundle(cfg, Path(args.bundle_only), sensor=args.sensor, umqtt=args.umqtt)
            print(f"wrote {len(files)} files to {args.bundle_only}")
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            build_bundle(cfg, Path(tmp), sensor=args.sensor, umqtt=args.umqtt)
            copy_to_board(Path(tmp), args.port)
    except FlashError as err:
        print(f"rase flash: {err}", file=sys.stderr)
        return 1
    print(f"flashed {cfg.device} to {args.port}; reset the board to start")
    return 0


def cmd_fog(args: argparse.Namespace) -> int:
    from fog_shuffler.config import FogConfig
    from fog_shuffler.service import FogService

    return _run_until_interrupted(FogService(FogConfig.load(args.config)).run())


def cmd_fusion(args: argparse.Namespace) -> int:
    from fusion_center.config import FusionConfig
    from fusion_center.service import FusionService

    return _run_until_interrupted(FusionService(FusionConfig.load(args.config), config_path=args.config).run())


def cmd_query(args: argparse.Namespace) -> int:
    import json

    from fusion_center.config import FusionConfig
    from fusion_center.store import AggregateStore

    path = args.db or FusionConfig.load(args.config).store_path
    try:
        store = AggregateStore(path, readonly=True)
    except FileNotFoundError as err:
        print(f"rase query: {err}", file=sys.stderr)
        return 1
    rows = store.recent(args.scope, args.t_from, args.t_to)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"{'t':>8} {'n':>6}  {'SE':>22}  {'MLE':>22}  {'BS':>22}  clamped")
    for r in rows:
        cells = []
        for k in ("se", "mle", "bs"):
            e = r["estimates"][k]
            cells.append(f"{e['value']:>8.1f} [{e['ci'][0]:>6.0f},{e['ci'][1]:>6.0f}]")
        flag = f"{r['share_at_bound']:.0%} at bound" if r["clamped"] else "no"
        print(f"{r['t']:>8} {r['n']:>6}  " + "  ".join(cells) + f"  {flag}")
    print(f"{len(rows)} timestamps", file=sys.stderr)
    return 0


def _houses(text: str) -> list[int]:
    try:
        hs = [int(h) for h in text.split(",") if h.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--houses takes numbers like 1,2,3, got {text!r}") from None
    if not hs:
        raise argparse.ArgumentTypeError("--houses needs at least one house")
    return hs


def cmd_replay(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from simulators.pipeline import PipelineSpec, run_pipeline, write_jsonl
    from simulators.refit import RefitFormatError, bundled_dir, epoch0_of, load_house

    data = Path(args.data) if args.data else bundled_dir()
    try:
        houses = [load_house(data, h) for h in args.houses]   # every file checked before anything starts
    except (RefitFormatError, OSError) as err:
        print(f"rase replay: {err}", file=sys.stderr)
        return 2
    epoch0 = epoch0_of(houses, args.period)
    offset = 0.0
    if args.start:
        start = datetime.fromisoformat(args.start)
        start = start.replace(tzinfo=timezone.utc) if start.tzinfo is None else start
        offset = start.timestamp() - epoch0
        last = max(int(h.unix[-1]) for h in houses)
        if offset < 0 or start.timestamp() > last:
            print(f"rase replay: --start {args.start} is outside the data "
                  f"({datetime.fromtimestamp(epoch0, timezone.utc):%Y-%m-%d %H:%M:%S} .. "
                  f"{datetime.fromtimestamp(last, timezone.utc):%Y-%m-%d %H:%M:%S} UTC)", file=sys.stderr)
            return 2
    spec = PipelineSpec(data_dir=data, houses=args.houses, hours=args.hours, start_offset_s=offset, eps=args.eps,
                        period_s=args.period, clone=args.clone, broker_url=args.broker,
                        speedup=None if args.fast or args.speedup is None else args.speedup,
                        work_dir=Path(args.out).parent / (Path(args.out).stem + ".state"))
    result = asyncio.run(run_pipeline(spec))
    write_jsonl(result, Path(args.out))
    print(f"replayed {result.params['timestamps']} timestamps of {result.params['devices']} devices: "
          f"{result.reports} reports, {len(result.aggregates)} aggregates -> {args.out} "
          f"({result.elapsed_s:.1f} s)")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from simulators.refit import RefitFormatError, bundled_dir

    data = Path(args.data) if args.data else bundled_dir()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.what == "utility":
            return _eval_utility(args, data, out)
        return _eval_attack(args, data, out)
    except RefitFormatError as err:
        print(f"rase eval: {err}", file=sys.stderr)
        return 2


def _eval_utility(args: argparse.Namespace, data: Path, out: Path) -> int:
    import json

    from simulators.evaluation import plot_utility, utility_from_replays, utility_from_simulation

    ws = tuple(args.windows)
    if args.replay:
        res = utility_from_replays(data, [Path(p) for p in args.replay], ws)
    else:
        eps_list = [float(e) for e in args.eps.split(",")]
        res = utility_from_simulation(data, args.houses, eps_list, hours=args.hours, seed=args.seed,
                                      windows_w=ws, bootstrap_b=args.bootstrap_b,
                                      progress=lambda e, _: print(f"  eps {e} done", file=sys.stderr))
    w = ws[0]
    print(f"utility on REFIT ({res.source}): {res.devices} devices, {res.timestamps} timestamps")
    print(f"{'eps':>6} {'est':>4} {'MAE':>10} {'max sq err':>14} {'MAE win' + str(w):>12} {'max sq win' + str(w):>14}")
    for e in res.eps:
        for k in ("se", "mle", "bs"):
            r = res.table[e][k]
            print(f"{e:>6g} {k.upper():>4} {r['mae']:>10.1f} {r['max_sq']:>14.4g} {r[f'win{w}_mae']:>12.1f} "
                  f"{r[f'win{w}_max_sq']:>14.4g}")
    (out / "utility.json").write_text(json.dumps({"source": res.source, "devices": res.devices,
                                                  "timestamps": res.timestamps,
                                                  "table": {str(e): v for e, v in res.table.items()}}, indent=1))
    plot_utility(res, ws, out / "utility.png")
    print(f"written: {out / 'utility.json'}, {out / 'utility.png'}")
    return 0


def _eval_attack(args: argparse.Namespace, data: Path, out: Path) -> int:
    import json

    from simulators.attack import LABELS, plot_attack, run_attack

    res = run_attack(data, args.houses, eps=args.eps_attack, hours=args.hours, every=args.every, alpha=args.alpha,
                     group_size=args.group_size, jitter_s=args.jitter, seed=args.seed,
                     progress=lambda r: print(f"  {LABELS[r.scenario]} done", file=sys.stderr))
    print(f"re-identification attack: {len(res[0].per_device)} devices, eps {args.eps_attack}, alpha {args.alpha}, "
          f"group size {args.group_size}, {res[0].train_reports} training / {res[0].test_reports} test reports")
    print(f"{'scenario':<28}{'precision %':>12}{'recall %':>10}")
    for r in res:
        print(f"{LABELS[r.scenario]:<28}{100 * r.precision:>12.1f}{100 * r.recall:>10.1f}")
    print(f"{'(chance)':<28}{100 / len(res[0].per_device):>12.1f}{100 / len(res[0].per_device):>10.1f}")
    (out / "attack.json").write_text(json.dumps([r.__dict__ for r in res], indent=1))
    plot_attack(res, out / "attack.png", f"Re-identification attack, eps {args.eps_attack}, alpha {args.alpha}, "
                                         f"group size {args.group_size}")
    print(f"written: {out / 'attack.json'}, {out / 'attack.png'}")
    return 0


def cmd_acl(args: argparse.Namespace) -> int:
    from fog_shuffler.config import FogConfig
    from rase.acl import build_acl

    cfg = FogConfig.load(args.fog_config)
    devices = [d for rc in cfg.regions.values() for d in rc.all_devices()]
    print(build_acl(devices, subscribers=args.subscriber or ["dashboard"]), end="")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from simulators.demo import run_demo

    return asyncio.run(run_demo(out_dir=Path(args.out), hours=args.hours))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rase", description=__doc__)
    p.add_argument("--log-level", default="INFO")
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("agent", help="run one CPython edge agent")
    a.add_argument("--config", required=True, type=Path)
    a.add_argument("--max-reports", type=int, default=None, help="stop after this many reports")
    a.set_defaults(func=cmd_agent)

    f = sub.add_parser("flash", help="build a MicroPython board bundle and copy it with mpremote")
    f.add_argument("--config", type=Path, default=Path("configs/agent.example.toml"))
    g = f.add_mutually_exclusive_group(required=True)
    g.add_argument("--port", help="serial port of the board, e.g. /dev/ttyACM0")
    g.add_argument("--bundle-only", metavar="DIR", help="write the bundle to DIR, no board needed")
    f.add_argument("--sensor", type=Path, help="sensor.py with read() -> float (default: ADC template)")
    f.add_argument("--umqtt", type=Path, help="umqtt/simple.py to bundle (default: fetched and cached)")
    f.set_defaults(func=cmd_flash)

    fg = sub.add_parser("fog", help="run the fog shuffler")
    fg.add_argument("--config", required=True, type=Path)
    fg.set_defaults(func=cmd_fog)

    fu = sub.add_parser("fusion", help="run the fusion center")
    fu.add_argument("--config", required=True, type=Path)
    fu.set_defaults(func=cmd_fusion)

    q = sub.add_parser("query", help="read stored aggregates")
    q.add_argument("--from", dest="t_from", type=int, required=True, help="first logical timestamp")
    q.add_argument("--to", dest="t_to", type=int, required=True, help="last logical timestamp")
    q.add_argument("--json", action="store_true", help="one JSON object per line")
    q.add_argument("--scope", default="all")
    src = q.add_mutually_exclusive_group()
    src.add_argument("--config", type=Path, default=Path("configs/fusion.example.toml"))
    src.add_argument("--db", type=Path, help="the fusion center's SQLite store")
    q.set_defaults(func=cmd_query)

    r = sub.add_parser("replay", help="replay REFIT houses through real agents, fog and fusion center")
    r.add_argument("--data", help="folder of REFIT house_N.csv[.gz] (default: the bundled excerpt)")
    r.add_argument("--houses", type=_houses, required=True, help="e.g. 1,2,3")
    r.add_argument("--start", help="ISO time (UTC) to start from, default the first row")
    r.add_argument("--hours", type=float, default=1.0)
    sp = r.add_mutually_exclusive_group()
    sp.add_argument("--speedup", type=float, help="simulated time runs this many times faster than real time")
    sp.add_argument("--fast", action="store_true", help="as fast as possible (the default)")
    r.add_argument("--eps", type=float, default=1.0)
    r.add_argument("--clone", type=int, default=1, help="copies of each device, shifted by an hour each")
    r.add_argument("--period", type=float, default=8.0, help="period_s")
    r.add_argument("--broker", help="mqtt://host:port (default: an embedded broker)")
    r.add_argument("--out", required=True, help="JSON lines: parameters, then one line per timestamp")
    r.set_defaults(func=cmd_replay)

    ev = sub.add_parser("eval", help="the paper's utility and re-identification evaluation")
    ev.add_argument("what", choices=["utility", "attack"])
    ev.add_argument("--data", help="folder of REFIT house_N.csv[.gz] (default: the bundled excerpt)")
    ev.add_argument("--houses", type=_houses, default=[1, 2, 3, 5, 12])
    ev.add_argument("--hours", type=float, default=24.0)
    ev.add_argument("--seed", type=int, default=None, help="reproducible noise (evaluation only)")
    ev.add_argument("--out", default="out/eval")
    ev.add_argument("--eps", default="0.1,0.5,1,2,5,9", help="utility: eps values to sweep")
    ev.add_argument("--windows", type=int, nargs="+", default=[64], help="utility: windowed w")
    ev.add_argument("--bootstrap-b", type=int, default=1000)
    ev.add_argument("--replay", nargs="+", help="utility: score these `rase replay` outputs instead")
    ev.add_argument("--eps-attack", type=float, default=1.0, help="attack: eps per report")
    ev.add_argument("--alpha", type=float, default=30.0, help="attack: shuffle privacy alpha")
    ev.add_argument("--group-size", type=int, default=9, help="attack: RS target group size")
    ev.add_argument("--every", type=int, default=4, help="attack: use every k-th timestamp")
    ev.add_argument("--jitter", type=float, default=0.5, help="attack: arrival jitter (s) without a shuffler")
    ev.set_defaults(func=cmd_eval)

    ac = sub.add_parser("acl", help="print the Mosquitto ACL for the devices of a fog config")
    ac.add_argument("--fog-config", type=Path, default=Path("configs/fog.example.toml"))
    ac.add_argument("--subscriber", action="append", help="a user that may read aggregates (repeatable)")
    ac.set_defaults(func=cmd_acl)

    d = sub.add_parser("demo", help="the pipeline on an embedded broker with the bundled REFIT excerpt")
    d.add_argument("--out", default="out/demo", help="where to write results")
    d.add_argument("--hours", type=float, default=3.0, help="simulated hours to replay")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"rase: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
