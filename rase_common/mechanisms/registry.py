"""The mechanism registry: name -> the server half of each mechanism.

Adding a mechanism: five places (docs/architecture.md): its device randomizer
module (rase_device) and one row of rase_device.mechanisms.RANDOMIZERS, one
module of this package, one line here, and its module's file in
rase_device/manifest.py. tests/unit/rase_common/test_mechanism_registry.py
checks that this table and the device's agree (names, order, default,
randomizer classes); tests/unit/test_one_place.py that nothing else names it.
Each entry also names its roles in the fog and the fusion center."""

from __future__ import annotations

from rase_device.mechanisms import DEFAULT_MECHANISM
from rase_common.mechanisms.base import Mechanism
from rase_common.mechanisms.binary import BINARY
from rase_common.mechanisms.br import BR_MECHANISM
from rase_common.mechanisms.categorical import CATEGORICAL
from rase_common.mechanisms.duchi import DUCHI
from rase_common.mechanisms.hybrid import HYBRID
from rase_common.mechanisms.piecewise import PIECEWISE
from rase_common.mechanisms.prio3 import PRIO3

REGISTRY: dict[str, Mechanism] = {
    "br": BR_MECHANISM,
    "duchi": DUCHI,
    "piecewise": PIECEWISE,
    "hybrid": HYBRID,
    "binary": BINARY,
    "categorical": CATEGORICAL,
}
MECHANISMS = tuple(REGISTRY)
MEAN_MECHANISMS = tuple(name for name, m in REGISTRY.items() if m.output == "mean")
# Secure aggregation (issue 20): central noise on an exact secret-shared sum. Not a
# device randomizer (the device's side is rase_device.secagg), so not in MECHANISMS.
SECURE: dict[str, Mechanism] = {"prio3": PRIO3}


def role_paths(service: str) -> tuple[str, ...]:
    """The roles ("package.module:Class") that serve the registry's mechanisms
    in a service ("fog" or "fusion"), each once, the specific ones (a secure
    mode's) before the shared local-DP one, which takes whatever they leave."""
    entries = list(SECURE.values()) + list(REGISTRY.values())
    return tuple(dict.fromkeys(getattr(m, f"{service}_role") for m in entries))


def mechanism(name: str) -> Mechanism:
    """The registry entry of a mechanism, or ValueError naming the known ones."""
    try:
        return REGISTRY[name] if name in REGISTRY else SECURE[name]
    except (KeyError, TypeError):
        raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS + tuple(SECURE))}, got {name!r}") from None


__all__ = ["DEFAULT_MECHANISM", "MECHANISMS", "MEAN_MECHANISMS", "REGISTRY", "SECURE", "mechanism", "role_paths"]
