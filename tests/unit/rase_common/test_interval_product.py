"""Interval products and the privacy unit's day on the wire and in each
party's config (issue 28): the control message's interval_s (the device's
parser and the model agree), the prio3 product "interval" bound into the
params text, each party's eps per release computed from its own [privacy]
eps_day, and what an aggregate of an interval says about the unit's day."""

from __future__ import annotations

import json

import pytest

from fusion_center.config import FusionConfig
from fusion_center.ldp.merge import aggregate
from rase_common.errors import ConfigError
from rase_common.privacy import UnitPrivacy, unit_guarantee
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.prio3 import Prio3Params
from rase_common.protocol.window import WindowMessage
from rase_device import wire
from rase_device.interval import eps_per_release

EPS = eps_per_release(4.0, 48)


def raw(**fields) -> dict:
    return {"v": 1, "beta": 0.5, "rho": 0.9, "x_min": 0.0, "x_max": 8000.0, "gamma": 1.0, "period_s": 8.0,
            "eps_levels": [EPS], "mechanism": "duchi", **fields}


@pytest.mark.parametrize("fields,ok", [
    ({"interval_s": 1800}, True), ({"interval_s": 900.0}, True), ({"interval_s": 86400}, True), ({}, True),
    ({"interval_s": 1700}, False), ({"interval_s": 4}, False), ({"interval_s": -1800}, False),
    ({"interval_s": 1800, "mechanism": "binary"}, False), ({"interval_s": 1800, "mechanism": "categorical"}, False),
])
def test_the_devices_parser_and_the_model_agree_on_interval_s(fields, ok):
    msg = raw(**fields)
    if ok:
        parsed = wire.parse_control(json.dumps(msg))
        assert parsed.get("interval_s") == fields.get("interval_s")
        assert ControlMessage(**msg).interval_s == fields.get("interval_s")
    else:
        with pytest.raises(ValueError):
            wire.parse_control(json.dumps(msg))
        with pytest.raises(ValueError):
            ControlMessage(**msg)


def prio3(interval_s: float | None = 1800.0, **kw) -> Prio3Params:
    return Prio3Params(kind="sum", product="interval" if interval_s else "per-t", interval_s=interval_s,
                       max_measurement=8000, dp_eps=EPS, key_id="fc-1", **kw)


def test_the_interval_is_bound_into_the_params_text_and_id():
    p = prio3()
    assert p.text == ("vdaf=2;max_measurement=8000|product=interval;interval_s=1800|helper_key_id=fc-1|"
                      "noise=discrete_laplace;dp_eps=0.0833282")
    assert p.params_id != prio3(900.0).params_id != prio3(None).params_id
    assert p.window_period_s(8.0) == 1800.0
    with pytest.raises(ValueError, match="interval_s"):
        Prio3Params(kind="sum", product="interval", max_measurement=8000, dp_eps=EPS, key_id="fc-1")
    with pytest.raises(ValueError, match="interval_s"):
        Prio3Params(kind="sum", product="hourly", interval_s=3600, max_measurement=8000, dp_eps=EPS, key_id="fc-1")
    # The control message states it twice (top level for every mode, in the params for the binding): once.
    ok = dict(x_max=8000.0, mechanism="prio3", eps_levels=[EPS], prio3=p, interval_s=1800.0)
    assert ControlMessage(**ok).window_period_s == 1800.0
    wire.parse_control(ControlMessage(**ok).model_dump_json())
    with pytest.raises(ValueError, match="interval_s"):
        ControlMessage(**{**ok, "interval_s": None})
    bad = json.loads(ControlMessage(**ok).model_dump_json())
    bad["interval_s"] = 900.0
    with pytest.raises(ValueError, match="interval_s"):
        wire.parse_control(json.dumps(bad))


def test_each_party_computes_its_eps_per_release_from_its_own_daily_budget():
    secure = FusionConfig.load(None, regions=["r1"], privacy={"unit": "household", "eps_day": 4.0},
                               precision={"mechanism": "prio3", "x_max": 8000.0, "interval_s": 1800.0,
                                          "prio3": {"kind": "sum", "product": "interval", "interval_s": 1800.0,
                                                    "max_measurement": 8000, "key_id": "fc-1"}},
                               prio3={"private_key_file": "x", "verify_key_file": "y", "key_id": "fc-1"})
    assert secure.precision.eps_levels == [EPS] and secure.precision.prio3.dp_eps == EPS
    local = FusionConfig.load(None, regions=["r1"], precision={"interval_s": 900.0},
                              privacy={"unit": "household", "eps_day": 8.0, "devices_per_unit": 9})
    assert local.precision.eps_levels == [eps_per_release(8.0, 96, 9)]
    assert 96 * 9 * local.precision.eps_levels[0] <= 8.0
    with pytest.raises(ConfigError, match="leave eps_levels out"):
        FusionConfig.load(None, regions=["r1"], precision={"interval_s": 1800.0, "eps_levels": [1.0]},
                          privacy={"eps_day": 4.0})
    assert FusionConfig.load(None, regions=["r1"]).precision.eps_levels == [1.0]       # event-level: as stated


def test_an_interval_aggregate_states_its_time_and_the_units_day():
    precision = ControlMessage(x_max=8000.0, eps_levels=[EPS], interval_s=1800.0, mechanism="duchi")
    t = 789264                                               # 2015-01-08 00:00 UTC in half-hours since 1970
    window = WindowMessage.uniform("r1", t, [500.0] * 20, eps=EPS, kind="duchi")
    unit = UnitPrivacy(unit="household", eps_day=4.0)
    agg, _ = aggregate(t, [window], precision, {"r1"}, unit=unit)
    assert (agg.t_start, agg.period_s, agg.t_start_iso) == (t * 1800.0, 1800.0, "2015-01-08T00:00:00.000Z")
    pu = agg.privacy_unit
    assert pu is not None and (pu.unit, pu.guarantee, pu.eps_day_budget) == ("household", "per unit per day", 4.0)
    assert pu.releases_per_day == 48 and pu.eps_per_unit_day == pytest.approx(48 * EPS) and 48 * EPS <= 4.0
    assert pu.statement.startswith("eps 0.0833282 per household per release, 48 releases a day: eps 3.99976 per "
                                   "household per UTC day, within the enforced budget of eps 4 per household-day")
    event, _ = aggregate(t, [WindowMessage.uniform("r1", 5, [50.0] * 20, eps=1.0, kind="duchi")],
                         ControlMessage(eps_levels=[1.0]), {"r1"},
                         unit=UnitPrivacy(unit="household", devices_per_unit=9))
    e = event.privacy_unit
    assert e is not None and e.guarantee == "event-level" and e.eps_per_unit_day == 9 * 10800
    assert e.statement.startswith("event-level: eps 9 per household per release (9 devices, each eps 1 per report), "
                                  "10,800 releases a day: eps 97,200 per household per UTC day (void in practice")


def test_the_units_guarantee_adds_its_devices_reports_up():
    g = unit_guarantee(UnitPrivacy(unit="household", eps_day=8.0, devices_per_unit=9), eps_per_release(8.0, 48, 9),
                       48)
    assert g.eps_per_unit_day <= 8.0 and g.eps_per_unit_day > 7.99 and not g.event_level
