"""What leaves the fog: a closed window turned into its WindowMessage.

Each eps level (of each report kind) is shuffled on its own (RS, or the
configured shuffle mode) and carries only public metadata: its level, its
kind, the shuffle's parameters, the group layout of its reference order as
position ranges, and the privacy guarantee the shuffle adds. No device id, no
arrival time, nothing per device or per position (SPEC 2.2 step 6). Pure: the
randomness comes from `rng_factory`, one fresh OS-seeded generator per batch
outside tests.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fog_shuffler.shuffle.relationship import RelationshipGraph
from fog_shuffler.shuffle.robust_shuffler import ShuffleParams, shuffle_window, smallest_batch
from fog_shuffler.windows import ClosedWindow
from rase_common.amplification import conservative_n, window_guarantee
from rase_common.protocol.window import LevelBatch, WindowCounts, WindowMessage


def release_window(cw: ClosedWindow, graph: RelationshipGraph, params: ShuffleParams, counts: WindowCounts,
                   *, privacy_delta: float, rng_factory: Callable[[], np.random.Generator]) -> WindowMessage:
    batches = []
    mechs = cw.mechanisms or ["br"] * len(cw.eps)
    for level, kind in sorted(set(zip(cw.eps, mechs))):
        idx = [i for i, (e, m) in enumerate(zip(cw.eps, mechs)) if e == level and m == kind]
        res = shuffle_window([cw.devices[i] for i in idx], graph, params, rng_factory())
        # BUDS: a report hides among its batch only, so the smallest batch is the n.
        hidden_among = smallest_batch(res) if res.mechanism == "buds" else len(idx)
        guarantee = window_guarantee(res.mechanism, eps0=level, n=conservative_n(hidden_among),
                                     delta=privacy_delta, alpha=params.alpha, theta=res.theta)
        batches.append(LevelBatch(eps=level, kind=kind, values=[cw.values[idx[j]] for j in res.order],
                                  mechanism=res.mechanism, theta=res.theta, delta_k=res.delta_k,
                                  omega=res.omega, k=res.k, groups=res.groups, guarantee=guarantee))
    return WindowMessage(region=cw.region, t=cw.t, n=len(cw.values), alpha=params.alpha, batches=batches,
                         counts=counts, revision=cw.revision)
