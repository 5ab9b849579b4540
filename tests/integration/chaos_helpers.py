"""Shared by the fault tests under load (issue 18): a factory fixture for the
pipeline of real processes (simulators.faults.rig) with its logs printed
when a test fails, and the accounting checks every such test ends with."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulators.faults.load import AckedLoad, LoadResult, LoadSpec
from simulators.faults.rig import Account, Pipeline, PipelineSpec


class LostReports(AssertionError):
    """Reports the broker acknowledged that no aggregate counts. Its own
    type, so a test marked xfail for a known loss still fails on anything
    else (a crash, a duplicate)."""


@pytest.fixture
def make_pipeline(own_mosquitto, tmp_path, request):
    """make_pipeline(spec, fog_data=None) -> a started Pipeline; stopped at
    teardown, with the services' logs printed when the test failed."""
    made: list[Pipeline] = []

    def make(spec: PipelineSpec = PipelineSpec(), fog_data: Path | None = None) -> Pipeline:
        rig = Pipeline(tmp_path / f"rig{len(made)}", own_mosquitto.port, spec, fog_data=fog_data)
        made.append(rig)
        return rig.start()

    yield make
    for rig in made:
        rig.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for rig in made:
            for svc in (rig.fog, rig.fusion):
                if svc is not None:
                    print(f"---- {svc.kind} log (end) ----\n{svc.log_text()[-6000:]}")


def run_load(rig: Pipeline, seconds: float) -> tuple[LoadSpec, AckedLoad]:
    spec = rig.load_spec(seconds)
    return spec, AckedLoad(spec).start()


def finish(rig: Pipeline, spec: LoadSpec, load: AckedLoad, timeout_s: float = 90.0) -> tuple[LoadResult, Account]:
    """Every scheduled report acknowledged by the broker, every timestamp
    aggregated (or given up on), and the account."""
    result = load.result(timeout_s)
    assert result.finished, f"the broker did not acknowledge every report: {result}"
    rig.wait_aggregated(spec, timeout_s)
    return result, rig.account(result, spec)


def assert_services_up(rig: Pipeline) -> None:
    exits = rig.unexpected_exits()
    assert not exits, f"a service exited: {exits}"
    assert rig.fog.alive() and rig.fusion.alive()


def assert_once_and_complete(rig: Pipeline, account: Account) -> None:
    """No report in an aggregate twice, no window shuffled twice, no
    aggregate published with two contents; then (LostReports) nothing
    acknowledged missing."""
    assert account.twice == 0 and account.windows_reshuffled == 0 and account.aggregates_differing == 0, \
        account.line()
    if account.lost or account.missing_t:
        raise LostReports(f"{account.line()}; per t (acked, aggregated): {account.short_t}; "
                          f"fog rejections: {dict(+rig.fog_rejections())}")
