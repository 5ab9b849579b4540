"""rase acl: one ACL for every fog's regions; per-fog users bound to their
own regions' topics; configs that share a region, a device or a name refused."""

import subprocess
import sys
from pathlib import Path

import pytest

from rase.acl import FogUsers, build_acl

ROOT = Path(__file__).resolve().parents[3]


def blocks(acl: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    user = None
    for line in acl.splitlines():
        if line.startswith("user "):
            user = line.split()[1]
            out[user] = []
        elif line.startswith("topic ") and user is not None:
            out[user].append(line)
    return out


def test_each_fog_and_device_gets_exactly_its_own_topics():
    acl = blocks(build_acl([FogUsers("a", {"r1": ["d1", "d2"]}), FogUsers("b", {"r2": ["d3"], "r3": ["d4"]})],
                           fusion="fusion-x", subscribers=["dash", "ha"]))
    # As Prio3's leader a fog writes its own regions' statements (no one else may) and reads the aggregates.
    assert acl["fog-a"] == ["topic read rase/v1/reports/r1/+", "topic read rase/v1/control/precision",
                            "topic write rase/v1/windows/r1", "topic read rase/v1/prio3/verify/r1",
                            "topic write rase/v1/prio3/statements/r1", "topic read rase/v1/aggregates/t/+",
                            "topic read rase/v1/aggregates/latest",
                            "topic write rase/v1/feedback/r1/+", "topic read rase/v1/windows-kept/r1"]
    assert acl["fog-b"] == ["topic read rase/v1/reports/r2/+", "topic read rase/v1/reports/r3/+",
                            "topic read rase/v1/control/precision", "topic write rase/v1/windows/r2",
                            "topic write rase/v1/windows/r3", "topic read rase/v1/prio3/verify/r2",
                            "topic read rase/v1/prio3/verify/r3", "topic write rase/v1/prio3/statements/r2",
                            "topic write rase/v1/prio3/statements/r3", "topic read rase/v1/aggregates/t/+",
                            "topic read rase/v1/aggregates/latest",
                            "topic write rase/v1/feedback/r2/+", "topic write rase/v1/feedback/r3/+",
                            "topic read rase/v1/windows-kept/r2", "topic read rase/v1/windows-kept/r3"]
    assert acl["fusion-x"][:3] == ["topic read rase/v1/windows/r1", "topic read rase/v1/windows/r2",
                                   "topic read rase/v1/windows/r3"]
    # Secure aggregation: the helper answers each region's leader on that region's verify topic only.
    assert acl["fusion-x"][-8:-5] == [f"topic write rase/v1/prio3/verify/{r}" for r in ("r1", "r2", "r3")]
    # It tells each region's fog which of its windows it stored (fog_shuffler.window_receipts).
    assert acl["fusion-x"][-5:-2] == [f"topic write rase/v1/windows-kept/{r}" for r in ("r1", "r2", "r3")]
    assert acl["fusion-x"][-2:] == ["topic readwrite rase/v1/fusion/x/status",
                                    "topic readwrite homeassistant/device/rase_x/config"]
    # A device reads only its own feedback topic, in its own region.
    assert acl["d4"] == ["topic write rase/v1/reports/r3/d4", "topic write rase/v1/status/d4",
                         "topic read rase/v1/control/precision", "topic read rase/v1/feedback/r3/d4"]
    # Subscribers read what interprets an aggregate: the control message, whether the fusion center is
    # up, and the Home Assistant discovery config.
    # and the fogs' own Prio3 statements, to check each aggregate against the leader's account.
    assert acl["dash"] == acl["ha"] == ["topic read rase/v1/aggregates/#", "topic read rase/v1/control/precision",
                                        "topic read rase/v1/fusion/x/status",
                                        "topic read homeassistant/device/rase_x/config",
                                        "topic read rase/v1/prio3/statements/+"]
    # Only the fogs write statements: not the fusion center.
    assert not any("statements" in t for t in acl["fusion-x"])
    assert acl["health"] == acl["broker-metrics"] == ["topic read $SYS/#"]
    # Nobody but the fusion center reads windows; no wildcard write anywhere.
    assert all("#" not in t for ts in acl.values() for t in ts if t.startswith("topic write"))


@pytest.mark.parametrize("fogs, words", [
    ([FogUsers("a", {"r1": ["d1"]}), FogUsers("a", {"r2": ["d2"]})], "name 'a'"),
    ([FogUsers("a", {"r1": ["d1"]}), FogUsers("b", {"r1": ["d2"]})], "region r1"),
    ([FogUsers("a", {"r1": ["d1"]}), FogUsers("b", {"r2": ["d1"]})], "device d1"),
])
def test_configs_that_overlap_are_refused_naming_the_clash(fogs, words):
    with pytest.raises(ValueError, match=words):
        build_acl(fogs)


def test_the_cli_takes_every_fog_config_and_names_a_clash(tmp_path):
    run = [sys.executable, "-m", "rase.cli", "acl", "--fusion-config", "configs/compose/fusion.toml"]
    two = subprocess.run(run + ["--fog-config", "configs/compose/fog-r1.toml", "--fog-config",
                                "configs/compose/fog-r2.toml"], capture_output=True, text=True, cwd=ROOT)
    assert two.returncode == 0, two.stderr
    users = blocks(two.stdout)
    assert {"fog-r1", "fog-r2", "fusion-main", "h1a1", "h12a9"} <= set(users)
    twice = subprocess.run(run + ["--fog-config", "configs/compose/fog-r1.toml"] * 2, capture_output=True, text=True,
                           cwd=ROOT)
    assert twice.returncode == 2 and "rase: fog configs" in twice.stderr and "fog-r1" in twice.stderr
    assert "Traceback" not in twice.stderr


def test_leader_workers_of_one_region_each_get_their_own_devices_and_part(tmp_path):
    """Issue 30: a region partitioned over two leader workers: each reads only
    its own devices' reports, writes only their feedback and its part's
    statements, reads its part's answers; the fusion center answers every part."""
    acl = blocks(build_acl([FogUsers("a", {"r1": ["d1", "d2"]}, part=0, parts=2),
                            FogUsers("b", {"r1": ["d3"]}, part=1, parts=2)], fusion="fusion-c"))
    a, b, fusion = acl["fog-a"], acl["fog-b"], acl["fusion-c"]
    assert {"topic read rase/v1/reports/r1/d1", "topic read rase/v1/reports/r1/d2",
            "topic read rase/v1/prio3/verify/r1/0", "topic write rase/v1/prio3/statements/r1/0",
            "topic write rase/v1/feedback/r1/d1", "topic write rase/v1/windows/r1"} <= set(a)
    assert not any("r1/+" in line or "d3" in line for line in a)
    assert "topic read rase/v1/reports/r1/d3" in b and "topic read rase/v1/prio3/verify/r1/1" in b
    assert {"topic write rase/v1/prio3/verify/r1/0", "topic write rase/v1/prio3/verify/r1/1",
            "topic read rase/v1/windows/r1"} <= set(fusion)
    assert "topic read rase/v1/prio3/statements/+/+" in acl["dashboard"]
    with pytest.raises(ValueError, match="r1/1"):
        build_acl([FogUsers("a", {"r1": ["d1"]}, part=1, parts=2), FogUsers("b", {"r1": ["d3"]}, part=1, parts=2)])
    with pytest.raises(ValueError, match="parts"):
        build_acl([FogUsers("a", {"r1": ["d1"]}, part=0, parts=2), FogUsers("b", {"r1": ["d3"]})])
