"""Small-scale upstream pre-training (paper App. B.1, scaled down for CPU studies) and its checkpoint cache.

Recipe: Adam (b1 0.9, b2 0.999), decoupled weight decay, linear warm-up then linear (default) or cosine
decay, optional label smoothing, global-norm clipping at 1, softmax cross-entropy on the upstream classes.
Compute: images seen x training FLOPs per image (forward + backward = 3 x forward, 2 FLOPs per MAC, from
vitbench.models.analytic), reported in exaFLOPs as in the paper's Table 6 / Figure 5.

A fewshot/finetune trial names its upstream by a `PretrainConfig`; `ensure_upstream` trains it once and
caches the checkpoint under `<cache dir>/<model>-<key>.safetensors` (key = hash of the config), so every
downstream trial of the same upstream reuses it, in this process or any other (a file lock serialises them).

Distillation (DeiT, Touvron et al. 2021; vitbench.transfer.distill): `teacher` names a teacher (its own
PretrainConfig, pre-trained first through the same cache, or a checkpoint file) and the loss. The teacher's
forward on every image seen counts in the row's compute: exaflops = (3 x student forward + teacher forward)
FLOPs per image x images seen; the teacher's own pre-training is reported apart (`teacher_pretrain_exaflops`).
A config without a teacher hashes as before (no `teacher` key), so existing checkpoints keep their keys. The
teacher's rules other than its config (its fields from flat options, its model, its weights, its metrics):
vitbench.protocols.teacher.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from vitbench.backends.base import BackendName, default_backend
from vitbench.errors import ConfigError, clip
from vitbench.models.analytic import analytic_counts, train_flops_per_image
from vitbench.models.specs import ModelSpec, get_spec
from vitbench.paths import file_digest, locked
from vitbench.protocols.teacher import load_teacher, teacher_metrics
from vitbench.record import Record, now
from vitbench.transfer.checkpoint import Checkpoint, checkpoint_path, load_checkpoint, save_checkpoint
from vitbench.transfer.config import MAX_COUNT, DataConfig, Seed
from vitbench.transfer.data import SPLIT_RULE, load_splits, warn_oversized_batch
from vitbench.transfer.distill import DEFAULT_LAMBDA, DEFAULT_TAU, Distill, Distillation, Lambda, Tau
from vitbench.transfer.masked_patch import (
    MaskedPatch,
    Objective,
    Scratch,
    UpstreamObjective,
    geometry,
    require_objective,
)
from vitbench.transfer.schedules import LearningRate, OptimConfig, WeightDecay, check_warmup

CACHE_ENV = "VITBENCH_CHECKPOINT_DIR"
DEFAULT_CACHE = Path("results") / "checkpoints"
UPSTREAM_DATA = DataConfig(name="digits", classes=[0, 1, 2, 3, 4])  # the default disjoint upstream half


def default_warmup(steps: int) -> int:
    """Warm-up steps when none are given: 10 % of the steps (30 of the default 300, the recipe's ratio), at most
    30, so a short run (`--steps 20`) gets 2 instead of failing, and longer runs keep their checkpoint keys."""
    return min(30, steps // 10)


SPEC_CONTEXT = "spec"  # validation-context key: a ModelSpec the caller resolved (used when it is `model`'s)


class PretrainConfig(BaseModel):
    """Everything that determines an upstream model (its hash is the checkpoint cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    model: str
    backend: BackendName = Field(default_factory=default_backend)
    data: DataConfig = UPSTREAM_DATA
    resolution: int | None = Field(None, ge=1, le=MAX_COUNT)  # None: the variant's native resolution
    batch_size: int = Field(64, ge=1, le=MAX_COUNT)
    steps: int = Field(300, ge=1, le=MAX_COUNT)
    lr: LearningRate = 1e-3
    weight_decay: WeightDecay = 0.1  # paper: 0.1 (JFT), 0.03 (ImageNet-21k)
    warmup_steps: int | None = Field(None, ge=0, le=MAX_COUNT)  # None: default_warmup(steps), filled in before validation
    decay: Literal["linear", "cosine"] = "linear"
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    clip_norm: float | None = Field(1.0, gt=0)
    seed: Seed = 0
    teacher: TeacherConfig | None = None  # distillation (DeiT); None: plain supervised pre-training
    objective: UpstreamObjective | None = None  # masked patch prediction (no labels) | none; None: supervised
    _spec: ModelSpec | None = PrivateAttr(None)  # `model` resolved once, by _check

    @model_validator(mode="before")
    @classmethod
    def _warmup_default(cls, data):
        if isinstance(data, dict) and data.get("warmup_steps") is None:
            steps = data.get("steps", cls.model_fields["steps"].default)
            ok = isinstance(steps, int) and steps >= 1  # a bad `steps` is reported once, as itself
            data = {**data, "warmup_steps": default_warmup(steps) if ok else 0}
        return data

    _warmup = field_validator("warmup_steps")(check_warmup)  # warm-up < steps

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo):
        given = (info.context or {}).get(SPEC_CONTEXT)  # the trial's model, already resolved by its Params
        # else parsed here (UnknownModelError lists close names)
        spec = self._spec = given if given is not None and given.name == self.model else get_spec(self.model)
        spec.check_resolution(spec.resolution if self.resolution is None else self.resolution)
        up = self.teacher.upstream if self.teacher is not None else None
        if self.objective is not None and self.teacher is not None:
            raise ValueError("a teacher supervises a classifier: objective masked_patch takes no teacher")
        if isinstance(self.objective, MaskedPatch):
            geometry(spec, self.res)  # a transformer (vit or hybrid)
        if up is not None and up.data != self.data:
            raise ValueError(f"teacher.upstream.data must be the student's upstream data "
                             f"({self.data.model_dump()}); got {up.data.model_dump()}")
        return self

    @property
    def spec(self) -> ModelSpec:
        """The model, resolved once when the config was validated."""
        return self._spec

    @property
    def res(self) -> int:
        return self.spec.resolution if self.resolution is None else self.resolution

    def optim(self) -> OptimConfig:
        return OptimConfig(optimizer="adam", lr=self.lr, steps=self.steps, warmup_steps=self.warmup_steps,
                           decay=self.decay, weight_decay=self.weight_decay, clip_norm=self.clip_norm,
                           label_smoothing=self.label_smoothing)

    def key_data(self) -> dict:
        """The canonical config the key hashes (model name normalised to the table's, resolution resolved)."""
        d = self.model_dump(mode="json", exclude={"teacher", "objective"})
        d["model"] = self.spec.name
        d["resolution"] = self.res
        # how its training split was drawn (an upstream of another rule trained on other images), not how the data
        # was read: the worker count and the up-front check change no weight (workers=2 pre-trained again)
        d["split_rule"] = SPLIT_RULE
        for how in ("workers", "check_data"):
            d["data"].pop(how, None)
        for where in ("path", "test_path"):  # the cache is the host's: a relative path is where it was typed
            # (`--data-path ds` in two folders reused the first folder's upstream); an absolute one as before
            if d["data"].get(where):
                d["data"][where] = os.path.abspath(os.path.expanduser(d["data"][where]))
        if self.teacher is not None:  # absent without a teacher: the keys of plain upstreams stay as they were
            d["teacher"] = self.teacher.key_data()
        if self.objective is not None:  # absent when supervised: existing keys unchanged
            d["objective"] = self.objective.key_data()
        return d

    def key(self) -> str:
        """Stable 16-hex hash of `key_data()`."""
        text = json.dumps(self.key_data(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class TeacherConfig(BaseModel):
    """A distillation teacher: its weights (`upstream`: pre-trained here through the checkpoint cache; or a
    `checkpoint` file of any origin vitbench.models.checkpoints reads) and the loss (vitbench.transfer.distill)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    upstream: PretrainConfig | None = None
    checkpoint: str | None = None
    model: str | None = None  # with `checkpoint`: the table's row (None: inferred from the weights)
    distillation: Distillation = Distillation.HARD
    lam: Lambda = DEFAULT_LAMBDA  # weight of the teacher's term
    tau: Tau = DEFAULT_TAU  # temperature (soft only)

    @model_validator(mode="after")
    def _check(self):
        if (self.upstream is None) == (self.checkpoint is None):
            raise ValueError("give exactly one of teacher.upstream (a pre-training config) and teacher.checkpoint "
                             f"(a file); got upstream={self.upstream is not None}, checkpoint={self.checkpoint!r}")
        if self.checkpoint is not None and not Path(self.checkpoint).expanduser().is_file():
            raise ValueError(f"teacher.checkpoint {self.checkpoint!r} does not exist (or is not a file)")
        if self.model is not None:
            get_spec(self.model)
        return self

    def key_data(self) -> dict:
        """What of the teacher decides the student: its weights (the upstream's key, or the file's SHA-256) and
        the loss (tau only for soft distillation)."""
        d: dict = {"distillation": self.distillation.value, "lam": self.lam}
        if self.distillation is Distillation.SOFT:
            d["tau"] = self.tau
        if self.upstream is not None:
            d["upstream"] = self.upstream.key()
        else:
            d["checkpoint_sha256"] = _file_sha256(Path(self.checkpoint).expanduser())
            d["model"] = get_spec(self.model).name if self.model else None
        return d


_SHA_CACHE: dict[tuple, str] = {}


def _file_sha256(path: Path) -> str:
    st = path.stat()
    ident = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if ident not in _SHA_CACHE:
        got = file_digest(path.resolve())
        if got is None:
            raise ConfigError(f"{path}: not a readable file (its SHA-256 names the checkpoint in the row)")
        _SHA_CACHE[ident] = got[1]
    return _SHA_CACHE[ident]


PretrainConfig.model_rebuild()


def pretrain(cfg: PretrainConfig, *, device: str = "cpu", threads: int | None = None,
             out: str | Path | None = None, directory: str | Path | None = None,
             batch_option: str = "batch_size") -> tuple[Record, Checkpoint]:
    """Train `cfg` upstream; return (record kind='pretrain', checkpoint). Saves to `out` if given.

    With a teacher, the teacher comes first (from the cache in `directory`, pre-trained there if absent).
    `batch_option`: how a warning about a batch larger than the training set names the batch size."""
    from vitbench.backends.base import transfer_backend
    from vitbench.env import environment
    from vitbench.transfer import ops

    started = now()
    if out is not None:  # where the checkpoint goes is checked before minutes of training, not after
        out = checkpoint_path(out, cache_path(cfg).name)
    spec = cfg.spec
    splits = load_splits(cfg.data)
    warn_oversized_batch(cfg.batch_size, cfg.steps, splits, batch_option)
    k, r = splits.num_classes, cfg.res
    be = transfer_backend(cfg.backend)
    info = be.setup(device, threads)
    teacher = distill = teacher_table = None
    teacher_s = 0.0
    if cfg.teacher is not None:
        up = cfg.teacher.upstream  # pre-trained first, through the cache in `directory`
        upstream = ensure_upstream(up, directory=directory, device=device, threads=threads)[0] if up else None
        teacher = load_teacher(cfg.teacher, be, splits.train.class_names, upstream=upstream)
        # no augmentation and deterministic batches: the teacher's logits per training image never change, so
        # one pass over the training set serves every batch (its time apart from train_s: teacher_s)
        t0 = time.perf_counter()
        teacher_table = ops.check_finite(
            ops.predict_all(be, teacher.model, splits.train, teacher.resolution, "distillation's teacher table"),
            f"the teacher's logits ({teacher.spec.name})").astype(np.float32)
        teacher_s = time.perf_counter() - t0
        distill = Distill(cfg.teacher.distillation, cfg.teacher.lam, cfg.teacher.tau,
                          lambda idx: teacher_table[idx])
    t0, c0, input0 = time.perf_counter(), be.compile_s, splits.train.input.snapshot()
    if cfg.objective is None:
        model = be.init_model(spec, r, k, cfg.seed)
        model, losses = be.train(model, splits.train, r, cfg.optim(), cfg.batch_size, cfg.seed, distill=distill)
        flops_per_image = train_flops_per_image(spec, r, k)
    elif isinstance(cfg.objective, Scratch):  # no pre-training: the random init, no steps, no compute
        from vitbench.models.identify import is_head

        model, losses, flops_per_image, objective_params = be.init_model(spec, r, 1, cfg.seed), [], 0.0, {}
        saved = {k: v for k, v in be.weights(model).items() if not is_head(k, spec)}
    else:  # masked patch prediction: the upstream labels are not used; no classifier, so no accuracy
        from vitbench.transfer.masked_patch import pretrain_encoder

        model, saved, objective_params, losses, flops_per_image = pretrain_encoder(be, spec, splits, r, cfg)
    ops.check_trained(losses, be.weights(model) if cfg.objective is None else saved, f"pre-training {spec.name}",
                      "Lower the learning rate, raise the warm-up, or (distilling) bring the temperature nearer 1.")
    compile_s = be.compile_s - c0
    train_s = time.perf_counter() - t0 - compile_s  # compile time (JAX) and the teacher (teacher_s) apart
    train_input = splits.train.input.metrics(input0, train_s)  # the training loop's batches (their decode)
    images_seen = cfg.steps * cfg.batch_size if not isinstance(cfg.objective, Scratch) else 0
    teacher_flops = teacher.forward_flops() if teacher is not None else 0.0  # per image seen (forward only)
    test_logits, test_labels = ops.predict(be, model, splits.test, r) if cfg.objective is None else (None, None)
    if test_logits is not None:  # upstream test: a classifier only (supervised)
        ops.check_finite(test_logits, f"{spec.name}'s test logits")
    metrics = {
        "accuracy": ops.top1(test_logits, test_labels) if test_logits is not None else None,
        "val_accuracy": ops.accuracy(be, model, splits.val, r) if test_logits is not None else None,
        "images_seen": images_seen,
        "epochs": images_seen / len(splits.train),
        "exaflops": (flops_per_image + teacher_flops) * images_seen / 1e18,  # student training + teacher forward
        "train_gflops_per_image": flops_per_image / 1e9,
        "params_m": analytic_counts(spec, r, k if cfg.objective is None else 0).params / 1e6,
        "train_s": train_s,
        "compile_s": compile_s or None,  # None: nothing compiled apart (eager)
        "train_img_per_s": images_seen / train_s if images_seen else None,  # incl. batch preprocessing; not a benchmark
        "input_img_per_s": train_input["input_img_per_s"],  # decode + preprocess alone
        "input_bound_fraction": train_input["input_bound_fraction"],  # share of train_s spent waiting on input
        "skipped_files": len(splits.skipped),
        "final_loss": losses[-1] if losses else None,
        "num_classes": k,
        "train_images": len(splits.train),
    }
    if teacher is not None:
        metrics.update(teacher_metrics(teacher, be, test_logits, teacher_table, splits, images_seen),
                       student_exaflops=flops_per_image * images_seen / 1e18, teacher_s=teacher_s)
    config = {"model": spec.name, **cfg.model_dump(mode="json"), "resolution": r, "upstream_key": cfg.key(),
              "device": device}
    meta = {"model": spec.name, "spec": spec.to_dict(), "resolution": r, "num_classes": k,
            "class_names": splits.train.class_names, "backend": cfg.backend, "key": cfg.key(),
            "config": cfg.model_dump(mode="json"), "data": splits.summary(), "metrics": metrics}
    if cfg.objective is not None:  # the header says which objective made it; no classifier in it
        meta.update(num_classes=0, class_names=None, objective=cfg.objective.key_data())
    ckpt = Checkpoint(be.weights(model) if cfg.objective is None else saved, meta)
    if out is not None:
        # the file keeps the objective's own parameters too ([mask] embedding, head); loading drops them
        ckpt.path = save_checkpoint(out, {**ckpt.weights, **(objective_params if cfg.objective else {})}, meta)
        config["checkpoint"] = str(ckpt.path)
    splits.warn_skipped()
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
    safe = re.sub(r"[^A-Za-z0-9+.-]+", "_", cfg.spec.name)
    return cache_dir(directory) / f"{safe}-{cfg.backend}-{cfg.key()}.safetensors"


def ensure_upstream(cfg: PretrainConfig, *, directory: str | Path | None = None, device: str = "cpu",
                    threads: int | None = None,
                    batch_option: str = "batch_size") -> tuple[Checkpoint, Record | None]:
    """The cached upstream checkpoint for `cfg`, pre-training it first if absent (`batch_option`: see
    `pretrain`).

    Returns (checkpoint, the pretrain record if it was trained now else None).
    """
    path = cache_path(cfg, directory)
    with locked(path, what="the checkpoint cache" + ("" if directory else f" (${CACHE_ENV})")):
        if path.is_file():
            try:
                ckpt = load_checkpoint(path)
            except ConfigError as e:  # vitbench's own cache file, damaged or edited: say how to get past it
                raise ConfigError(f"{e}. It is the checkpoint cache's file of this pre-training: delete it, and "
                                  "the next run trains it again") from None
            if ckpt.meta.get("key") != cfg.key():  # another pre-training's file under this one's name (a copy):
                # its numbers were reported for this config (images_seen 48 for a --steps 4 run of batch 16)
                raise ConfigError(f"{path}: the checkpoint cache's file of this pre-training holds another one "
                                  f"(its key {clip(repr(ckpt.meta.get('key')), 40)}, not {cfg.key()!r}): "
                                  "delete it, and the next run trains it again")
            return ckpt, None
        record, ckpt = pretrain(cfg, device=device, threads=threads, out=path, directory=directory,
                                batch_option=batch_option)
        return ckpt, record


def resolve_upstream(upstream: PretrainConfig | None, checkpoint: str | None, *,
                     directory: str | Path | None = None, device: str = "cpu", threads: int | None = None,
                     budget: tuple[int | None, float | None] = (None, None),
                     objective: Objective | None = Objective.SUPERVISED,
                     model: str | None = None) -> tuple[Checkpoint, Record | None]:
    """A downstream task's starting point: an explicit checkpoint file of any origin (with its declared
    pre-training budget: images, epochs; refused unless made by `objective`, None: by any (inspect reads an
    encoder's attention, whatever trained it); `model`: the architecture of a file of another origin, checked
    against its weights -- a timm state dict names none -- None: inferred), else the cached/trained upstream."""
    from vitbench.transfer.checkpoint import with_budget

    if checkpoint:
        ckpt = load_checkpoint(checkpoint, model)
        if objective is not None:
            require_objective(ckpt.meta, Objective(objective), f"checkpoint {checkpoint!r}")
        return with_budget(ckpt, *budget), None
    if upstream is None:
        raise ConfigError("a downstream task needs `upstream` (a pre-training config) or `checkpoint` (a "
                          "checkpoint file: vitbench's, a timm .safetensors state dict or a vit_jax .npz)")
    return ensure_upstream(upstream, directory=directory, device=device, threads=threads)


def upstream_metrics(ckpt: Checkpoint) -> dict:
    """What a downstream row carries about its upstream: pre-training compute (the paper's x-axis) etc."""
    m = ckpt.meta.get("metrics", {})
    out = {
        "exaflops": m.get("exaflops"),  # pre-training compute, exaFLOPs (Figure 5 / Table 6)
        "pretrain_images_seen": m.get("images_seen"),
        "pretrain_epochs": m.get("epochs"),
        "upstream_accuracy": m.get("accuracy"),
        "params_m": m.get("params_m"),
    }
    # a distilled upstream: its compute split (exaflops includes the teacher's forward) and its teacher
    out.update({k: m[k] for k in ("student_exaflops", "teacher_exaflops", "teacher_accuracy",
                                  "teacher_train_accuracy", "teacher_agreement") if k in m})
    return out


def upstream_config(ckpt: Checkpoint) -> dict:
    return {"upstream_key": ckpt.meta.get("key"), "upstream_backend": ckpt.meta.get("backend"),
            "upstream_resolution": ckpt.resolution, "upstream_checkpoint": str(ckpt.path) if ckpt.path else None,
            "upstream": ckpt.meta.get("config"), "flavour": ckpt.spec.flavour.to_dict()}
