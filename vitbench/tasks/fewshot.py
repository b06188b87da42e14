"""Task `fewshot`: linear few-shot accuracy of a frozen upstream (records of kind 'fewshot')."""

from __future__ import annotations

from pydantic import BaseModel, Field, PositiveFloat, field_validator

from vitbench.backends.base import Capability
from vitbench.record import Record
from vitbench.tasks import Task, register_task
from vitbench.tasks.fields import params_model
from vitbench.tasks.upstream import (ACCURACY, SHARED, SPLIT_METRICS, Downstream, FromCheckpoint, Upstream,
                                    downstream_names, with_compute_aliases)
from vitbench.transfer.config import field_like, joined, validated
from vitbench.protocols.fewshot import FewshotConfig


class Shots(BaseModel):
    # one k per trial (an axis; paper: 1, 5, 10, 25), or several in one row, comma-separated text ('1,5,10,25',
    # the paper's four), normalised: '10' is 10, ' 1, 5' is '1,5'
    # a field's description is the help of the command-line option that sets it (vitbench.cli.path_options)
    shots: int | str = Field(10, description="Shots per class, comma-separated.")
    fewshot_seeds: int = field_like(FewshotConfig, "seeds", description="k-shot draws per k.")
    l2_reg: PositiveFloat | None = Field(None, description="Fixed ridge regulariser (default: chosen on the val "
                                         "split).")

    @field_validator("shots", mode="before")
    @classmethod
    def _shots(cls, v):
        if not isinstance(v, str):
            return v
        try:
            ks = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            ks = []
        if not ks:
            raise ValueError(f"{v!r}: expected an integer or comma-separated integers, e.g. '1,5,10,25'")
        twice = sorted({k for k in ks if ks.count(k) > 1})
        if twice:  # a typo, not two measurements: one row holds one value per k
            raise ValueError(f"{v!r}: {joined(twice)} given twice; each k once, e.g. '1,5,10,25'")
        return ks[0] if len(ks) == 1 else joined(ks)

    def shot_list(self) -> list[int]:
        return [self.shots] if isinstance(self.shots, int) else [int(k) for k in self.shots.split(",")]


@register_task
class Fewshot(Task):
    name = "fewshot"
    kind = "fewshot"
    Params = params_model("FewshotParams", (*SHARED, "resolution"), Upstream, FromCheckpoint, Downstream,
                          Shots)
    description = "linear few-shot accuracy of the frozen upstream (closed-form least squares)"
    needs = frozenset({Capability.TRANSFER})
    metrics = (ACCURACY, *SPLIT_METRICS)
    headline = "accuracy"

    def run(self, p) -> Record:
        from vitbench.protocols.fewshot import fewshot

        cfg = validated(FewshotConfig, {
            **p.upstream_source(self.name), "backend": p.backend, "data": p.downstream_data(),
            "resolution": p.resolution, "shots": p.shot_list(), "seeds": p.fewshot_seeds,
            "l2_reg": "auto" if p.l2_reg is None else p.l2_reg}, f"task {self.name!r}",
            p.named_paths({**downstream_names(), "seeds": "fewshot_seeds", "shots": "shots", "l2_reg": "l2_reg"}))
        rec = with_compute_aliases(fewshot(cfg, device=p.device, threads=p.threads))
        if isinstance(p.shots, int):
            rec.metrics.pop("shots", None)  # the trial's `shots` parameter already says it
        return rec
