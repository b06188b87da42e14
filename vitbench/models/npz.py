"""Original vit_jax / big_vision / big_transfer .npz checkpoints: reading and writing without pickle, the
file layouts' names mapped to vitbench's Flax names, and fitting a file's arrays to a model's params.

Security: checkpoints are read with np.load(allow_pickle=False); a file that needs pickle is refused.
"""

from __future__ import annotations

import io
import math
import re
import zipfile
from pathlib import Path

import numpy as np

from vitbench.errors import ConfigError, UnsafeFileError
from vitbench.models.param_table import flatten, unflatten
from vitbench.models.posemb_resize import is_posemb_key, resize_table
from vitbench.models.specs import ModelSpec, get_spec
from vitbench.paths import write_atomic


# Keys of a checkpoint converted by flax's convert_pre_linen (linen per-class counters) -> the original
# (pre-linen, global counter) names the files on gs://vit_models use and vitbench's Flax models use.
_LINEN_TO_FILE = {"MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1", "LayerNorm_1": "LayerNorm_2",
                  "MlpBlock_0": "MlpBlock_3"}


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Read a '/'-keyed .npz checkpoint into {key: array} without ever unpickling."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"checkpoint {str(path)!r} does not exist (or is not a file)")
    if not zipfile.is_zipfile(path):  # np.load would take anything else for a pickle
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable .npz file (not a zip archive)")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except ValueError as e:
        if "allow_pickle" in str(e):  # numpy: "Object arrays cannot be loaded when allow_pickle=False"
            raise UnsafeFileError(f"checkpoint {str(path)!r} holds pickled objects; refused "
                                  f"(only plain numeric arrays are loaded): {e}") from e
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable .npz file: {e}") from e  # a torn header
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable .npz file: {e}") from e


def pre_logits_width(path: str | Path) -> int | None:
    """The width of a vit_jax .npz file's tanh pre-logits layer (its pre-training representation head: the
    `representation_size` of the original ImageNet-21k files), read from that one array; None without one."""
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            return int(z["pre_logits/bias"].shape[-1]) if "pre_logits/bias" in z.files else None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, IndexError):
        return None  # load_npz says what is wrong with the file


def save_npz(path: str | Path, params: dict) -> None:
    """Write Flax params as a vit_jax-style .npz (flattened '/'-joined keys, float32 numpy arrays)."""
    flat = {k: np.asarray(v) for k, v in flatten(dict(params)).items()}
    buf = io.BytesIO()
    np.savez(buf, **flat)
    write_atomic(path, buf.getvalue())  # nothing half-written under the final name


# The original BiT files (gs://bit_models/BiT-*.npz) keep big_transfer's TensorFlow names; big_vision's
# bit_paper.maybe_convert_big_transfer_format maps them to the layout vitbench's Flax BiT uses:
# unit groups a/b/c -> gn1+conv1 / gn2+conv2 / gn3+conv3, a/proj -> conv_proj, the final group_norm ->
# norm-pre-head, head/conv2d (1,1,C,K) -> head (C,K).
_BIT_TF_UNIT = re.compile(r"^resnet/(block\d)/(unit\d+)/(a|b|c)/(proj/)?(standardized_conv2d|group_norm)(_\d+)?/"
                          r"(kernel|gamma|beta)$")
_BIT_TF_TOP = {"resnet/root_block/standardized_conv2d/kernel": "root_block/conv_root/kernel",
               "resnet/group_norm/gamma": "norm-pre-head/scale", "resnet/group_norm/beta": "norm-pre-head/bias",
               "resnet/head/conv2d/kernel": "head/kernel", "resnet/head/conv2d/bias": "head/bias"}
_TF_LEAF = {"kernel": "kernel", "gamma": "scale", "beta": "bias"}


def _from_big_transfer_names(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for k, v in flat.items():
        if k in _BIT_TF_TOP:
            out[_BIT_TF_TOP[k]] = v[0, 0] if k == "resnet/head/conv2d/kernel" and v.ndim == 4 else v
            continue
        m = _BIT_TF_UNIT.match(k)
        if m is None:
            out[k] = v  # left as is: the fit check names it
            continue
        block, unit, group, proj, kind, _, leaf = m.groups()
        n = "abc".index(group) + 1
        layer = "conv_proj" if proj else (f"conv{n}" if kind == "standardized_conv2d" else f"gn{n}")
        out[f"{block}/{unit}/{layer}/{_TF_LEAF[leaf]}"] = v
    return out


def _canonical_keys(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Keys of every known file layout -> the original vit_jax / big_vision names vitbench's Flax models use."""
    if any(k.startswith("resnet/") for k in flat):
        return _from_big_transfer_names(flat)
    if not any("MultiHeadDotProductAttention_0" in k for k in flat):
        return flat
    out = {}
    for k, v in flat.items():
        parts = k.split("/")
        out["/".join(_LINEN_TO_FILE.get(p, p) if "encoderblock_" in k else p for p in parts)] = v
    return out


def params_from_checkpoint(flat: dict[str, np.ndarray], template: dict, *, new_head: bool = False,
                           source: str = "checkpoint", method: str = "bilinear") -> dict:
    """Fit a flat checkpoint to `template` (the target model's params, or just their shapes from
    jax.eval_shape) and return nested float32 numpy params.

    - GroupNorm scale/bias stored as (1,1,1,C) are squeezed; position embeddings of another grid are resampled
      (class token kept; every kind, see posemb_resize); names from linen-converted files are mapped back to the
      original ones.
    - new_head=True: the paper's fine-tuning head swap -- drop `pre_logits` (if the target has none) and take
      a zero-initialised `head` of the template's shape (the paper's fine-tuning head); otherwise the head
      must match.
    Anything else that does not match raises ConfigError naming the keys.
    """
    flat = _canonical_keys({k: np.asarray(v) for k, v in flat.items()})
    want = {k: v for k, v in flatten(dict(template)).items()}
    if new_head:
        flat = {k: v for k, v in flat.items() if not k.startswith("head/")}
        if not any(k.startswith("pre_logits/") for k in want):
            flat = {k: v for k, v in flat.items() if not k.startswith("pre_logits/")}
    missing = sorted(k for k in want if k not in flat and not (new_head and k.startswith("head/")))
    extra = sorted(k for k in flat if k not in want)
    if missing or extra:
        more = lambda ks: f"{ks[:6]}{' ...' if len(ks) > 6 else ''}"  # noqa: E731
        raise ConfigError(f"{source} does not fit the model: missing {more(missing)}, unexpected {more(extra)}. "
                          "Check the model name (e.g. ViT-B/16 vs ViT-B/32), or use new_head for a checkpoint "
                          "with another head.")
    out: dict[str, np.ndarray] = {}
    for k, ref in want.items():
        if k not in flat:  # the new head, zero-initialised (ViT paper, fine-tuning)
            out[k] = np.zeros(ref.shape, np.float32)
            continue
        v = flat[k]
        if v.shape != ref.shape:
            if is_posemb_key(k) and v.shape[-1] == ref.shape[-1]:
                prefix = ("cls" in want) + ("dist" in want)  # class (+ distillation) tokens' embeddings kept
                v = resize_table(k.rsplit("/", 1)[-1], v, ref.shape, prefix, method, source)
            elif v.size == math.prod(ref.shape):  # e.g. GroupNorm (1,1,1,C) -> (C,)
                v = v.reshape(ref.shape)
            else:
                raise ConfigError(f"{source}: {k} has shape {v.shape}, the model expects {ref.shape}")
        out[k] = v.astype(np.float32)
    return unflatten(out)


def load_vit_jax_npz(path: str | Path, spec: ModelSpec | str, resolution: int | None = None,
                     num_classes: int | None = None, *, new_head: bool = False,
                     representation_size: int | None = None, method: str = "bilinear") -> dict:
    """Load an original vit_jax (or big_vision / big_transfer BiT) .npz into params for
    `build_flax_model(spec, resolution, num_classes)`; see `params_from_checkpoint` for what is adapted.

    The params compute the checkpoint's function only in a model of the origin's flavour, e.g.
    `spec.with_origin("vit_jax")`; `vitbench.models.checkpoints.load_pretrained` returns that spec with them."""
    import jax
    import jax.numpy as jnp

    from vitbench.models.flax import build_flax_model

    spec = get_spec(spec)
    resolution = spec.resolution if resolution is None else resolution
    model = build_flax_model(spec, resolution, num_classes, representation_size=representation_size)
    x = jax.ShapeDtypeStruct((1, resolution, resolution, 3), jnp.float32)
    template = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)["params"]  # shapes only: no compile
    return params_from_checkpoint(load_npz(path), template, new_head=new_head, source=str(path), method=method)
