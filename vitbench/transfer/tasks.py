"""Study tasks `pretrain`, `fewshot`, `finetune` (registered in vitbench.trial's task registry).

How a study expresses the upstream: every transfer trial carries the same flat `pretrain_*` / `upstream_*`
parameters; they define a `PretrainConfig` whose hash keys a checkpoint cache (vitbench.transfer.pretrain:
$VITBENCH_CHECKPOINT_DIR, else ./results/checkpoints, shared by all studies since the key is the content).
The first trial that needs an upstream pre-trains it (inside that trial, under a file lock) and later trials
reuse it, so a study can list [pretrain, fewshot, finetune] as a task axis, or only the downstream tasks.
Downstream rows carry the upstream's compute (`pretrain_exaflops`, also as `exaflops`) and images seen, so
`vitbench report` plots accuracy vs pre-training compute (paper Figure 5) and tabulates them (Table 6).

Trial fields used: model, backend, task, device, seed (upstream init + fine-tuning seed), threads; fewshot and
finetune also use `resolution` (the downstream resolution; larger than the upstream's => position-embedding
interpolation) and finetune `batch_size`.
"""

from __future__ import annotations

from typing import Literal

from vitbench.transfer.config import parse_floats, validated
from vitbench.trial import register_task

_BACKEND = Literal["torch", "jax"]

# The upstream: identical names and defaults in all three tasks, so their caches line up.
UPSTREAM_PARAMS = {
    "upstream_dataset": (Literal["digits", "synthetic", "folder", "cifar10", "cifar100", "npz"], "digits"),
    "upstream_path": (str | None, None),
    "upstream_classes": (str | None, "0-4"),  # 'a-b' or 'a,b,c'; None: all classes
    "upstream_train_per_class": (int | None, None),  # cap on upstream images per class (data-size axis)
    "data_seed": (int, 0),  # split seed (up- and downstream), separate from the model seed
    "pretrain_backend": (_BACKEND | None, None),  # None: the trial's backend
    "pretrain_resolution": (int | None, None),  # None: the variant's native resolution
    "pretrain_steps": (int, 300),
    "pretrain_batch_size": (int, 64),
    "pretrain_lr": (float, 1e-3),
    "pretrain_weight_decay": (float, 0.1),
    "pretrain_warmup_steps": (int, 30),
    "pretrain_decay": (Literal["linear", "cosine"], "linear"),
    "label_smoothing": (float, 0.0),
}
DOWNSTREAM_PARAMS = {
    "dataset": (Literal["digits", "synthetic", "folder", "cifar10", "cifar100", "npz"], "digits"),
    "data_path": (str | None, None),
    "classes": (str | None, "5-9"),
    "train_per_class": (int | None, None),
    "val_fraction": (float, 0.1),  # held out of train: the fine-tuning LR choice / few-shot L2 choice
}
FEWSHOT_PARAMS = {
    "shots": (int, 10),  # paper: 1, 5, 10, 25 (an axis)
    "fewshot_seeds": (int, 5),
    "l2_reg": (float | None, None),  # None: chosen on the val split
}
FINETUNE_PARAMS = {
    "finetune_steps": (int, 100),
    "lr_grid": (str, "0.001,0.003,0.01,0.03"),  # comma-separated; paper App. B.1.1
    "finetune_warmup_steps": (int, 10),
    "refit": (bool, True),
}


def _validate(cls, data: dict, task: str):
    return validated(cls, data, f"task {task!r}")


def _upstream(c: dict, task: str):
    from vitbench.transfer.pretrain import PretrainConfig

    data = {"name": c["upstream_dataset"], "path": c["upstream_path"], "classes": c["upstream_classes"],
            "seed": c["data_seed"], "train_per_class": c["upstream_train_per_class"]}
    return _validate(PretrainConfig, {
        "model": c["model"], "backend": c["pretrain_backend"] or c["backend"], "data": data,
        "resolution": c["pretrain_resolution"], "batch_size": c["pretrain_batch_size"],
        "steps": c["pretrain_steps"], "lr": c["pretrain_lr"], "weight_decay": c["pretrain_weight_decay"],
        "warmup_steps": c["pretrain_warmup_steps"], "decay": c["pretrain_decay"],
        "label_smoothing": c["label_smoothing"], "seed": c["seed"]}, task)


def _downstream_data(c: dict) -> dict:
    return {"name": c["dataset"], "path": c["data_path"], "classes": c["classes"], "seed": c["data_seed"],
            "train_per_class": c["train_per_class"], "val_fraction": c["val_fraction"]}


def pretrain_task(c: dict) -> dict:
    """Pre-train the upstream (or reuse the cached one) and report its upstream accuracy and compute."""
    from vitbench.env import environment
    from vitbench.record import make_record
    from vitbench.transfer.pretrain import ensure_upstream

    cfg = _upstream(c, "pretrain")
    ckpt, record = ensure_upstream(cfg, device=c["device"], threads=c["threads"])
    if record is not None:
        record["metrics"]["cached"] = False
        return record
    meta = ckpt.meta  # trained by an earlier trial: report what it measured then
    metrics = {**meta.get("metrics", {}), "cached": True}
    config = {**meta.get("config", {}), "checkpoint": str(ckpt.path), "upstream_key": meta.get("key")}
    return make_record("pretrain", config, metrics=metrics, env=environment({"backend": cfg.backend}))


def fewshot_task(c: dict) -> dict:
    from vitbench.transfer.fewshot import FewshotConfig, fewshot

    cfg = _validate(FewshotConfig, {
        "upstream": _upstream(c, "fewshot"), "backend": c["backend"], "data": _downstream_data(c),
        "resolution": c["resolution"], "shots": [c["shots"]], "seeds": c["fewshot_seeds"],
        "l2_reg": "auto" if c["l2_reg"] is None else c["l2_reg"]}, "fewshot")
    rec = fewshot(cfg, device=c["device"], threads=c["threads"])
    _compute_aliases(rec)
    rec["metrics"].pop("shots", None)  # the trial's `shots` parameter already says it
    return rec


def finetune_task(c: dict) -> dict:
    from vitbench.transfer.finetune import FinetuneConfig, finetune

    grid = parse_floats(c["lr_grid"], "task 'finetune': lr_grid", "0.001,0.003,0.01,0.03")
    cfg = _validate(FinetuneConfig, {
        "upstream": _upstream(c, "finetune"), "backend": c["backend"], "data": _downstream_data(c),
        "resolution": c["resolution"], "steps": c["finetune_steps"], "batch_size": c["batch_size"],
        "lr_grid": grid, "warmup_steps": c["finetune_warmup_steps"], "refit": c["refit"],
        "seed": c["seed"]}, "finetune")
    rec = finetune(cfg, device=c["device"], threads=c["threads"])
    _compute_aliases(rec)
    return rec


def _compute_aliases(rec: dict) -> None:
    """Downstream rows: the x-axis of Figure 5 under the names the report reads."""
    m = rec["metrics"]
    m["pretrain_exaflops"] = m.get("exaflops")
    m["images_seen"] = m.get("pretrain_images_seen")


_COMMON = ("model", "backend", "task", "device", "seed", "threads")
register_task("pretrain", pretrain_task, kind="pretrain", fields=_COMMON, params=UPSTREAM_PARAMS,
              description="small-scale upstream pre-training (Adam, warm-up + decay); cached checkpoint, "
                          "upstream accuracy, images seen, exaFLOPs")
register_task("fewshot", fewshot_task, kind="fewshot", fields=(*_COMMON, "resolution"),
              params={**UPSTREAM_PARAMS, **DOWNSTREAM_PARAMS, **FEWSHOT_PARAMS},
              description="linear few-shot accuracy of the frozen upstream (closed-form least squares)")
register_task("finetune", finetune_task, kind="finetune", fields=(*_COMMON, "resolution", "batch_size"),
              params={**UPSTREAM_PARAMS, **DOWNSTREAM_PARAMS, **FINETUNE_PARAMS},
              description="fine-tuning accuracy (SGD momentum, cosine, clip 1, zero head, LR grid on val)")
