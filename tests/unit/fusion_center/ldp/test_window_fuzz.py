"""10,000 generated windows at the fusion center's boundary: each is either
refused by the window schema (a ValidationError, counted and quarantined by
the service) or aggregated without any other exception."""

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rase_common.protocol.window import WindowMessage
from fusion_center.ldp.merge import aggregate
from rase_common.protocol.control import ControlMessage

GOOD = json.loads(WindowMessage.uniform("r1", 5, [1.0 * i for i in range(12)]).model_dump_json())
hostile = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.text(max_size=6),
                    st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=5e-324, max_value=1e-300),
                    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=30),
                    st.lists(st.tuples(st.integers(-3, 40), st.integers(-3, 40)), max_size=4))
TOP = ["v", "region", "t", "n", "alpha", "batches", "counts", "extra"]
BATCH = ["eps", "values", "mechanism", "theta", "delta_k", "omega", "k", "groups"]


def mutate(top: dict, batch: dict) -> bytes:
    w = json.loads(json.dumps(GOOD))
    w.update(top)
    if isinstance(w.get("batches"), list) and w["batches"] and isinstance(w["batches"][0], dict):
        w["batches"][0].update(batch)
    return json.dumps(w).encode()


@settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(top=st.dictionaries(st.sampled_from(TOP), hostile, max_size=3),
       batch=st.dictionaries(st.sampled_from(BATCH), hostile, max_size=3))
def test_a_window_is_refused_by_the_schema_or_aggregated(top, batch):
    try:
        w = WindowMessage.model_validate_json(mutate(top, batch))
    except ValidationError:
        return
    agg, est = aggregate(w.t, [w], ControlMessage(), {"r1"}, bootstrap_b=20)
    assert agg.n == w.n and all(math.isfinite(e.value) for e in est.values())
