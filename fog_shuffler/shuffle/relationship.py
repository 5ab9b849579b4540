"""The public relationship graph over device ids, and the reference
permutation sigma_0 (SPEC 2.2 step 1; d_sigma paper, Alg. 1 of appendix 5.6).

The graph is given as groups (each one a clique, e.g. the appliances of one
house) and/or explicit edges. sigma_0 is the breadth-first order of the graph
restricted to the devices that reported: start at the highest-degree
reporter (ties by device id), visit neighbours in id order, then start the next
component the same way. Each component therefore occupies a contiguous range
of positions, which the group refinement relies on.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable, Sequence


class RelationshipGraph:
    def __init__(self, groups: Iterable[Iterable[str]] = (), edges: Iterable[Sequence[str]] = ()):
        self.groups: list[tuple[str, ...]] = []
        self.groups_of: dict[str, list[int]] = {}
        self.adj: dict[str, set[str]] = {}
        for members in groups:
            g = tuple(sorted(set(members)))
            if not g:
                continue
            gi = len(self.groups)
            self.groups.append(g)
            for d in g:
                self.groups_of.setdefault(d, []).append(gi)
        for e in edges:
            if len(e) != 2 or e[0] == e[1]:
                raise ValueError(f"an edge joins two different devices, got {list(e)!r}")
            a, b = e
            self.adj.setdefault(a, set()).add(b)
            self.adj.setdefault(b, set()).add(a)

    @property
    def devices(self) -> set[str]:
        return set(self.groups_of) | set(self.adj)

    def _neighbours(self, v: str, present: set[str], in_group: list[list[str]]) -> set[str]:
        out = {u for u in self.adj.get(v, ()) if u in present}
        for gi in self.groups_of.get(v, ()):
            out.update(in_group[gi])
        out.discard(v)
        return out

    def _order_disjoint_cliques(self, present: set[str], in_group: list[list[str]]
                                ) -> tuple[list[str], list[tuple[int, int]]]:
        """Same result as the general BFS when the graph is disjoint cliques
        (the REFIT case): every member of a clique has the same degree, so a
        component starts at its smallest id and lists its members in id order;
        components come in order of (-degree, first id)."""
        comps = [(-(len(m) - 1), m[0], m) for m in in_group if m]
        comps += [(0, d, [d]) for d in present if d not in self.groups_of]
        comps.sort(key=lambda c: (c[0], c[1]))
        order: list[str] = []
        components: list[tuple[int, int]] = []
        for _, _, members in comps:
            components.append((len(order), len(order) + len(members) - 1))
            order.extend(members)
        return order, components

    def reference_order(self, reporters: Iterable[str]) -> tuple[list[str], list[tuple[int, int]]]:
        """sigma_0 over the reporters and the position ranges [start, end] of
        its connected components (in order)."""
        present = set(reporters)
        in_group = [[d for d in g if d in present] for g in self.groups]
        if not self.adj and all(len(gs) == 1 for gs in self.groups_of.values()):
            return self._order_disjoint_cliques(present, in_group)

        deg: dict[str, int] = {}
        for v in present:
            gs = self.groups_of.get(v, ())
            if len(gs) == 1 and v not in self.adj:
                deg[v] = len(in_group[gs[0]]) - 1   # fast path: one clique, no edges
            else:
                deg[v] = len(self._neighbours(v, present, in_group))
        starts = sorted(present, key=lambda v: (-deg[v], v))
        visited: set[str] = set()
        expanded = [False] * len(self.groups)
        order: list[str] = []
        components: list[tuple[int, int]] = []
        adj, groups_of = self.adj, self.groups_of
        for s in starts:
            if s in visited:
                continue
            first = len(order)
            visited.add(s)
            queue = deque([s])
            while queue:
                v = queue.popleft()
                order.append(v)
                gs = groups_of.get(v, ())
                sources = [in_group[gi] for gi in gs if not expanded[gi]]
                for gi in gs:
                    expanded[gi] = True
                if v in adj:
                    sources.append(sorted(u for u in adj[v] if u in present))
                if not sources:
                    continue
                if len(sources) == 1:
                    cand = [u for u in sources[0] if u not in visited]   # already in id order
                else:
                    cand = sorted({u for src in sources for u in src if u not in visited})
                visited.update(cand)
                queue.extend(cand)
            components.append((first, len(order) - 1))
        return order, components
