"""Self-supervised pre-training by masked patch prediction (ViT paper Sec. 4.6, Appendix B.1.2): what both
backends share -- the objective's settings, the corruption (drawn by one numpy RNG, so every backend sees the
same masks), the targets, the prediction head's initial weights and the compute.

Corruption (BERT-style, as B.1.2): in every image, round(mask_rate x N) of the N patch positions are chosen
(without replacement); each chosen position, independently, gets the learnable [mask] embedding (80 %), the
embedding of another random patch (10 %: any other patch position of any image in the batch) or is left
unchanged (10 %). The replacement happens on the patch embeddings, before the position embeddings are added;
the loss is computed on the chosen ("corrupted") positions only.

Targets (from the image in [0, 1], i.e. the [-1, 1] model input mapped back; a patch = the pixels under one
token: P x P for a ViT, stride x stride for a hybrid):
- `mean_color`: each channel's mean over the patch quantised to 3 bits (8 levels: min(floor(8 v), 7)), one class
  r*64 + g*8 + b of 512 (the paper's default and best).
- `color_grid`: the patch average-pooled to a 4x4 grid (near-equal bins when the patch is not a multiple of 4),
  each cell a 3-bit colour as above: 16 predictions of 512 classes.
- `pixels_l2`: the whole patch (P x P x 3 values in [0, 1], HWC order), regressed with a mean squared error.
Grey images (digits) are replicated to 3 channels by the data loader (vitbench.transfer.preprocess), so
their colours are r = g = b: only 8 of the 512 classes occur.

Prediction head: one Dense (D -> outputs) on the encoder's output tokens at the corrupted positions (after the
final LayerNorm); its and the [mask] embedding's initial values come from numpy (normal, std 0.02; bias 0), so
both backends start equal. The encoder's own classifier is not used and not saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from vitbench.choices import Choice
from vitbench.errors import ConfigError
from vitbench.models.families import ModelAttention, family_plugin

DEFAULT_MASK_RATE = 0.5  # ViT paper B.1.2: "corrupting 50 % of patch embeddings"
KIND_P = (0.8, 0.1, 0.1)  # B.1.2 (as BERT): [mask] embedding, another random patch, unchanged
COLOR_BITS = 3  # B.1.2: "3bit mean color (i.e., 512 colors in total)"
LEVELS = 2 ** COLOR_BITS
CLASSES = LEVELS ** 3  # 512
GRID = 4  # B.1.2: "predicting a 4 x 4 downsized version of the 16 x 16 patch"
INIT_STD = 0.02  # [mask] embedding and head init, as the position embeddings' (ViT paper App. B)
PREFIX = "masked_patch."  # checkpoint keys of the objective's own parameters ([mask] embedding, head)
MASK_KEY, HEAD_W, HEAD_B = PREFIX + "mask_token", PREFIX + "head.weight", PREFIX + "head.bias"


class Objective(Choice):
    """What pre-training optimises."""

    SUPERVISED = "supervised"  # softmax cross-entropy on the upstream labels (distillation is a variant of it)
    MASKED_PATCH = "masked_patch"  # masked patch prediction, no labels (ViT paper Sec. 4.6)
    NONE = "none"  # no pre-training: the encoder at its random initialisation ("from scratch"), 0 FLOPs


class Target(Choice):
    MEAN_COLOR = "mean_color"
    COLOR_GRID = "color_grid"
    PIXELS_L2 = "pixels_l2"


class MaskedPatch(BaseModel):
    """The masked-patch objective's settings (the one declaration: the study fields and CLI options read it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mask_rate: float = Field(DEFAULT_MASK_RATE, gt=0, le=1)  # share of patch positions corrupted per image
    target: Target = Target.MEAN_COLOR

    def key_data(self) -> dict:
        return {"objective": Objective.MASKED_PATCH.value, **self.model_dump(mode="json")}


class Scratch(BaseModel):
    """No pre-training: the upstream is the randomly initialised encoder (the paper's "from scratch" baseline)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    objective: Literal["none"] = "none"  # tells it apart from MaskedPatch in a PretrainConfig's JSON

    def key_data(self) -> dict:
        return {"objective": Objective.NONE.value}


def _objective_tag(v: Any) -> str:
    """Which alternative of an `objective` setting `v` is (so a bad value is reported against that one only)."""
    obj = v.get("objective") if isinstance(v, dict) else getattr(v, "objective", None)
    return "none" if obj == Objective.NONE.value else "masked_patch"


# a PretrainConfig's `objective` (None: supervised), told apart by its tag rather than by trying each alternative
UpstreamObjective = Annotated[Annotated[MaskedPatch, Tag("masked_patch")] | Annotated[Scratch, Tag("none")],
                              Discriminator(_objective_tag)]


def objective_of(meta: dict) -> Objective:
    """The objective a vitbench checkpoint's header names (older checkpoints and foreign files: supervised)."""
    obj = (meta or {}).get("objective") or {}
    return Objective(obj.get("objective", Objective.SUPERVISED.value))


def require_objective(meta: dict, wanted: Objective, where: str) -> None:
    """Refuse a checkpoint made by another objective than `wanted` (a ConfigError: exit 2)."""
    got = objective_of(meta)
    if got is not wanted:
        raise ConfigError(f"{where}: this checkpoint was pre-trained with objective {got.value!r}, "
                          f"{wanted.value!r} was asked for (set objective: {got.value} to use it"
                          + (", as an encoder only: it has no classifier)" if got is not Objective.SUPERVISED
                             else ")"))


def is_objective_key(key: str) -> bool:
    """A checkpoint key of the objective's own parameters (not the encoder's)."""
    return key.startswith(PREFIX)


# ---------------------------------------------------------------------------------------------
# Geometry, head size, compute
# ---------------------------------------------------------------------------------------------
def sequence(spec) -> ModelAttention:
    """The token sequence the objective corrupts, as `spec`'s family answers for this model (its prefix tokens,
    the tokens' width): one sequence of patch tokens over the whole image, after a patch embedding. A ConfigError
    naming the model and why for one without (a CNN; attention over windows, stages or axes)."""
    att = family_plugin(spec.family).attention_of(spec)
    if not att.token_maps or att.prefix_tokens is None or not att.token_width:
        why = ("it has no attention layers" if not att.layers else
               "its attention is not over one sequence of patch tokens (windows, stages or axes)")
        raise ConfigError(f"objective masked_patch needs a transformer over one sequence of patch tokens (a patch "
                          f"embedding, prefix tokens, blocks: a ViT, a hybrid, a ViT-like model); {spec.name} has "
                          f"none: {why}")
    return att


def geometry(spec, resolution: int) -> tuple[int, int]:
    """(tokens per image N, patch side in pixels) of a ViT-like model at `resolution` (see `sequence`)."""
    sequence(spec)
    side = resolution // spec.stride
    return side * side, spec.stride


def outputs(target: Target, patch: int) -> int:
    """Width of the prediction head's output per position."""
    return {Target.MEAN_COLOR: CLASSES, Target.COLOR_GRID: GRID * GRID * CLASSES,
            Target.PIXELS_L2: patch * patch * 3}[target]


def num_masked(mp: MaskedPatch, n: int) -> int:
    """Corrupted positions per image: round(mask_rate x N), at least 1."""
    return max(1, int(round(mp.mask_rate * n)))


def train_flops_per_image(spec, resolution: int, mp: MaskedPatch) -> float:
    """Training FLOPs per image seen: 3 x forward (forward + backward) x 2 FLOPs per MAC, of the encoder (without
    a classifier) plus the prediction head on the corrupted positions."""
    from vitbench.models.analytic import FLOPS_PER_MAC, TRAIN_FLOPS_PER_FORWARD, analytic_counts

    n, p = geometry(spec, resolution)
    head_macs = num_masked(mp, n) * sequence(spec).token_width * outputs(mp.target, p)
    return TRAIN_FLOPS_PER_FORWARD * FLOPS_PER_MAC * (analytic_counts(spec, resolution, 0).macs + head_macs)


def init_head(spec, resolution: int, mp: MaskedPatch, seed: int) -> dict[str, np.ndarray]:
    """The objective's parameters at step 0 (float32, torch layout: head.weight (out, D))."""
    rng = np.random.default_rng([seed, 0x6D50])
    _, p = geometry(spec, resolution)
    d, o = sequence(spec).token_width, outputs(mp.target, p)
    return {MASK_KEY: (rng.standard_normal(d) * INIT_STD).astype(np.float32),
            HEAD_W: (rng.standard_normal((o, d)) * INIT_STD).astype(np.float32),
            HEAD_B: np.zeros(o, np.float32)}


# ---------------------------------------------------------------------------------------------
# Corruption
# ---------------------------------------------------------------------------------------------
MASK, RANDOM, KEEP = 0, 1, 2


@dataclass(frozen=True)
class Corruption:
    """One batch's corruption. `positions` (B, M) int32: the corrupted positions of each image (the loss's);
    `kind` (B, M): MASK / RANDOM / KEEP; `source` (B, N) int32: for every token, the flat index (b * N + i) of
    the patch embedding it takes (itself unless RANDOM); `use_mask` (B, N) float32: 1 where the [mask]
    embedding replaces it."""

    positions: np.ndarray
    kind: np.ndarray
    source: np.ndarray
    use_mask: np.ndarray


def draw(rng: np.random.Generator, batch: int, n: int, mp: MaskedPatch) -> Corruption:
    """One batch's corruption from `rng` (see the module doc)."""
    m = num_masked(mp, n)
    positions = np.argsort(rng.random((batch, n)), axis=1)[:, :m].astype(np.int32)
    kind = rng.choice(3, size=(batch, m), p=KIND_P).astype(np.int8)
    source = np.arange(batch * n, dtype=np.int64).reshape(batch, n)
    use_mask = np.zeros((batch, n), np.float32)
    rows = np.repeat(np.arange(batch), m).reshape(batch, m)
    use_mask[rows[kind == MASK], positions[kind == MASK]] = 1.0
    rb, rp = rows[kind == RANDOM], positions[kind == RANDOM]
    if batch * n > 1 and len(rb):  # another patch: uniform over the batch's other B*N - 1 positions
        own = rb * n + rp
        other = rng.integers(0, batch * n - 1, size=len(rb))
        source[rb, rp] = other + (other >= own)
    return Corruption(positions, kind, source.astype(np.int32), use_mask)


def corruptions(seed: int):
    """The RNG every backend draws its batches' corruptions from, in step order."""
    return np.random.default_rng([seed, 0x6D70])


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------
def quantise(v: np.ndarray) -> np.ndarray:
    """Values in [0, 1] (..., 3) -> 3-bit colour classes r*64 + g*8 + b (...,)."""
    q = np.clip(np.floor(v * LEVELS), 0, LEVELS - 1).astype(np.int64)
    return q[..., 0] * LEVELS * LEVELS + q[..., 1] * LEVELS + q[..., 2]


def patches(images: np.ndarray, patch: int) -> np.ndarray:
    """(B, r, r, C) -> (B, N, patch, patch, C), N in row-major token order."""
    b, r, _, c = images.shape
    g = r // patch
    x = images[:, :g * patch, :g * patch].reshape(b, g, patch, g, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, g * g, patch, patch, c)


def _pool(p: np.ndarray, cells: int) -> np.ndarray:
    """(..., P, P, C) average-pooled to (..., cells, cells, C) over near-equal bins."""
    bins = np.array_split(np.arange(p.shape[-2]), cells)
    rows = np.stack([p[..., b, :, :].mean(-3) for b in bins], -3)
    return np.stack([rows[..., b, :].mean(-2) for b in bins], -2)


def targets(images: np.ndarray, positions: np.ndarray, patch: int, target: Target) -> np.ndarray:
    """Targets at the corrupted `positions` (B, M) of NHWC model inputs in [-1, 1]: int64 (B, M) classes
    (mean_color), int64 (B, M, 16) classes (color_grid) or float32 (B, M, P*P*3) values in [0, 1] (pixels_l2)."""
    x = (np.asarray(images, np.float32) + 1.0) / 2.0  # the data loader's [-1, 1] back to [0, 1]
    p = np.take_along_axis(patches(x, patch), positions[:, :, None, None, None].astype(np.int64), axis=1)
    if target is Target.MEAN_COLOR:
        return quantise(p.mean(axis=(-3, -2)))
    if target is Target.COLOR_GRID:
        g = _pool(p, GRID)
        return quantise(g.reshape(*g.shape[:2], GRID * GRID, 3))
    return p.reshape(*p.shape[:2], -1).astype(np.float32)


@dataclass(frozen=True)
class Batch:
    """What a backend's masked-patch step takes (numpy; the images NHWC in [-1, 1])."""

    images: np.ndarray
    corruption: Corruption
    targets: np.ndarray


def batches(data, resolution: int, batch_size: int, steps: int, seed: int, spec, mp: MaskedPatch):
    """Every step's Batch, in order: the images as supervised pre-training draws them (batch_indices), the
    corruption from the shared RNG, the targets at its positions."""
    from vitbench.transfer.data import batch_indices

    n, p = geometry(spec, resolution)
    order = batch_indices(len(data), batch_size, steps, seed)
    rng = corruptions(seed)
    for x, _ in data.steps(order, resolution):  # decoded ahead (data.workers), in order
        c = draw(rng, len(x), n, mp)
        yield Batch(x, c, targets(x, c.positions, p, mp.target))


def pretrain_encoder(be, spec, splits, resolution: int, cfg) -> tuple:
    """Masked-patch pre-training of `spec` on `splits.train`'s images (labels unused) with `cfg`
    (a PretrainConfig whose `objective` is set): (model, the encoder's weights without a classifier, the
    objective's parameters under PREFIX, loss per step, training FLOPs per image seen)."""
    from vitbench.models.identify import is_head

    mp = cfg.objective
    model = be.init_model(spec, resolution, 1, cfg.seed)  # a 1-class classifier, never trained nor saved
    init = init_head(spec, resolution, mp, cfg.seed)
    model, head, losses = be.train_masked_patch(
        model, batches(splits.train, resolution, cfg.batch_size, cfg.steps, cfg.seed, spec, mp), cfg.optim(), mp,
        init, sequence(spec).prefix_tokens)
    weights = {k: v for k, v in be.weights(model).items() if not is_head(k, spec)}
    return model, weights, head, losses, train_flops_per_image(spec, resolution, mp)
