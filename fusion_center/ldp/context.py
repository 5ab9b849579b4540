"""What every aggregate says beside its estimates: its wall-clock time, its
privacy unit, and the clipping its `mean` is subject to. Pure.

- Time: t_start and t_end of period t (Unix seconds and ISO 8601 UTC) on the
  schedule of the control message the fusion center broadcasts (epoch0 + t
  period_s, piecewise across a schedule change), so a subscriber never needs
  epoch0.
- Privacy unit: eps per report (the largest level in the aggregate), its
  basic composition per hour and per day at the period
  (rase_common.privacy), and the shuffle guarantee actually applied to the
  aggregate's windows, as each window's batches state it (central eps after
  a uniform shuffle or BUDS batches, d_sigma for a Mallows order). A
  [central_target] is claimed only where every window delivered it.
- Clipping: devices clip readings to [x_min, x_max], so `mean` is unbiased
  for the clipped mean. With a bound on the clipping bias (from `rase
  calibrate`), mean's interval is widened upwards by it: it then holds for
  the true mean as well.
"""

from __future__ import annotations

from datetime import datetime, timezone

from rase_device.mechanisms import MEAN_MECHANISMS
from rase_common.privacy import UnitGuarantee, UnitPrivacy, privacy_over_time, unit_guarantee
from rase_common.protocol.aggregate import Aggregate, CentralTargetCheck, Clipping, EstimateOut, PrivacyUnit
from rase_common.protocol.control import ControlMessage
from rase_common.protocol.window import WindowMessage

MEAN_KINDS = MEAN_MECHANISMS    # the reports estimate a mean reading in W


def iso_utc(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def add_context(agg: Aggregate, windows: list[WindowMessage], precision: ControlMessage, *,
                central_target=None, clip_bias_bound: float | None = None,  # noqa: ANN001
                unit: UnitPrivacy | None = None) -> Aggregate:
    """agg with its wall-clock time, privacy unit and clipping filled in.
    central_target: anything with eps and delta (fusion_center.config.CentralTarget);
    unit: the fusion center's own [privacy] (default: a device, event-level)."""
    schedule = precision.window_schedule()  # an interval product's intervals, else piecewise across a schedule change
    start, end = schedule.start_of(agg.t), schedule.end_of(agg.t)
    period_s = end - start
    update = {"t_start": start, "t_end": end, "t_start_iso": iso_utc(start), "t_end_iso": iso_utc(end),
              "period_s": period_s,
              "privacy_unit": privacy_unit(windows, period_s, central_target, unit or UnitPrivacy(),
                                           precision.releases_per_day)}
    if agg.mechanism in MEAN_KINDS:
        clipping, estimates = clip(agg, precision.x_max, clip_bias_bound)
        update |= {"clipping": clipping, "estimates": estimates}
    return agg.model_copy(update=update)


def privacy_unit(windows: list[WindowMessage], period_s: float, central_target=None,  # noqa: ANN001
                 unit: UnitPrivacy | None = None, releases_per_day: float | None = None) -> PrivacyUnit:
    batches = [(w.region, b) for w in windows for b in w.batches]
    eps = max(float(b.eps) for _, b in batches)
    day = privacy_over_time(eps, period_s, 24.0)
    kinds = {b.mechanism for _, b in batches}
    shuffle = {"mallows": "d_sigma", "uniform": "uniform", "buds": "buds"}[kinds.pop()] if len(kinds) == 1 \
        else "mixed"
    amplified = [b.guarantee for _, b in batches if b.mechanism in ("uniform", "buds") and b.guarantee]
    central = None
    if shuffle in ("uniform", "buds") and len(amplified) == len(batches):
        central = (max(_num(g["eps"]) for g in amplified), max(_num(g["delta"]) for g in amplified))
    alphas = [_num(g["alpha"]) for _, b in batches if (g := b.guarantee) and g.get("kind") == "d_sigma"]
    spent = (f"eps {eps:g} per report (basic composition at one report every {period_s:g} s: "
             f"{day.eps_per_hour:,.6g} per hour, {day.eps_total:,.6g} per day)")
    if central is not None:
        how = "uniformly" if shuffle == "uniform" else "in BUDS batches"
        after = f"windows shuffled {how}: central ({central[0]:.4g}, {central[1]:g})-DP per window"
    elif alphas:
        after = (f"windows shuffled by Mallows: (alpha {max(alphas):g}) d_sigma privacy of the order; "
                 "no amplification by shuffling claimed")
    else:
        after = "no central guarantee from the shuffle (windows state none)"
    per_unit = unit_guarantee(unit or UnitPrivacy(), eps, releases_per_day or 86400.0 / period_s)
    return PrivacyUnit(eps_per_report=eps, period_s=period_s, eps_per_hour=day.eps_per_hour, eps_per_day=day.eps_total,
                       shuffle=shuffle, central_eps=None if central is None else central[0],
                       central_delta=None if central is None else central[1],
                       d_sigma_alpha=max(alphas) if alphas else None,
                       statement=f"{per_unit.statement()}; local DP, {spent}; {after}",
                       central_target=None if central_target is None else check_target(batches, central_target),
                       **unit_fields(per_unit))


def unit_fields(g: UnitGuarantee) -> dict:
    """The privacy unit's fields of a PrivacyUnit (rase_common.privacy.unit_guarantee)."""
    return {"unit": g.unit, "devices_per_unit": g.devices_per_unit, "eps_per_release": g.eps_per_release,
            "releases_per_day": g.releases_per_day, "eps_per_unit_day": g.eps_per_unit_day,
            "eps_day_budget": g.eps_day_budget, "guarantee": "event-level" if g.event_level else "per unit per day"}


def check_target(batches, target) -> CentralTargetCheck:  # noqa: ANN001
    """Met only when every batch was shuffled uniformly (or in BUDS batches)
    and states a central eps and delta within the target."""
    for region, b in batches:
        g = b.guarantee or {}
        if b.mechanism == "mallows":
            why = f"window {region} was shuffled by Mallows: d_sigma privacy of the order, no amplification"
        elif g.get("kind") != "shuffle_dp":
            why = f"window {region} states no amplification"
        elif float(g["eps"]) > target.eps * (1 + 1e-9) or float(g["delta"]) > target.delta:
            why = (f"window {region} ({len(b.values)} reports at eps {b.eps:g}) is central "
                   f"({float(g['eps']):.4g}, {float(g['delta']):g})-DP, weaker than the target")
        else:
            continue
        return CentralTargetCheck(eps=target.eps, delta=target.delta, met=False, reason=why)
    return CentralTargetCheck(eps=target.eps, delta=target.delta, met=True,
                              reason="every window uniformly shuffled and central-DP within the target")


def clip(agg: Aggregate, x_max: float, bound: float | None) -> tuple[Clipping, dict]:
    """The clipping statement and the estimates with mean's interval widened
    upwards by the bound (the clipped mean is never above the true mean)."""
    estimates = dict(agg.estimates)
    if bound is None:
        note = (f"readings above x_max = {x_max:g} are clipped: mean and its interval are for the clipped readings "
                "(no bound on the clipping bias is configured; `rase calibrate` estimates one)")
        return Clipping(x_max=x_max, bias_bound=None, widened=False, note=note), estimates
    mean = estimates.get("mean")
    if mean is not None:
        method = (mean.method or "") + "+clip-bias"
        estimates["mean"] = EstimateOut(value=mean.value, ci=(mean.ci[0], mean.ci[1] + bound), n=mean.n, method=method)
    note = (f"readings above x_max = {x_max:g} are clipped; the clipped mean is at most {bound:g} below the true "
            "mean (rase calibrate's bound), so mean's interval is widened upwards by it")
    return Clipping(x_max=x_max, bias_bound=bound, widened=mean is not None, note=note), estimates


def _num(v: object) -> float:
    """A number of a window's stated guarantee (the window's schema holds them as JSON scalars)."""
    if not isinstance(v, (int, float)):
        raise ValueError(f"a guarantee's number is {v!r}")
    return float(v)
