"""Task `pretrain`: small-scale upstream pre-training, cached by content (records of kind 'pretrain')."""

from __future__ import annotations

from vitbench.backends.base import Capability
from vitbench.record import Record
from vitbench.tasks import FRACTION, Metric, Task, register_task
from vitbench.tasks.fields import params_model
from vitbench.tasks.upstream import SHARED, Upstream


@register_task
class Pretrain(Task):
    name = "pretrain"
    kind = "pretrain"
    Params = params_model("PretrainParams", SHARED, Upstream)
    description = ("small-scale upstream pre-training (Adam, warm-up + decay); cached checkpoint, upstream "
                   "accuracy, images seen, exaFLOPs")
    needs = frozenset({Capability.TRANSFER})
    metrics = (Metric("accuracy", FRACTION, True, "upstream test accuracy (0..1)"),
               Metric("exaflops", "exaFLOPs", False, "pre-training compute (3 x forward FLOPs x images seen)"))
    headline = "accuracy"

    @classmethod
    def headline_of(cls, rec) -> str | None:
        """An upstream of another objective (masked_patch, none) has no classifier, so no accuracy: its row
        holds its compute (`pretrain --objective masked_patch` exited 1, "measured no accuracy")."""
        return "exaflops" if rec.measured_config.get("objective") else cls.headline

    def run(self, p) -> Record:
        from vitbench.env import environment
        from vitbench.protocols.pretrain import ensure_upstream

        cfg = p.upstream_config(self.name)
        ckpt, record = ensure_upstream(cfg, device=p.device, threads=p.threads,
                                       batch_option=p.name_of("pretrain_batch_size"))
        if record is not None:
            record.metrics["cached"] = False
            return record
        meta = ckpt.meta  # trained by an earlier trial: report what it measured then
        config = {**meta.get("config", {}), "checkpoint": str(ckpt.path), "upstream_key": meta.get("key")}
        return Record.measured(self.kind, config, metrics={**meta.get("metrics", {}), "cached": True},
                               env=environment({"backend": cfg.backend}))
