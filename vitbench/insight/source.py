"""What to inspect: a vitbench upstream checkpoint or a variant name (random weights), and which images."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vitbench.errors import ConfigError, VitbenchError, shorten
from vitbench.insight.applies import require_inspectable
from vitbench.models.families import family_plugin
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


def load_source(arg: str, init_weights: InitWeights, resolution: int | None = None,
                model: str | None = None) -> ModelSource:
    """`arg` names an existing file or ends in .safetensors or .npz: a checkpoint of any origin, read by the
    loader every command uses (vitbench.transfer.checkpoint; never unpickled; `model`: its model, which a timm
    state dict does not say, checked against its weights); else a variant name, with `init_weights` giving
    random weights at the requested (or native) resolution."""
    if not arg.strip():
        raise ConfigError("SOURCE is empty; give a checkpoint file or a model name (see `vitbench models`)")
    path = Path(arg).expanduser()
    if path.is_dir():
        raise ConfigError(f"SOURCE {shorten(arg)} is a directory; give a checkpoint file (.safetensors, .npz) "
                          "or a model name")
    ckpt = load_checkpoint(arg, model) if path.exists() or arg.endswith((".safetensors", ".npz")) else None
    if model and ckpt is None:
        raise ConfigError(f"--model {shorten(model)} names a checkpoint's model; SOURCE {shorten(arg)} is no "
                          "checkpoint file (a model name goes in SOURCE alone)")
    spec = ckpt.spec if ckpt else get_spec(arg)  # a checkpoint's spec carries its flavour (GELU, std-conv form)
    require_inspectable(spec)
    trained = ckpt.resolution if ckpt else spec.resolution if resolution is None else resolution
    res = trained if resolution is None else resolution
    try:
        spec.check_resolution(res)
    except VitbenchError as e:
        raise ConfigError(f"--resolution: {e}") from None
    plugin = family_plugin(spec.family)
    if ckpt and res != trained and plugin.axis_layers is not None:
        raise ConfigError(f"--resolution {res}: {spec.name}'s weights are sized by its grid (position and "
                          f"relative tables); inspect this checkpoint at its trained resolution, -r {trained}")
    if ckpt:
        weights = with_head(ckpt.weights, spec, trained, init_weights)
        return ModelSource(spec, weights, res, trained, str(ckpt.path))
    return ModelSource(spec, init_weights(spec, res), res, res, "random init")


def inspection_images(num_images: int, resolution: int, data: DataConfig | None = None) -> np.ndarray:
    """The first `num_images` test images of `data` (default: the offline digits, all classes), preprocessed as
    for training (resized to `resolution`, values in [-1, 1]), NHWC float32."""
    test = load_splits(data or DataConfig()).test
    if num_images < 1:
        raise ConfigError(f"--images must be >= 1, got {num_images}")
    return test.batch(np.arange(min(num_images, len(test))), resolution)[0]


def with_head(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
              init_weights: InitWeights) -> dict[str, np.ndarray]:
    """`weights` with a zero head where the loader dropped it (a checkpoint of another origin is read as for
    transfer, head removed; attention does not depend on the head, but a model is built whole)."""
    from vitbench.models.checkpoints import is_head

    if any(is_head(k) for k in weights):
        return weights
    fresh = init_weights(spec, resolution)
    return {**weights, **{k: np.zeros_like(v) for k, v in fresh.items() if is_head(k)}}
