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
alone: BFS sigma_0, houses as groups, theta = alpha / Delta_K, no refinement
or fallback); full RASE (BR + RS).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_agent.entropy import RandomBits
from edge_agent.randomizer import BudgetRandomizer, Calibration
from fog_shuffler.group_refinement import delta_k
from fog_shuffler.mallows import mallows_order
from fog_shuffler.randomness import window_rng
from fog_shuffler.relationship import RelationshipGraph
from fog_shuffler.robust_shuffler import ShuffleParams, robust_shuffle
from simulators.evaluation import readings_matrix, seeded_bytes
from simulators.pipeline import fleet
from simulators.refit import epoch0_of, load_house

SCENARIOS = ("raw", "br", "laplace_uniform", "br_mallows", "rase")
LABELS = {"raw": "raw reports", "br": "BR only", "laplace_uniform": "Laplace + uniform shuffle",
          "br_mallows": "BR + Mallows", "rase": "RASE (BR + RS)"}


@dataclass
class AttackResult:
    scenario: str
    precision: float
    recall: float
    per_device: dict[str, tuple[float, float]]
    train_reports: int
    test_reports: int


def batches(scenario: str, x: np.ndarray, ids: list[str], graph: RelationshipGraph, eps: float, *,
            alpha: float, group_size: int, jitter_s: float, period_s: float, rng: np.random.Generator,
            seeded: bool):
    """Yield (t, values, senders) per timestamp in the order the analyst sees them."""
    cal = Calibration()
    # Seeded noise only when the evaluation asked for --seed; otherwise os.urandom.
    br = BudgetRandomizer(cal, RandomBits(read=seeded_bytes(rng) if seeded else None))
    phase = rng.uniform(0, period_s, len(ids))
    params = ShuffleParams(alpha=alpha, group_size=group_size)
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
        elif scenario == "br_mallows":
            sigma0, comps = graph.reference_order(devs)
            omega = max(hi - lo for lo, hi in comps)
            d = delta_k(omega)
            pos = mallows_order(len(devs), alpha / d, rng) if d > 0 else rng.permutation(len(devs))
            index = {dv: i for i, dv in enumerate(devs)}
            order = np.array([index[sigma0[p]] for p in pos])
        else:
            key = int(rng.integers(2**62)) if seeded else None
            order = robust_shuffle(devs, graph, params, window_rng(key)).order
        yield j, vals[order], [devs[i] for i in order]


def run_attack(data_dir: Path, houses: list[int], *, eps: float = 1.0, hours: float = 24.0, period_s: float = 8.0,
               every: int = 4, alpha: float = 30.0, group_size: int = 9, jitter_s: float = 0.5, seed: int | None = None,
               scenarios=SCENARIOS, trees: int = 100, progress=None) -> list[AttackResult]:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.metrics import precision_recall_fscore_support

    hs = [load_house(data_dir, h) for h in houses]
    epoch0 = epoch0_of(hs, period_s)
    n_t = int(hours * 3600 // period_s)
    devices = fleet(hs, 1, 0.0)
    ids = [d.id for d in devices]
    x = readings_matrix(devices, epoch0, period_s, 0, n_t)[:, ::every]   # every k-th timestamp
    hour = (np.arange(n_t)[::every] * period_s / 3600.0) % 24
    split = int(0.8 * x.shape[1])
    graph = RelationshipGraph(groups=[h.device_ids() for h in hs])
    results = []
    for s_i, scenario in enumerate(scenarios):
        rng = np.random.default_rng(None if seed is None else seed * 100 + s_i)
        feats, labels, is_train = [], [], []
        for j, vals, senders in batches(scenario, x, ids, graph, eps, alpha=alpha, group_size=group_size,
                                        jitter_s=jitter_s, period_s=period_s, rng=rng, seeded=seed is not None):
            n = len(vals)
            pos = (np.arange(n) + 0.5) / n
            feats.append(np.column_stack([vals, np.full(n, hour[j]), pos]))
            labels += senders
            is_train += [j < split] * n
        X, y, tr = np.vstack(feats), np.array(labels), np.array(is_train)
        clf = RandomForestClassifier(n_estimators=trees, n_jobs=-1, random_state=seed, min_samples_leaf=2)
        clf.fit(X[tr], y[tr])
        pred = clf.predict(X[~tr])
        p, r, _, _ = precision_recall_fscore_support(y[~tr], pred, labels=ids, zero_division=0)
        res = AttackResult(scenario, float(p.mean()), float(r.mean()),
                           {d: (float(pi), float(ri)) for d, pi, ri in zip(ids, p, r)},
                           int(tr.sum()), int((~tr).sum()))
        results.append(res)
        if progress:
            progress(res)
    return results


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
