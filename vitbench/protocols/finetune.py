"""Fine-tuning with the paper's recipe (Sec. 3.2, App. B.1.1), over several seeds.

Drop the whole upstream head and attach a zero-initialised one; SGD momentum 0.9, cosine decay after a
linear warm-up, global-norm gradient clipping at 1, no weight decay; optionally at a higher resolution than
pre-training (position embeddings 2-D interpolated, class token kept). The learning rate is chosen from a
grid (paper: {0.001, 0.003, 0.01, 0.03}) by accuracy on a held-out split of train (the data config's val
split); the final model is then fine-tuned on the full training set (train + val) with that rate and its
accuracy on test is the reported number (App. B.1.1: "...fine-tune on the entire training set").

Seeds. Every run is repeated for `seeds` fine-tuning seeds (batch order; seed, seed+1, ...). The LR is chosen
by the *mean* val accuracy over seeds (a val split of a small dataset is a few dozen images: one run's
val accuracy moves by several of them between seeds), and the row reports the mean test accuracy of the
final runs with its standard deviation and the per-seed values, like few-shot rows. A single unlucky run
(an SGD run at the edge of stability that does not recover) then shows as spread instead of passing as
the result. `selection_accuracy` is the test accuracy of the LR-selection runs at the chosen LR (trained on
train only): when the refit on train + val is far below it, the refit failed, not the upstream.
"""

from __future__ import annotations

import time

import numpy as np
from pydantic import Field, field_validator

from vitbench.errors import ConfigError, TrainingDiverged
from vitbench.models.analytic import train_flops_per_image
from vitbench.models.arch import arch_value
from vitbench.record import Record, now
from vitbench.transfer.config import MAX_COUNT, Seed
from vitbench.transfer.data import ImageSet, load_splits, warn_oversized_batch
from vitbench.protocols.downstream import DownstreamConfig
from vitbench.protocols.fewshot import spread
from vitbench.protocols.pretrain import upstream_config, upstream_metrics
from vitbench.transfer.schedules import LearningRate, OptimConfig, check_warmup

# the tanh pre-logits layer of a model with rep_size (vitbench.models.families.vit.torch_variants)
PRE_LOGITS = "pre_logits."

PAPER_LR_GRID = (0.001, 0.003, 0.01, 0.03)  # App. B.1.1


class FinetuneConfig(DownstreamConfig):
    """A fine-tuning evaluation: upstream, downstream data, resolution, steps, LR grid."""

    steps: int = Field(100, ge=1, le=MAX_COUNT)
    # no default of its own: the caller's (the finetune task's, the shared batch_size's 8); paper: 512
    batch_size: int = Field(ge=1, le=MAX_COUNT)
    lr_grid: list[LearningRate] = list(PAPER_LR_GRID)
    warmup_steps: int = Field(10, ge=0, le=MAX_COUNT)
    clip_norm: float | None = Field(1.0, gt=0)
    refit: bool = True  # final run on train + val with the chosen LR (paper); False: reuse the selection run
    seed: Seed = 0  # the first fine-tuning seed (batch order); runs use seed, seed + 1, ..., seed + seeds - 1
    seeds: int = Field(3, ge=1, le=MAX_COUNT)  # runs per LR and final runs: LR by mean val accuracy, accuracy +- std

    @field_validator("lr_grid")
    @classmethod
    def _grid(cls, v):
        if not v or any(x <= 0 for x in v):
            raise ValueError(f"lr_grid {v}: need positive learning rates, e.g. {list(PAPER_LR_GRID)}")
        return sorted(set(v))

    _warmup = field_validator("warmup_steps")(check_warmup)  # warm-up < steps

    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.seeds)]

    def optim(self, lr: float) -> OptimConfig:
        return OptimConfig(optimizer="sgd", lr=lr, steps=self.steps, warmup_steps=self.warmup_steps,
                           decay="cosine", weight_decay=0.0, momentum=0.9, clip_norm=self.clip_norm)


def _concat(a: ImageSet, b: ImageSet) -> ImageSet:
    return a if len(b) == 0 else a.join(b)


def finetune(cfg: FinetuneConfig, *, device: str = "cpu", threads: int | None = None,
             cache: str | None = None, batch_option: str = "batch_size") -> Record:
    """Run the fine-tuning protocol; return a record of kind 'finetune' (accuracy on the test split).
    `batch_option`: how a warning about a batch larger than the training set names the batch size."""
    from vitbench.backends.base import transfer_backend
    from vitbench.env import environment
    from vitbench.transfer import ops

    started = now()
    splits = load_splits(cfg.data)  # data problems first, before any pre-training
    warn_oversized_batch(cfg.batch_size, cfg.steps, splits, batch_option)
    if len(cfg.lr_grid) > 1 and len(splits.val) == 0:
        raise ConfigError("choosing the fine-tuning LR needs a held-out split: set data.val_fraction > 0 "
                          "or give a single lr_grid value")
    splits.warn_uncovered("the learning rate" if len(cfg.lr_grid) > 1 else None)
    ckpt, backend = cfg.start(directory=cache, device=device, threads=threads)
    spec, body = ckpt.spec, ckpt.weights
    if arch_value(spec, "rep_size"):  # the whole pre-training head goes, its tanh pre-logits layer (ViT 3.1, D.3)
        spec = spec.with_overrides(rep_size=0)
        body = {n: w for n, w in body.items() if not n.startswith(PRE_LOGITS)}
    r = ckpt.resolution if cfg.resolution is None else cfg.resolution
    spec.check_resolution(r)
    k = splits.num_classes
    be = transfer_backend(backend)
    info = be.setup(device, threads)

    def start(seed: int):
        return ops.from_weights(be, spec, body, r, k, seed=seed)

    def run(lr: float, data: ImageSet, seed: int):
        return be.train(start(seed), data, r, cfg.optim(lr), cfg.batch_size, seed)

    def diverged(trained) -> tuple[int | None, str] | None:
        return ops.divergence(trained[1], be.weights(trained[0]))

    seeds = cfg.seed_list()
    initial_accuracy = ops.accuracy(be, start(cfg.seed), splits.test, r)  # the zero head: argmax ties -> class 0
    t0, c0, input0 = time.perf_counter(), be.compile_s, splits.train.input.snapshot()
    runs = 0
    val_acc: dict[str, list[float]] = {}  # per LR, per seed
    diverged_lrs: dict[str, list[str]] = {}  # LRs whose selection runs diverged: why
    chosen: list = []  # (model, losses) of the selection runs at the best LR so far, one per seed
    if len(cfg.lr_grid) > 1:
        best_lr = None
        for lr in cfg.lr_grid:
            trained = []
            for s in seeds:
                trained.append(run(lr, splits.train, s))
                runs += 1
                bad = diverged(trained[-1])
                if bad is not None:  # a diverged LR is never chosen; the row says which and where
                    diverged_lrs.setdefault(repr(lr), []).append(bad[1])
                val_acc.setdefault(repr(lr), []).append(
                    float("nan") if bad else ops.accuracy(be, trained[-1][0], splits.val, r))
            # strictly better mean val accuracy wins: ties keep the smaller LR (the grid is sorted)
            if repr(lr) not in diverged_lrs and (
                    best_lr is None or np.mean(val_acc[repr(lr)]) > np.mean(val_acc[repr(best_lr)])):
                best_lr, chosen = lr, trained
            del trained
        if best_lr is None:
            why = "; ".join(f"{lr}: {w[0]}" for lr, w in diverged_lrs.items())
            raise TrainingDiverged(f"fine-tuning {spec.name} diverged at every learning rate of the grid ({why}); "
                                   "nothing was saved. Try smaller learning rates.")
    else:
        best_lr = cfg.lr_grid[0]
    if cfg.refit or not chosen:
        final_train = _concat(splits.train, splits.val) if cfg.refit else splits.train
        final = [run(best_lr, final_train, s) for s in seeds]
        runs += len(seeds)
    else:
        final = chosen
    for trained in final:
        ops.check_trained(trained[1], be.weights(trained[0]), f"fine-tuning {spec.name} at lr {best_lr}",
                          "Try a smaller learning rate.")
    compile_s = be.compile_s - c0
    train_s = time.perf_counter() - t0 - compile_s  # compile time (JAX) kept apart
    train_input = splits.train.input.metrics(input0, train_s)  # the runs' batches and val passes
    images = runs * cfg.steps * cfg.batch_size
    per_seed = [ops.accuracy(be, model, splits.test, r) for model, _ in final]
    selection = [ops.accuracy(be, model, splits.test, r) for model, _ in chosen] if chosen is not final \
        else per_seed
    last_loss = [losses[-1] for _, losses in final]
    accuracy, accuracy_std = spread(per_seed)
    best_val = val_acc.get(repr(best_lr))
    metrics = {
        "accuracy": accuracy,  # mean over seeds of the final runs' test accuracy
        "accuracy_std": accuracy_std,
        "selection_accuracy": float(np.mean(selection)) if selection else None,
        "initial_accuracy": initial_accuracy,
        "val_accuracy": float(np.mean(best_val)) if best_val else None,
        "best_lr": best_lr,
        # the protocol's cost: every run of the LR grid and the final ones (finetune_runs of them), not one run's
        "finetune_images_seen": images,
        "finetune_exaflops": train_flops_per_image(spec, r, k) * images / 1e18,
        "finetune_runs": runs,
        "finetune_s": train_s,  # all runs of the LR grid and the final ones, plus their val evaluations
        "compile_s": compile_s or None,  # None: nothing compiled apart (eager)
        "input_img_per_s": train_input["input_img_per_s"],  # decode + preprocess alone
        "input_bound_fraction": train_input["input_bound_fraction"],  # share of finetune_s waiting on input
        "skipped_files": len(splits.skipped),
        "final_loss": float(np.mean(last_loss)),  # last training step's loss, mean over the final runs
        "chance_accuracy": float(np.max(np.bincount(splits.test.labels, minlength=k)) / len(splits.test)),
        **upstream_metrics(ckpt),
        **splits.row_fields(),  # what the data was: the counts and class names (tasks.upstream.SPLIT_METRICS)
    }
    config = {"model": ckpt.spec.name, "backend": backend, "resolution": r, "device": device,
              **cfg.recorded(),
              **upstream_config(ckpt)}
    raw = {"val_accuracy_by_lr": {lr: float(np.mean(v)) for lr, v in val_acc.items()},
           "diverged_lrs": diverged_lrs,
           "val_accuracy_by_lr_per_seed": val_acc,
           "per_seed": {"seed": seeds, "accuracy": per_seed, "selection_accuracy": selection,
                        "final_loss": last_loss},
           "loss": [losses for _, losses in final]}  # per seed, per step
    splits.warn_skipped()
    return Record.measured("finetune", config, metrics=metrics, raw=raw, env=environment(info), started_at=started)
