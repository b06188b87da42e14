"""The teacher of a distilled pre-training (DeiT, Touvron et al. 2021; vitbench.transfer.distill): its fields from
flat options (study fields, CLI options), its model when only a checkpoint names it, its weights on the student's
backend, and what a distilled row says about it (docs/distillation.md).

Its config, `TeacherConfig`, stays beside `PretrainConfig` in vitbench.protocols.pretrain: the two are one
recursive type (a teacher's upstream is a PretrainConfig, a PretrainConfig's teacher a TeacherConfig). This module
is below pretrain.py (which imports it): a teacher pre-trained here is pre-trained by pretrain.py's cache first and
handed to `load_teacher` as its checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vitbench.errors import ConfigError
from vitbench.transfer.checkpoint import Checkpoint, read_meta
from vitbench.transfer.distill import DEFAULT_LAMBDA, DEFAULT_TAU, Distillation, Teacher
from vitbench.transfer.masked_patch import Objective, objective_of

if TYPE_CHECKING:
    from vitbench.protocols.pretrain import TeacherConfig


def teacher_fields(recipe: dict, teacher: str | None, *, checkpoint: str | None = None,
                   resolution: int | None = None, steps: int | None = None, seed: int = 0,
                   distillation: Distillation | str = Distillation.HARD, lam: float = DEFAULT_LAMBDA,
                   tau: float = DEFAULT_TAU) -> dict | None:
    """A TeacherConfig's fields from flat options (study fields, CLI options): the teacher's weights (its
    `checkpoint`, else its pre-training with the student's `recipe`: PretrainConfig fields other than model,
    resolution, steps, seed, teacher) and the loss. None without a teacher."""
    if teacher is None:
        return None
    loss = {"distillation": distillation, "lam": lam, "tau": tau}
    if checkpoint:
        return {**loss, "checkpoint": checkpoint, "model": teacher}
    return {**loss, "upstream": {**recipe, "model": teacher, "resolution": resolution, "steps": steps,
                                 "seed": seed}}


def teacher_model(teacher: str | None, checkpoint: str | None,
                  names: tuple[str, str] = ("teacher", "teacher_checkpoint")) -> str | None:
    """The teacher's model: `teacher` when given; else, beside a teacher `checkpoint`, the model a vitbench
    checkpoint's header names; any other file (a timm state dict) does not say it, so it is asked for (a
    ConfigError naming the file and both fields, exit 2), never guessed nor the file dropped. None without
    either (no teacher). `names`: how the caller spells (teacher, checkpoint): study fields or CLI options."""
    teacher_name, checkpoint_name = names
    if checkpoint and Path(checkpoint).expanduser().is_file():
        refuse_unsupervised(checkpoint, checkpoint_name)
    if teacher is not None or not checkpoint:
        return teacher
    from vitbench.errors import clip
    from vitbench.transfer.checkpoint import checkpoint_spec

    if not Path(checkpoint).expanduser().is_file():
        raise ConfigError(f"{checkpoint_name} {clip(checkpoint, 200)!r} does not exist (or is not a file)")
    spec = checkpoint_spec(checkpoint)
    if spec is None:
        raise ConfigError(f"{checkpoint_name} {clip(checkpoint, 200)}: its weights do not say their model (not a "
                          f"vitbench checkpoint): name it with {teacher_name} NAME (a timm state dict: "
                          f"{teacher_name} timm:NAME)")
    return spec.name


def refuse_unsupervised(checkpoint: str, name: str) -> None:
    """A checkpoint pre-trained without labels (masked_patch, none) cannot teach: it has no classifier. Said from
    its header (vitbench's), before its weights are read: they fit no classifier, which said less."""
    from vitbench.errors import clip

    try:
        meta = read_meta(checkpoint)
    except ConfigError:  # not a safetensors file: loading it says what it is
        return
    got = objective_of(meta) if meta is not None else Objective.SUPERVISED
    if got is not Objective.SUPERVISED:
        raise ConfigError(f"{name} {clip(checkpoint, 200)}: pre-trained with objective {got.value!r}, so it has "
                          "no classifier, and a teacher teaches with its classifier's outputs: give a supervised "
                          "checkpoint (objective: supervised, the default of `vitbench pretrain`)")


def load_teacher(cfg: TeacherConfig, backend, class_names: list[str], *, upstream: Checkpoint | None = None
                 ) -> Teacher:
    """The teacher of `cfg` on the student's `backend`: `upstream`, the checkpoint of `cfg.upstream` (the caller
    pre-trains it first through the cache: vitbench.protocols.pretrain, above this module), or read from
    `cfg.checkpoint`."""
    from vitbench.transfer import distill

    if cfg.upstream is not None:
        if upstream is None:
            raise ValueError("a teacher with an upstream config needs its checkpoint (protocols.pretrain."
                             "ensure_upstream)")
        return distill.load_teacher(backend, upstream.weights, upstream.spec, upstream.resolution,
                                    upstream.num_classes, upstream.meta.get("class_names"), class_names,
                                    pretrain_exaflops=upstream.meta.get("metrics", {}).get("exaflops"),
                                    source=str(upstream.path))
    from vitbench.models.checkpoints import load_pretrained

    refuse_unsupervised(cfg.checkpoint, "teacher.checkpoint")  # before its weights: they fit no classifier
    p = load_pretrained(cfg.checkpoint, cfg.model)
    from vitbench.transfer.checkpoint import check_finite_weights

    check_finite_weights(p.weights, f"the teacher's checkpoint {cfg.checkpoint!r}")
    if p.num_classes is None:
        raise ConfigError(f"the teacher's checkpoint {cfg.checkpoint!r} has no classification head")
    from vitbench.models.flavours import Origin

    meta = (read_meta(p.path) or {}) if p.origin is Origin.VITBENCH else {}  # its header: weights read once
    return distill.load_teacher(backend, p.weights, p.spec, p.resolution, p.num_classes, meta.get("class_names"),
                                class_names, pretrain_exaflops=meta.get("metrics", {}).get("exaflops"),
                                source=str(p.path))


def teacher_metrics(teacher: Teacher, be, student_test_logits: np.ndarray, train_logits: np.ndarray, splits,
                    images_seen: int) -> dict:
    """What a distilled row says about its teacher: its cost in this run, its own cost and how good it is
    (`train_logits`: the teacher's on the training set, as the student was taught; `student_test_logits`: the
    student's on the test split)."""
    from vitbench.transfer import ops
    from vitbench.transfer.distill import agreement

    test = splits.test
    t_logits = ops.predict_all(be, teacher.model, test, teacher.resolution, "the teacher's agreement")
    return {
        "teacher_gflops_per_image": teacher.forward_flops() / 1e9,  # forward, per image seen
        "teacher_exaflops": teacher.forward_flops() * images_seen / 1e18,  # included in `exaflops`
        "teacher_pretrain_exaflops": teacher.pretrain_exaflops,  # not included: the teacher is given
        "teacher_accuracy": ops.top1(t_logits, test.labels),
        # on the images the student trains on: the share of hard-distillation targets that are the true labels
        "teacher_train_accuracy": ops.top1(train_logits, splits.train.labels),
        "teacher_agreement": agreement(student_test_logits, t_logits),  # test split
        "teacher_model": teacher.spec.name,
        "teacher_resolution": teacher.resolution,
    }
