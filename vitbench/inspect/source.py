"""What to inspect: a vitbench upstream checkpoint or a variant name (random weights), and which images."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vitbench.errors import ConfigError
from vitbench.models.specs import ModelSpec, get_spec
from vitbench.transfer.checkpoint import load_checkpoint
from vitbench.transfer.data import DataConfig, load_splits

InitWeights = Callable[[ModelSpec, int], dict[str, np.ndarray]]  # (spec, resolution) -> random timm weights


@dataclass(frozen=True)
class ModelSource:
    spec: ModelSpec
    weights: dict[str, np.ndarray]  # timm naming
    resolution: int  # the input size to inspect at
    trained_resolution: int  # the size the weights were made for (position embeddings resampled when different)
    origin: str  # checkpoint path, or "random init"


def load_source(arg: str, init_weights: InitWeights, resolution: int | None = None) -> ModelSource:
    """`arg` names an existing file or ends in .safetensors: a checkpoint (`vitbench pretrain`; never unpickled);
    else a variant name, with `init_weights` giving random weights at the requested (or native) resolution."""
    ckpt = load_checkpoint(arg) if Path(arg).expanduser().exists() or arg.endswith(".safetensors") else None
    spec = ckpt.spec if ckpt else get_spec(arg)  # a checkpoint's spec carries its flavour (GELU, std-conv form)
    if not spec.depth:
        raise ConfigError(f"{spec.name} has no attention layers to inspect; give a ViT or hybrid "
                          "(see `vitbench models --family vit|hybrid`)")
    trained = ckpt.resolution if ckpt else resolution or spec.resolution
    res = resolution or trained
    spec.check_resolution(res)
    if ckpt:
        return ModelSource(spec, ckpt.weights, res, trained, str(ckpt.path))
    return ModelSource(spec, init_weights(spec, res), res, res, "random init")


def inspection_images(num_images: int, resolution: int, data: DataConfig | None = None) -> np.ndarray:
    """The first `num_images` test images of `data` (default: the offline digits, all classes), preprocessed as
    for training (resized to `resolution`, values in [-1, 1]), NHWC float32."""
    test = load_splits(data or DataConfig()).test
    if num_images < 1:
        raise ConfigError(f"--images must be >= 1, got {num_images}")
    return test.batch(np.arange(min(num_images, len(test))), resolution)[0]
