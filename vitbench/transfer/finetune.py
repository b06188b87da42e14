"""Fine-tuning with the paper's recipe (Sec. 3.2, App. B.1.1).

Drop the whole upstream head and attach a zero-initialised one; SGD momentum 0.9, cosine decay after a
linear warm-up, global-norm gradient clipping at 1, no weight decay; optionally at a higher resolution than
pre-training (position embeddings 2-D interpolated, class token kept). The learning rate is chosen from a
grid (paper: {0.001, 0.003, 0.01, 0.03}) by accuracy on a held-out split of train (the data config's val
split); the final model is then fine-tuned on the full training set (train + val) with that rate and its
accuracy on test is the reported number (App. B.1.1: "...fine-tune on the entire training set").
"""

from __future__ import annotations

import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vitbench.backends.base import BackendName, default_backend
from vitbench.errors import ConfigError
from vitbench.models.analytic import train_flops_per_image
from vitbench.record import Record, now
from vitbench.transfer.data import DataConfig, ImageSet, load_splits
from vitbench.transfer.fewshot import DOWNSTREAM_DATA
from vitbench.transfer.pretrain import PretrainConfig, resolve_upstream, upstream_config, upstream_metrics
from vitbench.transfer.schedules import OptimConfig

PAPER_LR_GRID = (0.001, 0.003, 0.01, 0.03)  # App. B.1.1


class FinetuneConfig(BaseModel):
    """A fine-tuning evaluation: upstream, downstream data, resolution, steps, LR grid."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    upstream: PretrainConfig | None = None
    checkpoint: str | None = None  # an explicit .safetensors upstream instead of `upstream`
    backend: BackendName | None = None  # fine-tune on this backend (None: the upstream's)
    data: DataConfig = DOWNSTREAM_DATA
    resolution: int | None = Field(None, ge=1)  # None: the upstream's; larger: pos-embed interpolation
    steps: int = Field(100, ge=1)
    batch_size: int = Field(64, ge=1)  # paper: 512
    lr_grid: list[float] = list(PAPER_LR_GRID)
    warmup_steps: int = Field(10, ge=0)
    clip_norm: float | None = Field(1.0, gt=0)
    refit: bool = True  # final run on train + val with the chosen LR (paper); False: reuse the selection run
    seed: int = 0

    @field_validator("lr_grid")
    @classmethod
    def _grid(cls, v):
        if not v or any(x <= 0 for x in v):
            raise ValueError(f"lr_grid {v}: need positive learning rates, e.g. {list(PAPER_LR_GRID)}")
        return sorted(set(v))

    @model_validator(mode="after")
    def _warmup(self):
        self.optim(self.lr_grid[0])  # warm-up < steps
        return self

    def optim(self, lr: float) -> OptimConfig:
        return OptimConfig(optimizer="sgd", lr=lr, steps=self.steps, warmup_steps=self.warmup_steps,
                           decay="cosine", weight_decay=0.0, momentum=0.9, clip_norm=self.clip_norm)


def _concat(a: ImageSet, b: ImageSet) -> ImageSet:
    if len(b) == 0:
        return a
    return ImageSet(np.concatenate([a.images, b.images]), np.concatenate([a.labels, b.labels]),
                    a.num_classes, a.class_names)


def finetune(cfg: FinetuneConfig, *, device: str = "cpu", threads: int | None = None,
             cache: str | None = None) -> Record:
    """Run the fine-tuning protocol; return a record of kind 'finetune' (accuracy on the test split)."""
    from vitbench.env import environment
    from vitbench.transfer import ops

    started = now()
    splits = load_splits(cfg.data)  # data problems first, before any pre-training
    if len(cfg.lr_grid) > 1 and len(splits.val) == 0:
        raise ConfigError("choosing the fine-tuning LR needs a held-out split: set data.val_fraction > 0 "
                          "or give a single lr_grid value")
    ckpt, _ = resolve_upstream(cfg.upstream, cfg.checkpoint, directory=cache, device=device, threads=threads)
    backend = cfg.backend or ckpt.meta.get("backend") or default_backend()
    spec = ckpt.spec
    r = ckpt.resolution if cfg.resolution is None else cfg.resolution
    spec.check_resolution(r)
    k = splits.num_classes
    be = ops.transfer_backend(backend)
    info = be.setup(device, threads)

    def start():
        return ops.from_weights(be, spec, ckpt.weights, r, k, seed=cfg.seed)

    initial_accuracy = ops.accuracy(be, start(), splits.test, r)  # the zero head: argmax ties -> class 0
    t0, c0 = time.perf_counter(), be.compile_s
    runs = 0
    val_acc: dict[str, float] = {}
    selection_models = {}
    if len(cfg.lr_grid) > 1:
        for lr in cfg.lr_grid:
            model, _ = be.train(start(), splits.train, r, cfg.optim(lr), cfg.batch_size, cfg.seed)
            runs += 1
            val_acc[repr(lr)] = ops.accuracy(be, model, splits.val, r)
            if not cfg.refit:
                selection_models[lr] = model
        best_lr = max(cfg.lr_grid, key=lambda lr: val_acc[repr(lr)])  # ties: the smallest LR (sorted grid)
    else:
        best_lr = cfg.lr_grid[0]
    if cfg.refit or best_lr not in selection_models:
        final_train = _concat(splits.train, splits.val) if cfg.refit else splits.train
        model, losses = be.train(start(), final_train, r, cfg.optim(best_lr), cfg.batch_size, cfg.seed)
        runs += 1
    else:
        model, losses = selection_models[best_lr], []
    compile_s = be.compile_s - c0
    train_s = time.perf_counter() - t0 - compile_s  # compile time (JAX) kept apart
    images = runs * cfg.steps * cfg.batch_size
    metrics = {
        "accuracy": ops.accuracy(be, model, splits.test, r),
        "initial_accuracy": initial_accuracy,
        "val_accuracy": val_acc.get(repr(best_lr)),
        "best_lr": best_lr,
        "finetune_images_seen": images,
        "finetune_exaflops": train_flops_per_image(spec, r, k) * images / 1e18,
        "finetune_s": train_s,  # all runs of the LR grid + the final one, plus their evaluations
        "compile_s": compile_s or None,  # None: nothing compiled apart (eager)
        "final_loss": losses[-1] if losses else None,
        "chance_accuracy": float(np.max(np.bincount(splits.test.labels, minlength=k)) / len(splits.test)),
        **upstream_metrics(ckpt),
    }
    config = {"model": spec.name, "backend": backend, "resolution": r, "device": device,
              **cfg.model_dump(mode="json", exclude={"upstream", "checkpoint", "resolution", "backend"}),
              **upstream_config(ckpt)}
    return Record.measured("finetune", config, metrics=metrics,
                           raw={"val_accuracy_by_lr": val_acc, "loss": losses}, env=environment(info),
                           started_at=started)
