"""Re-identification attack (RASE section V-B) on REFIT traces.

Threat model, fixed and documented (docs/evaluation.md): the analyst sees one
batch of reports per timestamp, no identities. For each report it knows the
value, the hour of day and the report's position in the batch (as a share of
the batch size). It has a labelled history: the first 80% of timestamps with
who sent what. A random forest trained on that history predicts the sender of
every report of the last 20%; precision and recall are per device, then
averaged (macro).

Batches without a shuffler (raw, BR) come in arrival order: each device has a
fixed clock phase within the period (uniform, drawn once) and each report a
network delay (normal, sd `jitter_s`), so positions are stable but not fixed.

Scenarios: raw readings; BR only; Laplace + uniform shuffle (float Laplace,
unclamped, the paper's Laplace-fisher); BR + Mallows (the d_sigma mechanism
alone, fog_shuffler.shuffle.robust_shuffler.dsigma_shuffle: BFS sigma_0, houses as
groups, theta = alpha / Delta_K, no refinement or fallback); full RASE (BR + RS).

Beside the sender's recall, each result carries the house rate (share of test
reports whose predicted sender lives in the true sender's house; chance is one
over the number of houses) and the group-level utility that a d_sigma order
keeps: the share of each house's reports that land inside the house's position
range in sigma_0 (the eta of Meehan et al.'s (eta, delta)-preservation), i.e.
what an analyst reading per-house ranges of the batch actually gets.
`sweep_attack` runs RS and d_sigma over a grid of alpha and group size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rase_device.entropy import RandomBits
from rase_device.randomizer import BudgetRandomizer, Calibration
from fog_shuffler.shuffle.randomness import window_rng
from fog_shuffler.shuffle.relationship import RelationshipGraph
from fog_shuffler.shuffle.robust_shuffler import (DEFAULT_BUDS_BATCH, ShuffleParams, buds_shuffle, dsigma_shuffle,
                                                  robust_shuffle)
from simulators.evaluation import readings_matrix, seeded_bytes
from simulators.pipeline import fleet
from simulators.refit import epoch0_of, load_house

SCENARIOS = ("raw", "br", "laplace_uniform", "br_mallows", "br_buds", "rase")
LABELS = {"raw": "raw reports", "br": "BR only", "laplace_uniform": "Laplace + uniform shuffle",
          "br_mallows": "BR + Mallows", "br_buds": f"BR + BUDS batches of {DEFAULT_BUDS_BATCH}",
          "rase": "RASE (BR + RS)"}


@dataclass
class AttackResult:
    scenario: str
    precision: float
    recall: float
    per_device: dict[str, tuple[float, float]]
    train_reports: int
    test_reports: int
    house_rate: float = float("nan")          # predicted sender in the true sender's house
    group_kept: float = float("nan")          # share of reports inside their house's sigma_0 range
    mallows_share: float = float("nan")       # share of batches shuffled by Mallows (RS may fall back)


def batches(scenario: str, x: np.ndarray, ids: list[str], graph: RelationshipGraph, eps: float, *,
            alpha: float, group_size: int, jitter_s: float, period_s: float, rng: np.random.Generator,
            seeded: bool, mechanisms: list | None = None, delta_max_factor: float = 10.0):
    """Yield (t, values, senders) per timestamp in the order the analyst sees them."""
    cal = Calibration()
    # Seeded noise only when the evaluation asked for --seed; otherwise os.urandom.
    br = BudgetRandomizer(cal, RandomBits(read=seeded_bytes(rng) if seeded else None))
    phase = rng.uniform(0, period_s, len(ids))
    params = ShuffleParams(alpha=alpha, group_size=group_size, delta_max_factor=delta_max_factor)
    mechanisms = mechanisms if mechanisms is not None else []
    for j in range(x.shape[1]):
        present = np.flatnonzero(~np.isnan(x[:, j]))
        if present.size == 0:
            continue
        xs = x[present, j]
        devs = [ids[i] for i in present]
        if scenario == "raw":
            vals = xs.copy()
        elif scenario == "laplace_uniform":
            vals = xs + rng.laplace(0, cal.delta / eps, xs.size)
        else:
            vals = np.array([br.randomize(float(v), eps)[0] for v in xs])
        if scenario in ("raw", "br"):
            order = np.argsort(phase[present] + rng.normal(0, jitter_s, present.size), kind="stable")
        elif scenario == "laplace_uniform":
            order = rng.permutation(present.size)
        else:
            key = int(rng.integers(2**62)) if seeded else None
            if scenario == "br_mallows":
                res = dsigma_shuffle(devs, graph, alpha, window_rng(key))
            elif scenario == "br_buds":
                res = buds_shuffle(devs, graph, DEFAULT_BUDS_BATCH, window_rng(key))
            else:
                res = robust_shuffle(devs, graph, params, window_rng(key))
            order = res.order
            mechanisms.append(res.mechanism)
        yield j, vals[order], [devs[i] for i in order]


@dataclass
class AttackData:
    """Readings (devices x timestamps used), ids, hour of day, train split, graph."""
    x: np.ndarray
    ids: list[str]
    hour: np.ndarray
    split: int
    graph: RelationshipGraph
    house_of: dict[str, int]


def prepare_attack(data_dir: Path, houses: list[int], *, hours: float = 24.0, period_s: float = 8.0,
                   every: int = 4) -> AttackData:
    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    n_t = int(hours * 3600 // period_s)
    devices = fleet(hs, 1, 0.0)
    ids = [d.id for d in devices]
    x = readings_matrix(devices, epoch0, period_s, 0, n_t)[:, ::every]   # every k-th timestamp
    hour = (np.arange(n_t)[::every] * period_s / 3600.0) % 24
    graph = RelationshipGraph(groups=[h.device_ids() for h in hs])
    house_of = {d: h.house for h in hs for d in h.device_ids()}
    return AttackData(x, ids, hour, int(0.8 * x.shape[1]), graph, house_of)


def _group_kept(graph: RelationshipGraph, senders: list[str]) -> float:
    """Share of the batch's reports inside their own component's sigma_0 range."""
    sigma0, comps = graph.reference_order(senders)
    where = {}
    for lo, hi in comps:
        for p in range(lo, hi + 1):
            where[sigma0[p]] = (lo, hi)
    return float(np.mean([where[d][0] <= i <= where[d][1] for i, d in enumerate(senders)]))


def attack_scenario(data: AttackData, scenario: str, *, eps: float = 1.0, alpha: float = 30.0, group_size: int = 9,
                    jitter_s: float = 0.5, period_s: float = 8.0, seed: int | None = None, rng_key: int = 0,
                    trees: int = 100, delta_max_factor: float = 10.0) -> AttackResult:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.metrics import precision_recall_fscore_support

    rng = np.random.default_rng(None if seed is None else seed * 100 + rng_key)
    feats, labels, is_train, kept, mechanisms = [], [], [], [], []
    for j, vals, senders in batches(scenario, data.x, data.ids, data.graph, eps, alpha=alpha, group_size=group_size,
                                    jitter_s=jitter_s, period_s=period_s, rng=rng, seeded=seed is not None,
                                    mechanisms=mechanisms, delta_max_factor=delta_max_factor):
        n = len(vals)
        pos = (np.arange(n) + 0.5) / n
        feats.append(np.column_stack([vals, np.full(n, data.hour[j]), pos]))
        labels += senders
        is_train += [j < data.split] * n
        if j >= data.split:
            kept.append(_group_kept(data.graph, senders))
    X, y, tr = np.vstack(feats), np.array(labels), np.array(is_train)
    clf = RandomForestClassifier(n_estimators=trees, n_jobs=-1, random_state=seed, min_samples_leaf=2)
    clf.fit(X[tr], y[tr])
    pred = clf.predict(X[~tr])
    p, r, _, _ = precision_recall_fscore_support(y[~tr], pred, labels=data.ids, zero_division=0)
    house = np.array([data.house_of[d] for d in pred]) == np.array([data.house_of[d] for d in y[~tr]])
    mallows = float(np.mean([m == "mallows" for m in mechanisms])) if mechanisms else float("nan")
    return AttackResult(scenario, float(p.mean()), float(r.mean()),
                        {d: (float(pi), float(ri)) for d, pi, ri in zip(data.ids, p, r)},
                        int(tr.sum()), int((~tr).sum()), float(house.mean()), float(np.mean(kept)), mallows)


def run_attack(data_dir: Path, houses: list[int], *, eps: float = 1.0, hours: float = 24.0, period_s: float = 8.0,
               every: int = 4, alpha: float = 30.0, group_size: int = 9, jitter_s: float = 0.5, seed: int | None = None,
               scenarios=SCENARIOS, trees: int = 100, delta_max_factor: float = 10.0,
               progress=None) -> list[AttackResult]:
    data = prepare_attack(data_dir, houses, hours=hours, period_s=period_s, every=every)
    results = []
    for s_i, scenario in enumerate(scenarios):
        res = attack_scenario(data, scenario, eps=eps, alpha=alpha, group_size=group_size, jitter_s=jitter_s,
                              period_s=period_s, seed=seed, rng_key=s_i, trees=trees,
                              delta_max_factor=delta_max_factor)
        results.append(res)
        if progress:
            progress(res)
    return results


@dataclass
class SweepRow:
    mechanism: str          # "rase" (BR + RS) or "br_mallows" (BR + d_sigma alone)
    alpha: float
    group_size: int | None  # None for d_sigma (no refinement: groups are the houses)
    result: AttackResult


def sweep_attack(data_dir: Path, houses: list[int], alphas, group_sizes, *, eps: float = 1.0, hours: float = 24.0,
                 period_s: float = 8.0, every: int = 4, seed: int | None = None, trees: int = 100,
                 delta_max_factor: float = 10.0, dsigma: bool = True, progress=None) -> list[SweepRow]:
    """RS over alpha x group size, and d_sigma alone over alpha."""
    data = prepare_attack(data_dir, houses, hours=hours, period_s=period_s, every=every)
    rows = []
    settings = [("br_mallows", a, None) for a in alphas] if dsigma else []
    settings += [("rase", a, g) for a in alphas for g in group_sizes]
    for i, (scenario, a, g) in enumerate(settings):
        res = attack_scenario(data, scenario, eps=eps, alpha=a, group_size=g or 9, period_s=period_s, seed=seed,
                              rng_key=i, trees=trees, delta_max_factor=delta_max_factor)
        rows.append(SweepRow(scenario, a, g, res))
        if progress:
            progress(rows[-1])
    return rows


def plot_attack(results: list[AttackResult], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    names = [LABELS[r.scenario] for r in results]
    xs = np.arange(len(results))
    axes[0].bar(xs - 0.2, [100 * r.precision for r in results], 0.4, label="precision")
    axes[0].bar(xs + 0.2, [100 * r.recall for r in results], 0.4, label="recall")
    axes[0].set_xticks(xs, names, rotation=25, ha="right", fontsize=8)
    axes[0].set_ylabel("% (macro average over devices)")
    axes[0].legend()
    devs = list(results[0].per_device)
    for r in results:
        axes[1].plot(range(len(devs)), [100 * r.per_device[d][1] for d in devs], ".-", label=LABELS[r.scenario])
    axes[1].set_xticks(range(len(devs)), devs, rotation=90, fontsize=6)
    axes[1].set_ylabel("recall per device (%)")
    axes[1].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
