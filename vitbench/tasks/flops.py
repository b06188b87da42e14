"""Task `flops`: params and FLOPs per image, analytic and counted (records of kind 'flops'); report section."""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationInfo, model_validator

from vitbench.backends.base import Capability
from vitbench.record import Record
from vitbench.tasks import COMPILE_CACHED, FLAG, ISO_TIME, Metric, Task, register_task
from vitbench.tasks.fields import named, params_model
from vitbench.transfer.config import key_neutral
from vitbench.transfer.limits import MAX_COUNT, MAX_DATASET_IMAGES

KIND = "flops"


class Counting(BaseModel):
    count: bool = Field(True, description="also run the framework's own counters (builds the model)")
    # pre-training compute (the paper's convention: 3 x forward FLOPs x images x epochs), added to the row as
    # pretrain_exaflops when both are given; left out of the key unset (keys as before they existed)
    exaflops_images: int | None = key_neutral(gt=0, le=MAX_DATASET_IMAGES,
                                              description="pre-training images per epoch (with exaflops_epochs)")
    # at most MAX_COUNT epochs (the bound of every count; the paper pre-trains 7 to 300 epochs): an
    # unbounded 1e305 made the compute infinite, an ok row with pretrain_exaflops null
    exaflops_epochs: float | None = key_neutral(gt=0, le=MAX_COUNT,
                                                description="pre-training epochs (with exaflops_images)")

    @model_validator(mode="after")
    def _both(self, info: ValidationInfo):
        if (self.exaflops_images is None) != (self.exaflops_epochs is None):
            raise ValueError(f"{named(info, 'exaflops_images')} and {named(info, 'exaflops_epochs')} go together "
                             "(pre-training compute needs both)")
        return self


@register_task
class Flops(Task):
    name = "flops"
    kind = KIND
    Params = params_model("FlopsParams", ("model", "backend", "task", "resolution", "num_classes"), Counting)
    description = "params, analytic and counted GMACs/GFLOPs per image"
    needs = frozenset({Capability.FLOPS})
    metrics = (Metric("gflops", "GFLOPs", False, "analytic forward FLOPs per image (1 MAC = 2 FLOPs)",
                      positive=True),
               Metric("gmacs", "GMACs", False, "analytic forward multiply-accumulates per image", positive=True),
               Metric("params_m", "M params", False, "parameters, in millions"),
               Metric("tokens", "tokens", False, "sequence length with the prefix tokens (class, distillation); "
                      "absent: no token sequence (a CNN)"),
               Metric("pretrain_images", "images", True, "pre-training images per epoch (exaflops_images)"),
               Metric("pretrain_epochs", "epochs", True, "pre-training epochs (exaflops_epochs)"),
               Metric("pretrain_exaflops", "exaFLOPs", False, "pre-training compute (3 x forward FLOPs x images x "
                      "epochs; the paper's convention)"),
               COMPILE_CACHED,
               Metric("counted_cached", FLAG, True, "the counters' counts came from vitbench's value cache "
                      "(vitbench.value_cache: same code, versions, compiler settings, host and model) instead of "
                      "being counted in this trial; absent: nothing counted (count: false)"),
               Metric("counted_at", ISO_TIME, False, "when the counters' counts were counted (earlier than "
                      "the row when they came from the value cache)"))
    headline = "gflops"
    repeat = False

    def run(self, p) -> Record:
        from vitbench.measure.flops import flops

        return flops(p.spec, resolution=p.resolution, backend=p.backend, num_classes=p.num_classes,
                     images=p.exaflops_images, epochs=p.exaflops_epochs, count=p.count)
