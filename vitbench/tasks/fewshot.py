"""Task `fewshot`: linear few-shot accuracy of a frozen upstream (records of kind 'fewshot')."""

from __future__ import annotations

from pydantic import BaseModel, PositiveFloat

from vitbench.backends.base import Capability
from vitbench.record import Record
from vitbench.tasks import Task, register_task
from vitbench.tasks.fields import params_model
from vitbench.tasks.upstream import (ACCURACY, SHARED, Downstream, FromCheckpoint, Upstream, downstream_names,
                                    with_compute_aliases)
from vitbench.transfer.config import default_of, validated
from vitbench.protocols.fewshot import FewshotConfig


class Shots(BaseModel):
    shots: int = 10  # one k per trial (an axis; paper: 1, 5, 10, 25, `vitbench fewshot`'s default: all four)
    fewshot_seeds: int = default_of(FewshotConfig, "seeds")
    l2_reg: PositiveFloat | None = None  # None: chosen on the val split


@register_task
class Fewshot(Task):
    name = "fewshot"
    kind = "fewshot"
    Params = params_model("FewshotParams", (*SHARED, "resolution"), Upstream, FromCheckpoint, Downstream,
                          Shots)
    description = "linear few-shot accuracy of the frozen upstream (closed-form least squares)"
    needs = frozenset({Capability.TRANSFER})
    metrics = (ACCURACY,)
    headline = "accuracy"

    def run(self, p) -> Record:
        from vitbench.protocols.fewshot import fewshot

        cfg = validated(FewshotConfig, {
            **p.upstream_source(self.name), "backend": p.backend, "data": p.downstream_data(),
            "resolution": p.resolution, "shots": [p.shots], "seeds": p.fewshot_seeds,
            "l2_reg": "auto" if p.l2_reg is None else p.l2_reg}, f"task {self.name!r}",
            {**downstream_names(), "seeds": "fewshot_seeds"})
        rec = with_compute_aliases(fewshot(cfg, device=p.device, threads=p.threads))
        rec.metrics.pop("shots", None)  # the trial's `shots` parameter already says it
        return rec
