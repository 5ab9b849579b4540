"""A real Prometheus (Debian's) scrapes a real `rase fog`, `rase fusion` and
`rase broker-metrics`, fed by real agents through a real Mosquitto: every
panel expression of the shipped Grafana dashboard returns data through its
HTTP API, and the shipped alert rules load and evaluate on the real series."""

import json
import math
import sqlite3
import time

import pytest

from tests.observe_stack import PERIOD_S, ROOT, Prometheus, running_stack, wait_until

pytestmark = pytest.mark.integration
DASHBOARD = ROOT / "configs/grafana/dashboards/rase.json"


def panel_targets() -> list[tuple[str, str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["refId"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def stored_aggregates(db) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM aggregates").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    work = tmp_path_factory.mktemp("observe")
    with running_stack(work / "stack") as stack:
        jobs = {"rase-fog": [stack.fog_metrics], "rase-fusion": [stack.fusion_metrics],
                "rase-broker": [stack.broker_metrics]}
        with Prometheus(work / "prometheus", jobs) as prom:     # scraping from the start: rates need samples
            wait_until(lambda: stored_aggregates(stack.work / "fusion.sqlite") >= 3, 60, stack,
                       "three aggregates stored by the fusion center")
            try:
                yield stack, prom
            except BaseException:
                print("---- prometheus ----\n" + prom.log())
                raise


def values(series: list[dict]) -> list[float]:
    return [float(s["value"][1]) for s in series]


def one(prom: Prometheus, expr: str) -> float:
    series = prom.query(expr)
    assert len(series) == 1, (expr, series)
    return values(series)[0]


def test_every_panel_expression_returns_data(observed):
    stack, prom = observed
    targets = panel_targets()
    assert len(targets) >= 29
    answers: dict[tuple[str, str], list[dict]] = {}
    deadline = time.monotonic() + 90
    while True:
        for title, ref, expr in targets:
            answers[(title, ref)] = prom.query(expr)
        empty = [(t, r, e) for (t, r, e) in targets
                 if not answers[(t, r)] or not all(math.isfinite(v) for v in values(answers[(t, r)]))]
        if not empty or time.monotonic() > deadline:
            break
        stack.check_alive()
        time.sleep(1.0)
    assert not empty, "no finite data from:\n" + "\n".join(f"  {t} [{r}]: {e}" for t, r, e in empty)

    # The data is what this deployment does, not just present.
    fog = f'instance="127.0.0.1:{stack.fog_metrics}"'
    assert one(prom, f"rate(rase_fog_reports_accepted_total{{{fog}}}[1m])") > 0
    assert one(prom, f"rase_fog_windows_suppressed_total{{{fog}}}") > 0          # region r2: one device
    assert one(prom, f'rase_fog_windows_forwarded_total{{{fog},mechanism="mallows"}}') > 0
    for metric in ("rase_fusion_estimate", "rase_fusion_windowed_estimate"):
        extra = ',w="8"' if metric == "rase_fusion_windowed_estimate" else ""
        lo, v, hi = (one(prom, f'{metric}{{estimator="mean",bound="{b}"{extra}}}') for b in ("lo", "value", "hi"))
        assert hi > lo, (metric, lo, v, hi)
        if metric == "rase_fusion_windowed_estimate":
            assert lo <= v <= hi, (metric, lo, v, hi)       # value +- half-width, not clipped
        else:
            # The value is unbiased, so with few reports it may leave the range (below 0 W); its interval is
            # intersected with the range [0, 4000], so then the value lies beyond the interval's end at that bound.
            assert 0.0 <= lo and hi <= 4000.0, (metric, lo, v, hi)
            assert lo <= v <= hi or (v < lo == 0.0) or (v > hi == 4000.0), (metric, lo, v, hi)
    assert one(prom, 'rase_fusion_windowed_estimate{estimator="mean",w="8",bound="present"}') >= 2
    assert one(prom, "rase_fusion_period_seconds") == PERIOD_S
    assert one(prom, "rase_broker_connected") == 1
    # 19 agents, the fog, the fusion center and the bridge itself.
    assert one(prom, "rase_broker_clients_connected") >= 22
    # Mosquitto refreshes $SYS every sys_interval (1 s here): two scrapes may see one value.
    wait_until(lambda: one(prom, "rate(rase_broker_publish_received_total[1m])") > 0, 20, stack,
               "the broker's received PUBLISH rate above 0")
    assert one(prom, "rase_broker_heap_bytes") > 0


def test_alert_rules_load_and_evaluate_on_the_real_series(observed):
    stack, prom = observed

    def rules() -> list[dict]:
        return [r for g in prom.api("rules")["groups"] for r in g["rules"]]

    wait_until(lambda: all(r["health"] != "unknown" for r in rules()), 30, stack, "every rule evaluated")
    bad = [(r["name"], r["health"], r.get("lastError")) for r in rules() if r["health"] != "ok"]
    assert not bad, bad
    names = {r["name"] for r in rules()}
    assert {"RaseWindowsSuppressed", "RaseStorageOutage", "RaseNoAggregate", "RaseBrokerDown"} <= names

    def active() -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for a in prom.api("alerts")["alerts"]:
            out.setdefault(a["labels"]["alertname"], []).append(a)
        return out

    # Region r2 has one device: half of the fog's windows are suppressed, which the rule
    # sees at once (it fires after 10 minutes, so here it is pending).
    wait_until(lambda: "RaseWindowsSuppressed" in active(), 30, stack, "RaseWindowsSuppressed pending")
    suppressed = active()["RaseWindowsSuppressed"]
    assert [a["labels"]["instance"] for a in suppressed] == [f"127.0.0.1:{stack.fog_metrics}"]
    assert float(suppressed[0]["value"]) == pytest.approx(0.5, abs=0.2)
    healthy = {"RaseStorageOutage", "RaseBrokerDown", "RaseTargetDown", "RaseWindowsQuarantined",
               "RaseFogSubscriptionRefused", "RaseConfigDrift"}
    assert not healthy & set(active()), active()
