"""The attack's group-level utility: share of reports kept in their house's
sigma_0 range."""

from fog_shuffler.shuffle.relationship import RelationshipGraph
from simulators.attack import _group_kept


def test_group_kept_counts_reports_inside_their_house_range():
    g = RelationshipGraph(groups=[["a1", "a2", "a3"], ["b1", "b2"]])
    assert _group_kept(g, ["a1", "a2", "a3", "b1", "b2"]) == 1.0
    # b1 and a3 swapped across the boundary: 3 of 5 stay inside.
    assert _group_kept(g, ["a1", "a2", "b1", "a3", "b2"]) == 0.6
