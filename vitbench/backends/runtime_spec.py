"""What the specs of the inference-runtime backends share (vitbench.backends.runtime): their capabilities and
their parse-time check. Imports no framework, like every backend's `__init__`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vitbench.backends.kinds import Capability
from vitbench.backends.spec import Check, backends_that

# Timed forward steps, their memory, the largest batch, FLOP counts (the analytic count; the runtime's own where
# it has one). No training, no transfer, no attention maps, no matmul workload (the device's peak for MFU comes
# from the backends that measure one on the same CPU: vitbench.measure.peak).
INFERENCE_ONLY = frozenset({Capability.INFER, Capability.MEMORY, Capability.MAX_BATCH, Capability.FLOPS})


def cpu_only_check(name: str) -> Check:
    """The parse-time check of a runtime on the host CPU: device `cpu`; a training step (max_batch's `mode:
    train`) refused, naming the backends that train."""

    def check(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
        out = []
        if str(fields.get("device") or "cpu") != "cpu":
            out.append(("device", f"backend {name!r} runs on cpu only"))
        if fields.get("mode") == "train":
            out.append(("mode", f"backend {name!r} runs inference only; backends that train: "
                                f"{', '.join(backends_that(Capability.TRAIN))}"))
        return out

    return check
