"""The broker connection dropped at the moments that matter, under load:
each service reaches Mosquitto through a TcpProxy (simulators/faults/proxy.py)
that cuts the link when a given MQTT packet passes. Real `rase fog` and
`rase fusion` processes, 2,000 reports/s.

- forwarding: the fog's window PUBLISH is lost with the link, then (second
  cut) it reaches the broker and the PUBACK is lost: the fog sends the same
  bytes again;
- publishing: the same two cuts on the fusion center's aggregate PUBLISH;
- acknowledging: the fog's PUBACK for reports it has journaled is lost with
  the link (the broker sends those reports again: dropped as repeats), then
  the link drops while the broker is delivering reports to the fog.

No process exits, every acknowledged report is in exactly one aggregate, no
window is shuffled twice and no aggregate published with two contents."""

from __future__ import annotations

import time

import pytest

from simulators.faults.proxy import puback, publish_to
from simulators.faults.rig import PipelineSpec
from tests.integration.chaos_helpers import (assert_once_and_complete, assert_services_up, finish,  # noqa: F401
                                             make_pipeline, run_load)

pytestmark = pytest.mark.integration

POINTS = {   # point -> (which proxy, [(direction, packet, deliver the packet before the cut)])
    "forwarding": ("fog_proxy", [("up", publish_to("rase/v1/windows/"), False),
                                 ("up", publish_to("rase/v1/windows/"), True)]),
    "publishing": ("fusion_proxy", [("up", publish_to("rase/v1/aggregates/"), False),
                                    ("up", publish_to("rase/v1/aggregates/"), True)]),
    "acknowledging": ("fog_proxy", [("up", puback, False),
                                    ("down", publish_to("rase/v1/reports/"), False)]),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_a_dropped_connection_ends_no_process_and_loses_nothing(make_pipeline, point):
    rig = make_pipeline(PipelineSpec(devices=2000))
    proxy_name, cuts = POINTS[point]
    proxy = getattr(rig, proxy_name)
    spec, load = run_load(rig, seconds=6)
    time.sleep(2.0)
    for direction, packet, deliver in cuts:
        cut = proxy.cut_on(direction, packet, deliver=deliver)
        assert cut.wait(10), f"no {point} packet passed within 10 s"
        time.sleep(1.0)
    result, account = finish(rig, spec, load)

    assert proxy.connections >= 1 + len(cuts), "the service did not reconnect after each cut"
    assert_services_up(rig)
    if point == "forwarding":
        assert account.windows_resent >= 1, "the window whose PUBACK was lost was not sent again"
    if point == "publishing":
        assert account.aggregates_republished >= 1, "the aggregate whose PUBACK was lost was not sent again"
    assert account.acked == result.scheduled
    assert_once_and_complete(rig, account)
