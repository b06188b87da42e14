"""Task `flops`: params and FLOPs per image, analytic and counted (records of kind 'flops'); report section."""

from __future__ import annotations

from pydantic import BaseModel, Field

from vitbench.backends.base import Capability
from vitbench.record import Record
from vitbench.tasks import COMPILE_CACHED, Metric, Task, register_task
from vitbench.tasks.fields import params_model

KIND = "flops"


class Counting(BaseModel):
    count: bool = Field(True, description="also run the framework's own counters (builds the model)")


@register_task
class Flops(Task):
    name = "flops"
    kind = KIND
    Params = params_model("FlopsParams", ("model", "backend", "task", "resolution", "num_classes"), Counting)
    description = "params, analytic and counted GMACs/GFLOPs per image"
    needs = frozenset({Capability.FLOPS})
    metrics = (Metric("gflops", "GFLOPs", False, "analytic forward FLOPs per image (1 MAC = 2 FLOPs)"),
               COMPILE_CACHED,
               Metric("counted_cached", "bool", True, "the counters' counts came from vitbench's value cache "
                      "(vitbench.value_cache: same code, versions, compiler settings, host and model) instead of "
                      "being counted in this trial; absent: nothing counted (count: false)"),
               Metric("counted_at", "ISO 8601 UTC", False, "when the counters' counts were counted (earlier than "
                      "the row when they came from the value cache)"))
    headline = "gflops"
    repeat = False

    def run(self, p) -> Record:
        from vitbench.measure.flops import flops

        return flops(p.spec, resolution=p.resolution, backend=p.backend, num_classes=p.num_classes, count=p.count)
