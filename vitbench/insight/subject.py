"""What to inspect: a vitbench upstream checkpoint or a variant name (random weights), and which images."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vitbench.errors import ConfigError, VitbenchError, shorten
from vitbench.insight.applies import require_inspectable
from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec
from vitbench.transfer.checkpoint import Checkpoint
from vitbench.transfer.data import DataConfig, load_splits

RANDOM_INIT = "random init"  # the origin of weights no checkpoint gave
InitWeights = Callable[[ModelSpec, int], dict[str, np.ndarray]]  # (spec, resolution) -> random timm weights


@dataclass(frozen=True)
class ModelSource:
    spec: ModelSpec
    weights: dict[str, np.ndarray]  # timm naming
    resolution: int  # the input size to inspect at
    trained_resolution: int  # the size the weights were made for (position embeddings resampled when different)
    origin: str  # checkpoint path, or RANDOM_INIT


def checkpoint_file(arg: str) -> Path | None:
    """The checkpoint file `arg` names (an existing file, or a name ending in .safetensors or .npz: read by the
    loader every command uses, vitbench.transfer.checkpoint, never unpickled), None for a variant name; an empty
    argument or a directory is a ConfigError."""
    if not arg.strip():
        raise ConfigError("SOURCE is empty; give a checkpoint file or a model name (see `vitbench models`)")
    path = Path(arg).expanduser()
    if path.is_dir():
        raise ConfigError(f"SOURCE {shorten(arg)} is a directory; give a checkpoint file (.safetensors, .npz) "
                          "or a model name")
    return path if path.exists() or arg.endswith((".safetensors", ".npz")) else None


def _at(spec: ModelSpec, resolution: int) -> int:
    require_inspectable(spec)
    try:
        spec.check_resolution(resolution)
    except VitbenchError as e:
        raise ConfigError(f"--resolution: {e}") from None
    return resolution


def checkpoint_source(ckpt: Checkpoint, resolution: int | None, init_weights: InitWeights) -> ModelSource:
    """What to inspect of a loaded checkpoint of any origin (its spec carries its flavour: GELU, std-conv form),
    at `resolution` (None: the one it was trained at; another: position embeddings resampled as for
    fine-tuning, except where a family sizes its weights by the grid), its head zeroed where the loader dropped
    it."""
    spec, trained = ckpt.spec, ckpt.resolution
    res = _at(spec, trained if resolution is None else resolution)
    if res != trained and family_plugin(spec.family).attention_maps.axis_layers is not None:
        raise ConfigError(f"--resolution {res}: {spec.name}'s weights are sized by its grid (position and "
                          f"relative tables); inspect this checkpoint at its trained resolution, -r {trained}")
    return ModelSource(spec, with_head(ckpt.weights, spec, trained, init_weights), res, trained, str(ckpt.path))


def random_source(spec: ModelSpec, resolution: int, init_weights: InitWeights) -> ModelSource:
    """A variant's random initialisation (`init_weights`) at `resolution`."""
    res = _at(spec, resolution)
    return ModelSource(spec, init_weights(spec, res), res, res, RANDOM_INIT)


def inspection_images(num_images: int, resolution: int, data: DataConfig | None = None) -> np.ndarray:
    """The first `num_images` test images of `data` (default: the offline digits, all classes), preprocessed as
    for training (resized to `resolution`, values in [-1, 1]), NHWC float32."""
    test = load_splits(data or DataConfig()).test
    if not 1 <= num_images <= len(test):  # more was capped in silence: -n 100000 averaged 450
        raise ConfigError(f"--images must be 1 to {len(test)} (the {test.source} test split's images), got "
                          f"{num_images}")
    return test.batch(np.arange(num_images), resolution)[0]


def with_head(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
              init_weights: InitWeights) -> dict[str, np.ndarray]:
    """`weights` with a zero head where the loader dropped it (a checkpoint of another origin is read as for
    transfer, head removed; attention does not depend on the head, but a model is built whole)."""
    from vitbench.models.checkpoints import is_head

    if any(is_head(k) for k in weights):
        return weights
    fresh = init_weights(spec, resolution)
    return {**weights, **{k: np.zeros_like(v) for k, v in fresh.items() if is_head(k)}}
