"""Every metric name the RASE processes export, as Prometheus stores it
(counters with _total, histograms with _bucket/_sum/_count), for checking
that dashboards and alert rules read only what exists."""

from __future__ import annotations

from fog_shuffler.metrics import FogMetrics
from fog_shuffler.prio3.leader import LeaderMetrics
from fusion_center.prio3.helper import HelperMetrics
from fusion_center.metrics import FusionMetrics
from rase_common.broker_metrics import BrokerMetrics

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


def exported_metric_names() -> set[str]:
    fog, fusion = FogMetrics(), FusionMetrics()
    # A fog as Prio3's leader and a fusion center as its helper register their metrics too.
    LeaderMetrics(fog.registry)
    HelperMetrics(fusion.registry)
    families = [f for m in (fog, fusion) for f in m.registry.collect()]
    families += list(BrokerMetrics().describe())      # the $SYS bridge: every family it may export
    return {family.name + sfx for family in families for sfx in SUFFIXES.get(family.type, ("",))}
