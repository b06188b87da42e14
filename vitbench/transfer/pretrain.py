"""Small-scale upstream pre-training (paper App. B.1, scaled down for CPU studies) and its checkpoint cache.

Recipe: Adam (b1 0.9, b2 0.999), decoupled weight decay, linear warm-up then linear (default) or cosine
decay, optional label smoothing, global-norm clipping at 1, softmax cross-entropy on the upstream classes.
Compute: images seen x training FLOPs per image (forward + backward = 3 x forward, 2 FLOPs per MAC, from
vitbench.models.analytic), reported in exaFLOPs as in the paper's Table 6 / Figure 5.

A fewshot/finetune trial names its upstream by a `PretrainConfig`; `ensure_upstream` trains it once and
caches the checkpoint under `<cache dir>/<model>-<key>.safetensors` (key = hash of the config), so every
downstream trial of the same upstream reuses it, in this process or any other (a file lock serialises them).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vitbench.backends.base import BackendName, default_backend
from vitbench.models.analytic import analytic_counts, train_flops_per_image
from vitbench.models.specs import get_spec
from vitbench.record import Record, now
from vitbench.transfer.checkpoint import Checkpoint, checkpoint_path, load_checkpoint, save_checkpoint
from vitbench.transfer.data import DataConfig, load_splits
from vitbench.transfer.schedules import OptimConfig

CACHE_ENV = "VITBENCH_CHECKPOINT_DIR"
DEFAULT_CACHE = Path("results") / "checkpoints"
UPSTREAM_DATA = DataConfig(name="digits", classes=[0, 1, 2, 3, 4])  # the default disjoint upstream half


def default_warmup(steps: int) -> int:
    """Warm-up steps when none are given: 10 % of the steps (30 of the default 300, the recipe's ratio), at most
    30, so a short run (`--steps 20`) gets 2 instead of failing, and longer runs keep their checkpoint keys."""
    return min(30, steps // 10)


class PretrainConfig(BaseModel):
    """Everything that determines an upstream model (its hash is the checkpoint cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    backend: BackendName = Field(default_factory=default_backend)
    data: DataConfig = UPSTREAM_DATA
    resolution: int | None = Field(None, ge=1)  # None: the variant's native resolution
    batch_size: int = Field(64, ge=1)
    steps: int = Field(300, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.1, ge=0)  # paper: 0.1 (JFT), 0.03 (ImageNet-21k)
    warmup_steps: int | None = Field(None, ge=0)  # None: default_warmup(steps), filled in before validation
    decay: Literal["linear", "cosine"] = "linear"
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    clip_norm: float | None = Field(1.0, gt=0)
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _warmup_default(cls, data):
        if isinstance(data, dict) and data.get("warmup_steps") is None:
            steps = data.get("steps", cls.model_fields["steps"].default)
            data = {**data, "warmup_steps": default_warmup(steps) if isinstance(steps, int) else 0}
        return data

    @model_validator(mode="after")
    def _check(self):
        spec = get_spec(self.model)  # UnknownModelError lists close names
        spec.check_resolution(spec.resolution if self.resolution is None else self.resolution)
        OptimConfig(steps=self.steps, warmup_steps=self.warmup_steps)  # warm-up < steps
        return self

    @property
    def res(self) -> int:
        return get_spec(self.model).resolution if self.resolution is None else self.resolution

    def optim(self) -> OptimConfig:
        return OptimConfig(optimizer="adam", lr=self.lr, steps=self.steps, warmup_steps=self.warmup_steps,
                           decay=self.decay, weight_decay=self.weight_decay, clip_norm=self.clip_norm,
                           label_smoothing=self.label_smoothing)

    def key(self) -> str:
        """Stable 16-hex hash of the canonical config (model name normalised to the table's)."""
        d = self.model_dump(mode="json")
        d["model"] = get_spec(self.model).name
        d["resolution"] = self.res
        text = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def pretrain(cfg: PretrainConfig, *, device: str = "cpu", threads: int | None = None,
             out: str | Path | None = None) -> tuple[Record, Checkpoint]:
    """Train `cfg` upstream; return (record kind='pretrain', checkpoint). Saves to `out` if given."""
    from vitbench.env import environment
    from vitbench.transfer import ops

    started = now()
    if out is not None:  # where the checkpoint goes is checked before minutes of training, not after
        out = checkpoint_path(out, cache_path(cfg).name)
    spec = get_spec(cfg.model)
    splits = load_splits(cfg.data)
    k, r = splits.num_classes, cfg.res
    be = ops.transfer_backend(cfg.backend)
    info = be.setup(device, threads)
    model = be.init_model(spec, r, k, cfg.seed)
    t0, c0 = time.perf_counter(), be.compile_s
    model, losses = be.train(model, splits.train, r, cfg.optim(), cfg.batch_size, cfg.seed)
    compile_s = be.compile_s - c0
    train_s = time.perf_counter() - t0 - compile_s  # compile time (JAX) kept apart
    images_seen = cfg.steps * cfg.batch_size
    flops_per_image = train_flops_per_image(spec, r, k)
    metrics = {
        "accuracy": ops.accuracy(be, model, splits.test, r),  # upstream test split
        "val_accuracy": ops.accuracy(be, model, splits.val, r),
        "images_seen": images_seen,
        "epochs": images_seen / len(splits.train),
        "exaflops": flops_per_image * images_seen / 1e18,
        "train_gflops_per_image": flops_per_image / 1e9,
        "params_m": analytic_counts(spec, r, k).params / 1e6,
        "train_s": train_s,
        "compile_s": compile_s or None,  # None: nothing compiled apart (eager)
        "train_img_per_s": images_seen / train_s,  # incl. batch preprocessing; not a benchmark
        "final_loss": losses[-1] if losses else None,
        "num_classes": k,
        "train_images": len(splits.train),
    }
    config = {"model": spec.name, **cfg.model_dump(mode="json"), "resolution": r, "upstream_key": cfg.key(),
              "device": device}
    meta = {"model": spec.name, "spec": spec.to_dict(), "resolution": r, "num_classes": k,
            "class_names": splits.train.class_names, "backend": cfg.backend, "key": cfg.key(),
            "config": cfg.model_dump(mode="json"), "data": splits.summary(), "metrics": metrics}
    ckpt = Checkpoint(be.weights(model), meta)
    if out is not None:
        ckpt.path = save_checkpoint(out, ckpt.weights, meta)
        config["checkpoint"] = str(ckpt.path)
    record = Record.measured("pretrain", config, metrics=metrics, raw={"loss": losses},
                             env=environment(info), started_at=started)
    return record, ckpt


# ---------------------------------------------------------------------------------------------
# Cache of upstream checkpoints
# ---------------------------------------------------------------------------------------------
def cache_dir(override: str | Path | None = None) -> Path:
    """Upstream checkpoint cache: `override`, else $VITBENCH_CHECKPOINT_DIR, else ./results/checkpoints."""
    return Path(override or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def cache_path(cfg: PretrainConfig, directory: str | Path | None = None) -> Path:
    safe = re.sub(r"[^A-Za-z0-9+.-]+", "_", get_spec(cfg.model).name)
    return cache_dir(directory) / f"{safe}-{cfg.backend}-{cfg.key()}.safetensors"


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_upstream(cfg: PretrainConfig, *, directory: str | Path | None = None, device: str = "cpu",
                    threads: int | None = None) -> tuple[Checkpoint, Record | None]:
    """The cached upstream checkpoint for `cfg`, pre-training it first if absent.

    Returns (checkpoint, the pretrain record if it was trained now else None).
    """
    path = cache_path(cfg, directory)
    with _locked(path):
        if path.is_file():
            return load_checkpoint(path), None
        record, ckpt = pretrain(cfg, device=device, threads=threads, out=path)
        return ckpt, record


def resolve_upstream(upstream: PretrainConfig | None, checkpoint: str | None, *,
                     directory: str | Path | None = None, device: str = "cpu",
                     threads: int | None = None) -> tuple[Checkpoint, Record | None]:
    """A downstream task's starting point: an explicit checkpoint file, else the cached/trained upstream."""
    from vitbench.errors import ConfigError

    if checkpoint:
        return load_checkpoint(checkpoint), None
    if upstream is None:
        raise ConfigError("a downstream task needs `upstream` (a pre-training config) or `checkpoint` (a "
                          ".safetensors file from `vitbench pretrain`)")
    return ensure_upstream(upstream, directory=directory, device=device, threads=threads)


def upstream_metrics(ckpt: Checkpoint) -> dict:
    """What a downstream row carries about its upstream: pre-training compute (the paper's x-axis) etc."""
    m = ckpt.meta.get("metrics", {})
    return {
        "exaflops": m.get("exaflops"),  # pre-training compute, exaFLOPs (Figure 5 / Table 6)
        "pretrain_images_seen": m.get("images_seen"),
        "pretrain_epochs": m.get("epochs"),
        "upstream_accuracy": m.get("accuracy"),
        "params_m": m.get("params_m"),
    }


def upstream_config(ckpt: Checkpoint) -> dict:
    return {"upstream_key": ckpt.meta.get("key"), "upstream_backend": ckpt.meta.get("backend"),
            "upstream_resolution": ckpt.resolution, "upstream_checkpoint": str(ckpt.path) if ckpt.path else None,
            "upstream": ckpt.meta.get("config"), "flavour": ckpt.spec.flavour.to_dict()}
