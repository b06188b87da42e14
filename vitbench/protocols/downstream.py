"""What few-shot evaluation and fine-tuning share, declared once: where the upstream comes from (a pre-training
config, or a checkpoint file with its declared budget), which backend runs, the downstream data and resolution."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vitbench.backends.base import BackendName, default_backend
from vitbench.transfer.checkpoint import Checkpoint
from vitbench.transfer.config import MAX_COUNT, DataConfig, key_neutral
from vitbench.transfer.masked_patch import Objective
from vitbench.protocols.pretrain import PretrainConfig, resolve_upstream

DOWNSTREAM_DATA = DataConfig(name="digits", classes=[5, 6, 7, 8, 9])  # disjoint from the upstream half


class DownstreamConfig(BaseModel):
    """The fields FewshotConfig and FinetuneConfig share (in this order, first: their dumps, and so the keys of
    their records and caches, are those of the classes before this base existed)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    upstream: PretrainConfig | None = None
    checkpoint: str | None = None  # an explicit checkpoint file instead of `upstream` (any origin)
    # its model (a timm: name for a timm state dict; None: inferred); left out of the dump when unset (dumps as before)
    checkpoint_model: str | None = key_neutral()
    checkpoint_images: int | None = Field(None, gt=0)  # its declared pre-training budget: images ...
    # ... x epochs (exaFLOPs of a checkpoint of another origin)
    checkpoint_epochs: float | None = Field(None, gt=0)
    objective: Objective = Objective.SUPERVISED  # what `checkpoint` must have been pre-trained with
    backend: BackendName | None = None  # run on this backend (None: the upstream's)
    data: DataConfig = DOWNSTREAM_DATA
    resolution: int | None = Field(None, ge=1, le=MAX_COUNT)  # None: the upstream's; larger: pos-embed interpolation

    def start(self, *, directory: str | Path | None = None, device: str = "cpu",
              threads: int | None = None) -> tuple[Checkpoint, str]:
        """(the upstream checkpoint: the file given, else cached or pre-trained here; the backend that runs)."""
        ckpt, _ = resolve_upstream(self.upstream, self.checkpoint, directory=directory, device=device,
                                   threads=threads, budget=(self.checkpoint_images, self.checkpoint_epochs),
                                   objective=self.objective, model=self.checkpoint_model)
        return ckpt, self.backend or ckpt.meta.get("backend") or default_backend()

    def recorded(self) -> dict:
        """The fields a record's config keeps of this config: `data` and the subclass's own. The upstream is
        recorded as what it resolved to (protocols.pretrain.upstream_config), the model, backend and resolution
        as the run used them."""
        return self.model_dump(mode="json", exclude=set(DownstreamConfig.model_fields) - {"data"})
