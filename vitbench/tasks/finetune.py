"""Task `finetune`: fine-tuning accuracy with the paper's recipe (records of kind 'finetune')."""

from __future__ import annotations

from pydantic import BaseModel, Field

from vitbench.backends.base import Capability
from vitbench.record import Record
from vitbench.tasks import Task, register_task
from vitbench.tasks.fields import params_model
from vitbench.tasks.upstream import (ACCURACY, SHARED, SPLIT_METRICS, Downstream, FromCheckpoint, Upstream,
                                    downstream_names, with_compute_aliases)
from vitbench.transfer.config import (Seed, default_of, field_like, joined, key_neutral, parse_floats,
                                      validated)
from vitbench.protocols.finetune import FinetuneConfig


class Recipe(BaseModel):
    """FinetuneConfig's recipe under the trial's names, its defaults read from there."""

    # a field's description is the help of the command-line option that sets it (vitbench.cli.path_options)
    finetune_steps: int = field_like(FinetuneConfig, "steps", description="Fine-tuning steps.")
    # comma-separated; paper App. B.1.1
    lr_grid: str = Field(joined(default_of(FinetuneConfig, "lr_grid")),
                         description="Comma-separated SGD learning rates (paper grid).")
    finetune_warmup_steps: int = field_like(FinetuneConfig, "warmup_steps",
                                            description="Fine-tuning warm-up steps.")
    refit: bool = Field(default_of(FinetuneConfig, "refit"), description="Final run on train+val with the chosen "
                        "LR (paper), or reuse the LR run.")
    # runs per LR and final runs: LR by mean val accuracy, accuracy +- std
    finetune_seeds: int = field_like(FinetuneConfig, "seeds", description="Runs per learning rate and final runs: "
                                     "accuracy is their mean, with the standard deviation.")
    # The trial's `seed` is the upstream's (as in pretrain and fewshot); the fine-tuning's own first seed was the
    # same number before this field (issue 52 item 5), so it defaults to it and its trials keep their keys.
    finetune_seed: Seed | None = key_neutral(None, description="First fine-tuning seed (batch order; runs use it, "
                                             "+1, ...). Default: the upstream's seed.")

    def first_finetune_seed(self) -> int:
        """The fine-tuning's first seed: its own, else the trial's `seed` (the upstream's)."""
        return self.seed if self.finetune_seed is None else self.finetune_seed  # type: ignore[attr-defined]


@register_task
class Finetune(Task):
    name = "finetune"
    kind = "finetune"
    Params = params_model("FinetuneParams", (*SHARED, "resolution", "batch_size"), Upstream, FromCheckpoint,
                          Downstream, Recipe)
    description = "fine-tuning accuracy (SGD momentum, cosine, clip 1, zero head, LR grid on val)"
    needs = frozenset({Capability.TRANSFER})
    metrics = (ACCURACY, *SPLIT_METRICS)
    headline = "accuracy"

    def run(self, p) -> Record:
        from vitbench.protocols.finetune import finetune

        grid = parse_floats(p.lr_grid, p.name_of("lr_grid"), "0.001,0.003,0.01,0.03")
        cfg = validated(FinetuneConfig, {
            **p.upstream_source(self.name), "backend": p.backend, "data": p.downstream_data(),
            "resolution": p.resolution, "steps": p.finetune_steps, "batch_size": p.batch_size, "lr_grid": grid,
            "warmup_steps": p.finetune_warmup_steps, "refit": p.refit,
            "seed": p.first_finetune_seed(),
            "seeds": p.finetune_seeds}, f"task {self.name!r}",
            p.named_paths({**downstream_names(), "steps": "finetune_steps",
                           "warmup_steps": "finetune_warmup_steps", "seeds": "finetune_seeds",
                           "batch_size": "batch_size", "lr_grid": "lr_grid", "refit": "refit"}))
        return with_compute_aliases(finetune(cfg, device=p.device, threads=p.threads,
                                             batch_option=p.name_of("batch_size")))
