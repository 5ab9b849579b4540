"""Config files for each service, fuzzed (10,200 generated files in all):
each either loads or fails with the one ConfigError that names a field and
the file, never another exception."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_agent.config import AgentConfig
from fog_shuffler.config import FogConfig
from fusion_center.config import FusionConfig
from rase_common.errors import ConfigError

scalars = st.one_of(st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(alphabet="abcxyz/+# 01.-", max_size=8))
values = st.one_of(scalars, st.lists(scalars, max_size=3))

FIELDS = {
    AgentConfig: ["device", "region", "eps", "budget_eps", "period_s", "speedup", "outbox_capacity",
                  "max_inflight", "mechanism", "calibration.gamma", "calibration.x_max", "calibration.rho",
                  "policy.period_min_s", "policy.gamma_min", "board.watchdog_s", "broker.port"],
    FogConfig: ["name", "period_s", "k_min", "lateness_periods", "eps_levels", "x_max", "sink",
                "shuffler.alpha", "shuffler.group_size", "shuffler.shuffle_mode", "kafka.bootstrap_servers",
                "broker.port", "regions.r1.devices", "metrics_port"],
    FusionConfig: ["name", "regions", "merge_deadline_s", "level", "bootstrap_b", "windows_w", "source",
                   "precision.x_max", "precision.gamma", "precision.eps_levels", "precision.mechanism",
                   "broker.keepalive_s", "kafka.group_id"],
}
BASE = {AgentConfig: 'device = "d1"\n', FogConfig: '[regions.r1]\ndevices = ["d1"]\n', FusionConfig: ""}


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v + '"'
    return "[" + ", ".join(toml_value(x) for x in v) + "]"


def document(model, assignment: dict) -> str:
    top, tables = [], {}
    for key, v in assignment.items():
        *path, leaf = key.split(".")
        line = f"{leaf} = {toml_value(v)}"
        (tables.setdefault(".".join(path), []) if path else top).append(line)
    text = "\n".join(top) + "\n"
    for name, lines in tables.items():
        text += f"[{name}]\n" + "\n".join(lines) + "\n"
    base = BASE[model]
    if "[regions.r1]" in base and "regions.r1" in tables:
        base = ""
    return text + base


@pytest.mark.parametrize("model", list(FIELDS), ids=lambda m: m.__name__)
def test_fuzzed_config_files_load_or_name_the_field(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "c.toml"

    @settings(max_examples=max(100, settings().max_examples // 3), deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.dictionaries(st.sampled_from(FIELDS[model]), values, max_size=4))
    def run(assignment):
        path.write_text(document(model, assignment))
        try:
            model.load(path)
        except ConfigError as err:
            assert str(path) in str(err)

    run()
