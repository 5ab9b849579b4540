"""One home per mechanism: the server half of every device mechanism.

    from rase_common.mechanisms import mechanism, Setting
    m = mechanism("duchi")
    m.support(Setting(), 1.0).reason(y)        # the fog's check: None or a reason
    m.estimate({1.0: reports}, Setting())      # the fusion center's estimates with intervals

See registry.py for the table and base.py for what each mechanism provides.
"""

from rase_common.mechanisms.base import Estimate, Estimates, Mechanism, Setting, Support
from rase_common.mechanisms.registry import (DEFAULT_MECHANISM, MEAN_MECHANISMS, MECHANISMS, REGISTRY, mechanism,
                                             role_paths)

__all__ = ["DEFAULT_MECHANISM", "Estimate", "Estimates", "MEAN_MECHANISMS", "MECHANISMS", "Mechanism", "REGISTRY",
           "Setting", "Support", "mechanism", "role_paths"]
