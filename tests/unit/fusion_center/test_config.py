"""The fusion center's config: a central target for binary deployments sets
the broadcast eps per report from the amplification bound."""

import pytest

from rase_common.amplification import numerical_eps
from fusion_center.config import FusionConfig
from rase_common.errors import ConfigError


def test_central_target_sets_the_eps_menu_that_meets_it(tmp_path, monkeypatch):
    cfg = tmp_path / "f.toml"
    cfg.write_text('regions = ["r1"]\n[precision]\nmechanism = "binary"\n[central_target]\neps = 1.0\ndevices = 1000\n')
    c = FusionConfig.load(cfg)
    (eps0,) = c.precision.eps_levels
    assert eps0 == pytest.approx(2.724, abs=1e-3)                 # docs/privacy.md: n = 1,000 needs eps0 2.72
    assert numerical_eps(eps0, 1000, 1e-6) <= 1.0                 # the broadcast level meets the target
    monkeypatch.setenv("RASE_FUSION_CENTRAL_TARGET__DEVICES", "10000")
    assert FusionConfig.load(cfg).precision.eps_levels[0] > eps0  # more devices, more local eps allowed


@pytest.mark.parametrize("text", [
    'regions = ["r1"]\n[central_target]\neps = 1.0\ndevices = 1000\n',                # not a binary deployment
    'regions = ["r1"]\n[precision]\nmechanism = "binary"\n[central_target]\neps = -1\ndevices = 1000\n',
    'regions = ["r1"]\n[precision]\nmechanism = "binary"\n[central_target]\neps = 1\ndevices = 1\n',
    '[precision]\nmechanism = "binary"\n',                                             # no regions
])
def test_bad_central_targets_are_refused(tmp_path, text):
    cfg = tmp_path / "f.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError):
        FusionConfig.load(cfg)
