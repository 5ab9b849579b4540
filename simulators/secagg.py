"""A secure-aggregation replay's deployment (`rase replay --mechanism prio3`):
fresh keys, the control message's prio3 params, and what the fog, the
fusion center and every simulated device add to their configs; and the
faster CPython client the simulated fleet makes its reports with (the same
bytes as the device core's: rase_common.vdaf.fast_client)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from rase_device.randomizer import Calibration
from rase_common.protocol.prio3 import Prio3Params
from rase_common.secagg import write_keys


@dataclass
class Prio3Setup:
    params: Prio3Params
    keys: dict
    k_min: int
    noise: bool

    @classmethod
    def of(cls, spec, work: Path) -> "Prio3Setup":  # noqa: ANN001 - a simulators.pipeline.PipelineSpec
        shutil.rmtree(work / "keys", ignore_errors=True)
        keys = write_keys(work / "keys")
        grid = Calibration(x_min=spec.x_min, x_max=spec.x_max, gamma=spec.gamma).grid_max
        params = Prio3Params.for_deployment(spec.prio3_kind, key_id=keys["key_id"], dp_eps=spec.eps,
                                            grid_steps=grid, bands=list(spec.bands), product=spec.product,
                                            interval_s=getattr(spec, "interval_s", None)
                                            if spec.product == "interval" else None)
        return cls(params, keys, spec.k_min, spec.central_noise)

    def summary(self) -> dict:
        return {"kind": self.params.kind, "product": self.params.product, "dp_eps": self.params.dp_eps,
                "sensitivity": self.params.sensitivity, "central_noise": self.noise}

    def fog_settings(self) -> dict:
        return {"prio3": {"verify_key_file": self.keys["verify_key_file"], "params": self.params.model_dump(),
                          "unsafe_no_noise_for_tests": not self.noise}}

    def fusion_settings(self) -> dict:
        return {"prio3": {"private_key_file": self.keys["private_key_file"], "key_id": self.keys["key_id"],
                          "verify_key_file": self.keys["verify_key_file"], "k_min": self.k_min,
                          "unsafe_no_noise_for_tests": not self.noise,
                          # the fog and the fleet have the other core: no worker processes
                          "decrypt_workers": 1}}

    def agent_settings(self) -> dict:
        return {"mechanism": "prio3", "policy": {"prio3_key_id": self.keys["key_id"],
                                                 "prio3_public_key": self.keys["public_key"]}}



def accelerate(core) -> None:  # noqa: ANN001 - an rase_device.core.AgentCore
    """Let a simulated device's Prio3 client make its reports with the CPython
    fast client (same bytes for the same randomness, about 10x faster)."""
    from rase_common.vdaf.fast_client import fast_make_report

    if getattr(core.randomizer, "mechanism", None) == "prio3":
        core.randomizer.make_report = fast_make_report
