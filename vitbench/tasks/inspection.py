"""Task `inspect`: what an upstream ViT, hybrid or axial model learned (paper Sec. 4.5, Fig. 6, 7, 11), as study
rows.

It inspects the same upstream the transfer tasks use (the shared `pretrain_*` parameters: the cached checkpoint,
pre-trained first if needed), so a study's inspect rows line up with its fewshot/finetune rows: attention
distance of ViTs pre-trained longer and shorter, of a ViT and the hybrid. The record keeps the headline numbers
as metrics and everything the pictures need as raw data (vitbench.insight.InspectResult.to_json); the report
draws the attention-distance comparison from it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from vitbench.backends.base import Capability
from vitbench.record import Record
from vitbench.tasks import Metric, Task, register_task
from vitbench.tasks.fields import MAX_COUNT, params_model
from vitbench.tasks.upstream import SHARED, FromCheckpoint, Upstream

KIND = "inspect"


class Inspection(BaseModel):
    inspect_images: int = Field(32, ge=1, le=MAX_COUNT, description="digits test images averaged over")
    inspect_rollout: int = Field(4, ge=0, le=MAX_COUNT, description="images with attention-rollout maps")

    @model_validator(mode="after")
    def _has_attention(self):
        from vitbench.insight.applies import not_inspectable

        spec = getattr(self, "spec", None)  # the trial's model, resolved by TaskParams before this runs
        why = None if spec is None else not_inspectable(spec)
        if why is not None:
            raise ValueError(why)
        return self


@register_task
class Inspect(Task):
    name = "inspect"
    kind = KIND
    Params = params_model("InspectParams", (*SHARED, "resolution"), Upstream, FromCheckpoint, Inspection)
    description = "attention distance per layer and head, position-embedding similarity, filters, rollout"
    needs = frozenset({Capability.ATTENTION, Capability.TRANSFER})
    metrics = (Metric("attention_distance_first_layer_px", "px", False, "mean attention distance, first layer"),
               Metric("attention_distance_last_layer_px", "px", False, "mean attention distance, last layer"))
    headline = "attention_distance_first_layer_px"
    repeat = False

    def run(self, p) -> Record:
        from vitbench.backends.base import get_backend
        from vitbench.env import environment
        from vitbench.insight.run import inspect_model
        from vitbench.insight.source import inspection_images
        from vitbench.record import now
        from vitbench.protocols.pretrain import upstream_config, upstream_metrics

        started = now()
        from vitbench.protocols.pretrain import resolve_upstream

        src = p.upstream_source(self.name)
        ckpt, _ = resolve_upstream(src.get("upstream"), src.get("checkpoint"), device=p.device, threads=p.threads,
                                   budget=(src.get("checkpoint_images"), src.get("checkpoint_epochs")),
                                   model=src.get("checkpoint_model"))
        be = get_backend(p.backend)
        info = be.setup(p.device, p.threads)
        spec = ckpt.spec
        result = inspect_model(ckpt.weights, spec, p.resolution, inspection_images(p.inspect_images, p.resolution),
                               be.attention_maps, num_rollout=p.inspect_rollout)
        metrics = {**result.headline(), **upstream_metrics(ckpt)}
        metrics["pretrain_exaflops"] = metrics.get("exaflops")
        return Record.measured(self.kind, {**p.config(), **upstream_config(ckpt)}, metrics=metrics,
                               raw=result.to_json(), env=environment(info), started_at=started)
