"""Upstream checkpoints: safetensors weights + JSON metadata (model spec, training config, metrics).

Weights are stored in the timm/PyTorch parameter naming whatever backend trained them (the JAX engine
converts through vitbench.models.convert), so a torch-pretrained checkpoint fine-tunes in JAX and back.
The metadata lives both inside the .safetensors header (so the file is self-describing) and in a readable
`<name>.json` beside it. Loading never unpickles: safetensors only.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vitbench.errors import ConfigError, UnsafeFileError, VitbenchWarning, clip
from vitbench.paths import write_atomic
from vitbench.transfer.checkpoint_header import check_fits, check_meta

FORMAT = "vitbench-checkpoint-1"


@dataclass
class Checkpoint:
    weights: dict[str, np.ndarray]  # timm naming, float32 (integer and boolean buffers in their own dtype)
    meta: dict  # {"format", "model", "spec", "resolution", "num_classes", "config", "metrics", ...}
    path: Path | None = None

    @property
    def model(self) -> str:
        return self.meta["model"]

    @property
    def spec(self):
        """The model it computes, flavour included (its stored spec; the table's row for older checkpoints)."""
        from vitbench.models.specs import get_spec, spec_from_dict

        stored = self.meta.get("spec")
        return spec_from_dict(stored, str(self.path or "checkpoint")) if stored else get_spec(self.model)

    @property
    def resolution(self) -> int:
        return int(self.meta["resolution"])

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])


SUFFIX = ".safetensors"


def checkpoint_path(out: str | Path, default_name: str, what: str = "checkpoint") -> Path:
    """Where a checkpoint named `out` is written: a directory (existing, or written with a trailing slash) gets
    `default_name` inside it; a name without a suffix gets .safetensors; any other suffix (x.pt) is refused, as
    checkpoints are safetensors only. The location must be writable (checked now, nothing created); `what`
    names it in messages (the option, `--out`)."""
    from vitbench.paths import check_file

    text = str(out)
    p = Path(out).expanduser()
    if not text.strip():
        raise ConfigError(f"{what} is empty; give a file name ending in {SUFFIX} or a directory")
    if p.exists() and not p.is_dir() and not p.is_file():
        raise ConfigError(f"{what} {text!r} is not a regular file (a device or a pipe); give a file name "
                          f"ending in {SUFFIX} or a directory")
    if p.is_dir() or text.endswith(("/", os.sep)):
        p = p / default_name
    elif p.suffix == "":
        p = p.with_name(p.name + SUFFIX)
    elif p.suffix != SUFFIX:
        raise ConfigError(f"{what} {text!r}: {_not_written(p)}")
    check_file(p, what)
    check_file(p.with_suffix(".json"), f"{what} (its metadata)")
    return p


def _not_written(p: Path) -> str:
    """Why a checkpoint is not written at `p` (a suffix other than .safetensors), and the name to give instead."""
    from vitbench.models.checkpoints import PICKLE_SUFFIXES

    suffix, ours = p.suffix.lower(), repr(p.stem + SUFFIX)
    written = f"vitbench writes checkpoints as {SUFFIX}, each with its metadata .json beside it"
    if suffix == ".json":
        return (f".json is the name of a checkpoint's metadata file, written beside its {SUFFIX} weights; "
                f"name the checkpoint {ours} (its metadata: {p.name!r})")
    if suffix == ".npz":
        return f"{written}; .npz checkpoints (vit_jax / big_vision) are read but not written; name it {ours}"
    why = f", never as pickles ({p.suffix} files usually are)" if suffix in PICKLE_SUFFIXES else ""
    return f"{written}{why}; name it {p.name + SUFFIX!r} or {ours}"


def check_replaceable(path: Path, what: str) -> None:
    """A checkpoint is written at `path` and its metadata beside it only over vitbench checkpoint files (an earlier
    run's, replaced by the new one): any other file there, a user's config.json say, is refused naming it
    (ConfigError) before anything runs, never overwritten."""
    for f, ours in ((path, _our_weights), (path.with_suffix(".json"), _our_meta)):
        if os.path.lexists(f) and not ours(f):
            raise ConfigError(f"{what} {str(path)!r}: {str(f)!r} exists and is not a vitbench checkpoint file; "
                              "nothing is written over a file vitbench did not write: move it, or name another "
                              f"{what}")
    if os.path.lexists(path):  # an earlier run's: replaced, and said before anything runs (it may be wanted)
        warnings.warn(f"{what} {str(path)!r} holds an earlier vitbench checkpoint: this run replaces it when it "
                      f"ends (name another {what} to keep it)", VitbenchWarning, stacklevel=2)


def _our_meta(f: Path) -> bool:
    try:
        doc = json.loads(f.read_text()) if f.is_file() and not f.is_symlink() else None
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("format") == FORMAT


def _our_weights(f: Path) -> bool:
    if not f.is_file() or f.is_symlink():
        return False
    try:
        return _header(f)[0] is not None  # a vitbench header of this format (_header checks it)
    except ConfigError:  # not a safetensors file, or a header not ours: either way not replaceable
        return False


def save_checkpoint(path: str | Path, weights: dict[str, np.ndarray], meta: dict) -> Path:
    """Write `<path>` (.safetensors; see `checkpoint_path`) and `<path minus suffix>.json` atomically (never
    half-written). Returns the path written."""
    from safetensors.numpy import save

    path = checkpoint_path(path, f"{meta.get('model', 'checkpoint')}{SUFFIX}".replace("/", "_"))
    check_finite_weights(weights, f"checkpoint {str(path)!r}", "not written")
    meta = {"format": FORMAT, **meta}
    text = json.dumps(meta, sort_keys=True, default=str)
    from vitbench.models.param_table import weight_array

    # a 0-d array stays 0-d (np.ascontiguousarray made it (1,): the checkpoint no longer fit its model)
    arrays = {k: np.asarray(weight_array(v, k, str(path)), order="C") for k, v in weights.items()}
    return write_pair(path, save(arrays, metadata={"vitbench": text}), meta)


def write_pair(path: Path, weights: bytes, meta: dict) -> Path:
    """Write a checkpoint's weights `<path>` and metadata `<path minus suffix>.json`: the weights are written
    whole beside their place first, then the metadata, then the weights renamed into place, so the weights file,
    what a cache looks for, is there only once the pair is whole, and a write that fails (a full disk) leaves an
    old pair there as it was, the error naming the file (paths.PathError)."""
    side = path.with_suffix(".json")
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # (write_atomic's pattern: a killed one's is swept)
    write_atomic(staged, weights)  # whole or not at all; PathError names it (an old pair there is untouched)
    try:
        write_atomic(side, json.dumps(meta, indent=2, sort_keys=True, default=str).encode())
        os.replace(staged, path)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return path


def check_finite_weights(weights: dict[str, np.ndarray], source: str, done: str = "not loaded") -> None:
    """ConfigError when a tensor of `weights` holds NaN or infinity: such weights compute nothing meaningful,
    so no command reads them and none writes them (`done` says which)."""
    bad = [k for k, v in weights.items() if not np.isfinite(np.asarray(v, np.float32)).all()]
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise ConfigError(f"{source}: {len(bad)} of {len(weights)} tensors hold NaN or infinite values "
                          f"(or values past float32's range, {np.finfo(np.float32).max:.3g}) ({shown}); {done}")


def read_meta(path: str | Path) -> dict | None:
    """The vitbench metadata of a .safetensors checkpoint from its header alone (no tensor is read); None for a
    file without it (weights of another origin). A header that contradicts the weights it describes (an edited
    one: `check_fits`) is a ConfigError naming the file and the field, never read as what it says."""
    path = Path(path).expanduser()
    meta, shapes = _header(path)
    if meta is not None:
        check_fits(meta, shapes, path)
    return meta


def _header(path: Path) -> tuple[dict | None, dict[str, tuple[int, ...]]]:
    """The vitbench metadata of a .safetensors file (None without it), its fields that commands read checked
    (`check_meta`), and its tensors' shapes ({} without it): the file's header alone."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            header = f.metadata() or {}
            names = f.keys() if "vitbench" in header else ()
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names}
    except Exception as e:  # safetensors raises its own error types for corrupt headers
        raise ConfigError(f"{path}: not a readable safetensors file ({e})") from e
    if "vitbench" not in header:
        return None, {}
    try:
        meta = json.loads(header["vitbench"])
    except (json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(f"{path}: unreadable vitbench metadata ({str(e)[:200]})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: its vitbench metadata is a JSON {type(meta).__name__}, not an object")
    if meta.get("format") != FORMAT:
        raise ConfigError(f"{path}: checkpoint format {clip(repr(meta.get('format')), 60)}; this vitbench reads "
                          f"{FORMAT!r}")
    check_meta(meta, path)
    return meta, shapes


def load_checkpoint(path: str | Path, model: str | None = None) -> Checkpoint:
    """Read a checkpoint: one written by `save_checkpoint` (`vitbench pretrain`), or weights of another origin
    (a timm `.safetensors` state dict, an original vit_jax / big_vision / big_transfer `.npz`; read by
    vitbench.models.checkpoints, which infers the model unless `model` names it, and sets its flavour).
    Pickle-based formats (.pt/.pth/.ckpt/...) are refused."""
    from safetensors import safe_open

    from vitbench.models.checkpoints import PICKLE_SUFFIXES, check_weights, written_shapes
    from vitbench.models.param_table import NotARealWeight, weight_array

    path = Path(path).expanduser()
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise UnsafeFileError(f"{path}: pickle-based checkpoints are not loaded (they can run code); "
                              "use a .safetensors checkpoint written by `vitbench pretrain`")
    if not path.is_file():
        state = ("is a directory, not a checkpoint file" if path.is_dir() else
                 "is not a regular file (a device, a pipe or a broken link)" if os.path.lexists(path) else
                 "does not exist")
        raise ConfigError(f"checkpoint {str(path)!r} {state}; expected a .safetensors file written by "
                          "`vitbench pretrain`, a timm .safetensors state dict or a vit_jax .npz")
    if path.suffix.lower() != SUFFIX:
        return _foreign(path, model)
    meta = read_meta(path)  # the header first: a file of another origin is read once, by its own reader
    if meta is None:
        return _foreign(path, model)
    try:
        with safe_open(str(path), framework="numpy") as f:
            weights = {k: weight_array(f.get_tensor(k), k, str(path)) for k in f.keys()}  # noqa: SIM118
    except NotARealWeight as e:
        raise ConfigError(str(e)) from None
    except Exception as e:  # safetensors raises its own error types for corrupt files
        raise ConfigError(f"{path}: not a readable safetensors file ({e})") from e
    check_finite_weights(weights, str(path))
    weights = written_shapes(weights)
    from vitbench.transfer.masked_patch import Objective, is_objective_key, objective_of

    # a masked-patch (or untrained) checkpoint: its encoder (no classifier) is what transfers; the objective's
    # own parameters ([mask] embedding, prediction head) stay in the file and are not loaded
    encoder_only = objective_of(meta) is not Objective.SUPERVISED
    weights = {k: v for k, v in weights.items() if not (encoder_only and is_objective_key(k))}
    ckpt = Checkpoint(weights, meta, path)
    check_weights(weights, ckpt.spec, source=f"{path}: the weights",  # metadata naming another model's weights
                  ignore_head=encoder_only)
    return ckpt


def _foreign(path: Path, model: str | None) -> Checkpoint:
    """A checkpoint of another origin, head dropped (the transfer protocols attach their own); a vit_jax file's
    tanh pre-logits layer kept where no model was asked (it is then the model with that `rep_size`)."""
    from vitbench.models.arch import arch_value
    from vitbench.models.checkpoints import load_pretrained
    from vitbench.models.npz import pre_logits_width

    p = load_pretrained(path, model, new_head=True)
    width = pre_logits_width(path) if model is None and path.suffix.lower() == ".npz" else None
    if width and not arch_value(p.spec, "rep_size"):  # few-shot reads the pre-logits representation (the paper,
        p = load_pretrained(path, p.spec.with_overrides(rep_size=width), new_head=True)  # big_vision): kept
    check_finite_weights(p.weights, str(path))
    meta = {"format": FORMAT, **p.meta(), "num_classes": p.num_classes or p.spec.num_classes, "metrics": {},
            "config": None, "backend": None}
    return Checkpoint(p.weights, meta, path)


def with_budget(ckpt: Checkpoint, images: int | None, epochs: float | None) -> Checkpoint:
    """Fill a checkpoint's pre-training compute from a declared budget (dataset images x epochs) when it does
    not know its own (a checkpoint of another origin): paper's accounting, 3 x forward FLOPs per image seen."""
    metrics = ckpt.meta.setdefault("metrics", {})
    if metrics.get("exaflops") is not None or images is None or epochs is None:
        return ckpt
    from vitbench.models.analytic import analytic_counts, pretrain_exaflops

    seen = images * epochs  # passed as one epoch of `seen` images: the product rounded as it always was
    metrics.update(images_seen=seen, epochs=epochs,
                   exaflops=pretrain_exaflops(ckpt.spec, seen, 1.0, ckpt.resolution, ckpt.num_classes),
                   params_m=analytic_counts(ckpt.spec, ckpt.resolution, ckpt.num_classes).params / 1e6)
    return ckpt


def checkpoint_spec(path: str | Path):
    """The architecture a vitbench checkpoint stores, read from its header alone (no tensor read); None for a
    file that is not one (weights of another origin: their model is inferred when they are loaded)."""
    path = Path(path).expanduser()
    if path.suffix.lower() != SUFFIX or not path.is_file():
        return None
    meta = read_meta(path)
    if meta is None:
        return None
    from vitbench.models.specs import get_spec, spec_from_dict

    return spec_from_dict(meta["spec"], str(path)) if meta.get("spec") else get_spec(meta["model"])


def trained_resolution(path: str | Path, model: str | None = None) -> int | None:
    """The resolution a checkpoint was trained at: a vitbench checkpoint's header says it; weights of another
    origin are read for it (their position embedding), once per file and model while the file is unchanged.
    None: no such file (its own check names it)."""
    path = Path(path).expanduser()
    try:
        st = path.stat()
    except OSError:
        return None
    return _trained_resolution(str(path), st.st_size, st.st_mtime_ns, model)


@functools.lru_cache(maxsize=32)
def _trained_resolution(path: str, size: int, mtime_ns: int, model: str | None) -> int:
    meta = read_meta(path) if path.lower().endswith(SUFFIX) else None
    return int(meta["resolution"]) if meta is not None else load_checkpoint(path, model).resolution


def architecture_differences(have, want) -> list[str]:
    """How the architecture `have` (a checkpoint's ModelSpec) differs from the requested `want`: a different row,
    or each override field whose value differs, as 'field: checkpoint X, requested Y'; [] when they are one."""
    from vitbench.models.overrides import field_of, render_value

    if have.base_row().name != want.base_row().name:
        return [f"model: checkpoint {have.base_row().name}, requested {want.base_row().name}"]
    keys = dict.fromkeys([*have.overrides, *want.overrides])
    return [f"{k}: checkpoint {render_value(getattr(have.arch, field_of(k)))}, requested "
            f"{render_value(getattr(want.arch, field_of(k)))}" for k in keys
            if getattr(have.arch, field_of(k)) != getattr(want.arch, field_of(k))]


def refuse_other_architecture(have, want, source: str) -> None:
    """ConfigError when the checkpoint's architecture `have` is not the requested `want`, naming the fields."""
    differ = architecture_differences(have, want)
    if differ:
        raise ConfigError(f"{source}: the checkpoint holds {have.name}, not the requested {want.name} "
                          f"({'; '.join(differ[:6])}): give the model the checkpoint was trained as, or another "
                          "checkpoint")
