"""Task `inspect`: what an upstream ViT, hybrid or axial model learned (paper Sec. 4.5, Fig. 6, 7, 11), as study
rows.

It inspects the same upstream the transfer tasks use (the shared `pretrain_*` parameters: the cached checkpoint,
pre-trained first if needed), so a study's inspect rows line up with its fewshot/finetune rows: attention
distance of ViTs pre-trained longer and shorter, of a ViT and the hybrid. The record keeps the headline numbers
as metrics and everything the pictures need as raw data (vitbench.insight.InspectResult.to_json); the report
draws the attention-distance comparison from it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, model_validator

from vitbench.backends.base import Capability
from vitbench.record import Record
from vitbench.tasks import Metric, Task, register_task
from vitbench.tasks.fields import MAX_COUNT, named, params_model
from vitbench.transfer.config import key_neutral
from vitbench.tasks.upstream import SHARED, FromCheckpoint, Upstream

KIND = "inspect"


class Inspection(BaseModel):
    inspect_images: int = Field(32, ge=1, le=MAX_COUNT, description="digits test images averaged over")
    inspect_rollout: int = Field(4, ge=0, le=MAX_COUNT, description="images with attention-rollout maps")
    # which weights: the upstream (pre-trained here and cached, or `checkpoint`), or the variant's random
    # initialisation by `seed` (`vitbench inspect NAME`; nothing trained or written); left out of the key at its
    # default, so trials keyed before it existed keep their keys
    inspect_weights: Literal["upstream", "random"] = key_neutral("upstream")

    @model_validator(mode="after")
    def _has_attention(self, info: ValidationInfo):
        from vitbench.insight.applies import not_inspectable

        spec = getattr(self, "spec", None)  # the trial's model, resolved by TaskParams before this runs
        why = None if spec is None else not_inspectable(spec)
        if why is not None:
            raise ValueError(why)
        default = type(self).model_fields["inspect_rollout"].default
        if self.inspect_rollout > self.inspect_images and self.inspect_rollout != default:  # capped at the images:
            # `--rollout 10 -n 3` made 3 maps in silence; the default (4) beside fewer images is capped as asked
            raise ValueError(f"{named(info, 'inspect_rollout')} {self.inspect_rollout} is more than the "
                             f"{named(info, 'inspect_images')} {self.inspect_images} inspected: at most that many "
                             "rollout maps")
        if self.inspect_weights == "random" and getattr(self, "checkpoint", None) is not None:
            raise ValueError(f"{named(info, 'inspect_weights')} random inspects no checkpoint; "
                             f"{named(info, 'checkpoint')} gives one")
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
        """The one path of every inspection (a study's trial, `vitbench inspect`): the weights (the upstream, a
        checkpoint or a random init: vitbench.insight.subject), the first `inspect_images` digits test images,
        then vitbench.insight.run.inspect_model on the backend's attention maps."""
        from vitbench.backends.base import get_backend
        from vitbench.env import environment
        from vitbench.insight.run import inspect_model
        from vitbench.insight.subject import checkpoint_source, inspection_images, random_source
        from vitbench.protocols.pretrain import resolve_upstream, upstream_config, upstream_metrics
        from vitbench.record import now

        started = now()
        ckpt = None
        if p.inspect_weights == "upstream":  # pre-trained first if not cached (its own backend set-up)
            src = p.upstream_source(self.name)
            ckpt, _ = resolve_upstream(src.get("upstream"), src.get("checkpoint"), device=p.device,
                                       threads=p.threads,
                                       budget=(src.get("checkpoint_images"), src.get("checkpoint_epochs")),
                                       model=src.get("checkpoint_model"),
                                       objective=None)  # any encoder's attention, whatever trained it
        be = get_backend(p.backend)
        info = be.setup(p.device, p.threads)

        def init(spec, r):
            return be.weights(be.init_model(spec, r, spec.num_classes, p.seed))

        source = random_source(p.spec, p.resolution, init) if ckpt is None else \
            checkpoint_source(ckpt, p.resolution, init)
        result = inspect_model(source.weights, source.spec, source.resolution,
                               inspection_images(p.inspect_images, source.resolution), be.attention_maps,
                               num_rollout=p.inspect_rollout)
        metrics, config = result.headline(), p.config()
        if ckpt is not None:
            metrics.update(upstream_metrics(ckpt), pretrain_exaflops=upstream_metrics(ckpt).get("exaflops"))
            config.update(upstream_config(ckpt))
        return Record.measured(self.kind, config, metrics=metrics, raw=result.to_json(), env=environment(info),
                               started_at=started)
