"""The parameters the transfer tasks share: the upstream (pre-training) and the downstream data.

Every transfer trial carries the same flat `pretrain_*` / `upstream_*` parameters; they define a
`PretrainConfig` whose hash keys a checkpoint cache (vitbench.transfer.pretrain: $VITBENCH_CHECKPOINT_DIR, else
./results/checkpoints, shared by all studies since the key is the content). The first trial that needs an
upstream pre-trains it (inside that trial, under a file lock) and later trials reuse it, so a study can list
[pretrain, fewshot, finetune] as a task axis, or only the downstream tasks. Downstream rows carry the upstream's
compute (`pretrain_exaflops`, also as `exaflops`) and images seen, so `vitbench report` plots accuracy against
pre-training compute (paper Figure 5) and tabulates them (Table 6).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from vitbench.backends.base import BackendName
from vitbench.record import Record
from vitbench.tasks import Figure, Metric, ReportPart, lazy, register_report
from vitbench.tasks.fields import PathField
from vitbench.transfer.config import DatasetName, validated

SHARED = ("model", "backend", "task", "device", "seed", "threads")


class Upstream(BaseModel):
    """The upstream: identical names and defaults in all three tasks, so their caches line up."""

    upstream_dataset: DatasetName = "digits"
    upstream_path: PathField | None = None
    upstream_classes: str | None = "0-4"  # 'a-b' or 'a,b,c'; None: all classes
    upstream_train_per_class: int | None = None  # cap on upstream images per class (data-size axis)
    data_seed: int = 0  # split seed (up- and downstream), separate from the model seed
    pretrain_backend: BackendName | None = None  # None: the trial's backend
    pretrain_resolution: int | None = None  # None: the variant's native resolution
    pretrain_steps: int = 300
    pretrain_batch_size: int = 64
    pretrain_lr: float = 1e-3
    pretrain_weight_decay: float = 0.1
    pretrain_warmup_steps: int = 30
    pretrain_decay: Literal["linear", "cosine"] = "linear"
    label_smoothing: float = 0.0

    def upstream_config(self, task: str):
        """The PretrainConfig these parameters describe (a ConfigError names the bad field)."""
        from vitbench.transfer.pretrain import PretrainConfig

        data = {"name": self.upstream_dataset, "path": self.upstream_path, "classes": self.upstream_classes,
                "seed": self.data_seed, "train_per_class": self.upstream_train_per_class}
        return validated(PretrainConfig, {
            "model": self.model, "backend": self.pretrain_backend or self.backend, "data": data,
            "resolution": self.pretrain_resolution, "batch_size": self.pretrain_batch_size,
            "steps": self.pretrain_steps, "lr": self.pretrain_lr, "weight_decay": self.pretrain_weight_decay,
            "warmup_steps": self.pretrain_warmup_steps, "decay": self.pretrain_decay,
            "label_smoothing": self.label_smoothing, "seed": self.seed}, f"task {task!r}")


def _absent(v) -> bool:
    return v is None


class FromCheckpoint(BaseModel):
    """Start from a checkpoint on local disk instead of pre-training here: a timm `.safetensors` state dict, an
    original vit_jax / big_vision / big_transfer `.npz`, or one of vitbench's (vitbench.models.checkpoints). Its
    pre-training budget, declared, makes its compute known (paper's exaFLOPs: 3 x forward FLOPs x images x
    epochs). Left out of a trial's key when unset, so studies without it keep their keys."""

    checkpoint: PathField | None = Field(None, exclude_if=_absent)
    checkpoint_images: int | None = Field(None, gt=0, exclude_if=_absent)  # images in its pre-training set
    checkpoint_epochs: float | None = Field(None, gt=0, exclude_if=_absent)  # epochs it was pre-trained for

    def upstream_source(self, task: str) -> dict:
        """The downstream config's start: {"checkpoint": ..., budget} when one is given, else {"upstream": ...}."""
        if self.checkpoint is None:
            return {"upstream": self.upstream_config(task)}
        return {"checkpoint": self.checkpoint, "checkpoint_images": self.checkpoint_images,
                "checkpoint_epochs": self.checkpoint_epochs}


class Downstream(BaseModel):
    dataset: DatasetName = "digits"
    data_path: PathField | None = None
    classes: str | None = "5-9"
    train_per_class: int | None = None
    val_fraction: float = 0.1  # held out of train: the fine-tuning LR choice / few-shot L2 choice

    def downstream_data(self) -> dict:
        return {"name": self.dataset, "path": self.data_path, "classes": self.classes, "seed": self.data_seed,
                "train_per_class": self.train_per_class, "val_fraction": self.val_fraction}


ACCURACY = Metric("accuracy", "fraction", True, "transfer accuracy (0..1) on the test split", comparable=True)


def with_compute_aliases(rec: Record) -> Record:
    """Downstream rows: the x-axis of Figure 5 under the names the report reads."""
    rec.metrics["pretrain_exaflops"] = rec.metrics.get("exaflops")
    rec.metrics["images_seen"] = rec.metrics.get("pretrain_images_seen")
    return rec


def _throughput_vs_accuracy(df):
    from vitbench.report.fit_figures import throughput_vs_accuracy
    from vitbench.tasks.bench import Infer

    return throughput_vs_accuracy(df, speed_task=Infer.name)


DOWNSTREAM_KINDS = ("fewshot", "finetune")
register_report(ReportPart(
    "accuracy", "Transfer accuracy", DOWNSTREAM_KINDS, lazy("vitbench.report.tables:accuracy"),
    figures=(Figure("accuracy_vs_compute", "Accuracy vs pre-training compute, Pareto front (cf. paper Figure 5)",
                    lazy("vitbench.report.plots:accuracy_vs_compute")),
             Figure("fit_curves", "Error vs pre-training compute with fitted scaling laws and their 95 % bands "
                    "(docs/scaling-laws.md)", lazy("vitbench.report.fit_figures:fitted_curves")),
             Figure("compute_frontier", "Which model and family is best at each compute budget",
                    lazy("vitbench.report.fit_figures:compute_frontier")),
             Figure("throughput_vs_accuracy", "Inference throughput vs accuracy: what accuracy a speed buys "
                    "(cf. DeiT Figure 1)", _throughput_vs_accuracy, kinds=("bench", *DOWNSTREAM_KINDS))),
    order=40))
