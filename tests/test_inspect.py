"""vitbench.insight: attention distance, position-embedding similarity, filter components and rollout on inputs
with known answers; torch and JAX attention maps on the same weights; the `vitbench inspect` command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from vitbench.errors import ConfigError
from vitbench.insight import (
    InspectResult,
    Picture,
    TokenLayout,
    attention_rollout,
    embedding_filter_components,
    inspect_model,
    mean_attention_distance,
    posemb_similarity,
    prefix_attention_share,
    rollout_maps,
    to_markdown,
)
from vitbench.insight.distance import uniform_attention_distance_px
from vitbench.insight.posemb import adjacent_similarity
from vitbench.models.specs import get_spec
from tolerances_fp import EPS32, attention_distance_bound, forward_parity, rollout_bound
from tolerances_stat import gamma, svd_perturbation


def _mean_pairwise_px(h: int, w: int, s: float) -> float:
    """Independent reference: mean distance between patch centres over all ordered pairs (self-pairs included)."""
    cells = [(i, j) for i in range(h) for j in range(w)]
    return sum(s * math.hypot(a[0] - b[0], a[1] - b[1]) for a in cells for b in cells) / len(cells) ** 2


def _uniform(layout: TokenLayout, layers=2, images=3, heads=2, prefix_weight=0.0) -> np.ndarray:
    """Every query puts `prefix_weight` on the extra tokens and the rest evenly on all patches."""
    t, p, n = layout.num_tokens, layout.num_prefix_tokens, layout.num_patches
    row = np.zeros(t)
    row[:p] = prefix_weight / max(p, 1)
    row[p:] = (1 - prefix_weight) / n
    return np.broadcast_to(row, (layers, images, heads, t, t)).copy()


def _identity(layout: TokenLayout, layers=3, images=2, heads=2) -> np.ndarray:
    t = layout.num_tokens
    return np.broadcast_to(np.eye(t), (layers, images, heads, t, t)).copy()


def _distance_rtol(layout: TokenLayout, images: int) -> float:
    """Relative bound (float64) between the reference `_mean_pairwise_px` (N^2 positive terms: hypot, x stride,
    the sum, / N^2: N^2 + 2 roundings) and vitbench's distance of `_uniform` maps: entries (1 - w) / N (2
    roundings), each distance 5 (centre difference, square, sum of 2, sqrt), the weighted sum and the mass over N
    keys, the division, the mean over N queries and over the images."""
    n = layout.num_patches
    return gamma(n * n + 2) + gamma(3 * n + 8 + images)


def _share_atol(layout: TokenLayout, images: int) -> float:
    """Absolute bound of the prefix share (values <= 1): w / p (1 rounding), a sum over p prefix keys, a mean over
    images x N queries (one sum of that many terms, then a division)."""
    return gamma(2 + layout.num_prefix_tokens + images * layout.num_patches)


# ---- mean attention distance ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [TokenLayout(4, 4, 4), TokenLayout(3, 5, 8, 1), TokenLayout(2, 3, 16, 2)])
def test_uniform_attention_gives_the_mean_pairwise_patch_distance(layout):
    want = _mean_pairwise_px(layout.grid_h, layout.grid_w, layout.stride_px)
    assert uniform_attention_distance_px(layout) == pytest.approx(want, rel=_distance_rtol(layout, 0))
    for prefix_weight in (0.0, 0.3):  # the class token's share does not change where in the image a query looks
        d = mean_attention_distance(_uniform(layout, prefix_weight=prefix_weight), layout)
        assert d.shape == (2, 2)
        np.testing.assert_allclose(d, want, rtol=_distance_rtol(layout, 3))
        np.testing.assert_allclose(prefix_attention_share(_uniform(layout, prefix_weight=prefix_weight), layout),
                                   prefix_weight, rtol=0, atol=_share_atol(layout, 3))


def test_identity_attention_gives_distance_zero():
    layout = TokenLayout(4, 4, 4)
    np.testing.assert_array_equal(mean_attention_distance(_identity(layout), layout), 0.0)


def test_attention_to_the_right_neighbour_is_one_stride_where_there_is_one():
    layout = TokenLayout(3, 4, 8, 1)  # a hybrid-like 8 px token pitch
    p, h, w = layout.num_prefix_tokens, layout.grid_h, layout.grid_w
    a = np.zeros((1, 1, 1, layout.num_tokens, layout.num_tokens))
    a[..., :p, :p] = 1.0
    for i in range(h):
        for j in range(w):
            q = p + i * w + j
            a[..., q, q + 1 if j < w - 1 else q] = 1.0  # the last column attends to itself
    # exact: 0/1 weights, distances 8 and 0 (hypot of small integers x 8), sums of multiples of 8 and a mean
    # over 12 queries (72 / 12) are all exact in float64, as is 8 * 3 / 4
    np.testing.assert_array_equal(mean_attention_distance(a, layout), 8 * (w - 1) / w)


def test_attention_of_the_wrong_length_names_num_prefix_tokens():
    with pytest.raises(ConfigError, match="num_prefix_tokens"):
        mean_attention_distance(_uniform(TokenLayout(4, 4, 4, 2)), TokenLayout(4, 4, 4, 1))


# ---- rollout -------------------------------------------------------------------------------------------------
def test_identity_attention_rolls_out_to_the_identity():
    layout = TokenLayout(3, 3, 4)
    r = attention_rollout(_identity(layout))
    # exact: 0.5 * mean(1, 1) + 0.5 * 1, a division by the row sum 1 and products of 0/1 matrices round nothing
    np.testing.assert_array_equal(r, np.broadcast_to(np.eye(layout.num_tokens), r.shape))
    np.testing.assert_array_equal(rollout_maps(_identity(layout), layout), 0.0)  # class token stays put


def test_rollout_of_uniform_attention_mixes_residual_and_uniform_by_hand():
    layout = TokenLayout(2, 2, 4)
    t = layout.num_tokens
    u, eye = np.full((t, t), 1 / t), np.eye(t)
    # one layer: 0.5 U + 0.5 I; two: (0.5 U + 0.5 I)^2 = 0.75 U + 0.25 I, as U @ U = U
    # float64 bound: the maps' entries 1/t and (1 - 1/t) / 4 are off by <= 2 roundings (rollout_bound carries
    # that); each layer rounds the mean over 2 heads, + 0.5 I, the row sum of t, the division and the t-term
    # product (2 t + 4); the reference 1/t, 0.5 u + 0.5 I: 3
    def atol(layers):
        return rollout_bound(gamma(2), layers, t) + layers * gamma(2 * t + 4) + gamma(3)

    np.testing.assert_allclose(attention_rollout(_uniform(layout, layers=1, prefix_weight=1 / t))[0],
                               0.5 * u + 0.5 * eye, rtol=0, atol=atol(1))
    np.testing.assert_allclose(attention_rollout(_uniform(layout, layers=2, prefix_weight=1 / t))[0],
                               0.75 * u + 0.25 * eye, rtol=0, atol=atol(2))
    np.testing.assert_allclose(rollout_maps(_uniform(layout, layers=2, prefix_weight=1 / t), layout)[0],
                               np.full((2, 2), 0.75 / t), rtol=0, atol=atol(2))


# ---- position embeddings -------------------------------------------------------------------------------------
def test_sinusoid_position_embeddings_give_the_cosine_pattern_by_hand():
    """emb(r, c) = scale * [cos(a r), sin(a r), cos(b c), sin(b c)]: cosine similarity of (r, c) and (r', c')
    is (cos(a (r - r')) + cos(b (c - c'))) / 2, whatever the per-patch scale."""
    h, w, a, b = 4, 5, 0.7, 0.4
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=4)]  # the class token: any vector, left out
    for r in range(h):
        for c in range(w):
            rows.append(rng.uniform(0.5, 2.0) * np.array([np.cos(a * r), np.sin(a * r), np.cos(b * c),
                                                          np.sin(b * c)]))
    sim = posemb_similarity(np.array(rows)[None], TokenLayout(h, w, 4))
    # float64, values <= 1: each embedding entry rounds its argument a r (|d cos| <= eps a r <= 2.1 eps: 3), cos or
    # sin (1) and the scale (1); the norm (4 squares, 3 adds, sqrt) and the division 9 more: each unit-vector entry
    # within gamma(14), a 4-term dot of two of them gamma(2 x 14 + 4); the reference cos(a (r - r')) (argument 3,
    # cos 1, sum 1): gamma(5)
    atol = gamma(2 * 14 + 4 + 5)
    assert sim.shape == (h, w, h, w)
    for r in range(h):
        for c in range(w):
            for r2 in range(h):
                for c2 in range(w):
                    want = (math.cos(a * (r - r2)) + math.cos(b * (c - c2))) / 2
                    assert sim[r, c, r2, c2] == pytest.approx(want, rel=0, abs=atol)
    horizontal, vertical = h * (w - 1), (h - 1) * w  # adjacent pairs: (1 + cos b) / 2 and (cos a + 1) / 2
    want = (horizontal * (1 + math.cos(b)) / 2 + vertical * (1 + math.cos(a)) / 2) / (horizontal + vertical)
    # the mean over the pairs adds one rounding per pair; the reference's cosines, products, sums, division ~10
    assert adjacent_similarity(sim) == pytest.approx(want, rel=0, abs=atol + gamma(horizontal + vertical + 10))


# ---- embedding filters ---------------------------------------------------------------------------------------
def _svd_atols(x, roundings: int, planted, extra: float = 0.0) -> tuple[float, float]:
    """Absolute bounds on the recovered components' entries and on the variance ratios, for a float64 SVD of the
    centred (d, c p p) filters `x` whose exact rank-2 part has singular values `planted` (tests/tolerances_stat.py
    svd_perturbation, `extra`: a further ||E||). The planted basis and coefficients are orthonormal only to
    Householder QR's gamma(m n) (Higham, thm 19.4), of the largest singular value. Wedin: a component moves by
    sin(theta) <= e / gap (gap >= 1 here: 3 - 1 and 1 - 0; 2 - 1 and 1 - 0), its entries by <= 2 sin(theta);
    Weyl: s_i by <= e, so s_i^2 by <= 3 s_i e and each ratio s_i^2 / sum s^2 by <= 6 e sum(s) / sum(s^2), plus e^2
    per zero singular value."""
    xc = x - x.mean(0)
    s = np.asarray(planted, np.float64)
    e = svd_perturbation(xc, roundings) + gamma(xc.size) * float(s.max()) + extra
    v = float((s * s).sum())
    return 2 * e / 1.0, 6 * e * float(s.sum()) / v + min(xc.shape) * e * e / v


def test_filter_components_recover_planted_patterns_in_order():
    rng = np.random.default_rng(1)
    c, p, d = 3, 4, 64
    basis = np.linalg.qr(rng.normal(size=(c * p * p, 2)))[0].T  # two orthonormal patterns
    z = rng.normal(size=(d, 2))
    coef = np.linalg.qr(z - z.mean(0))[0] * np.array([3.0, 1.0])  # zero-mean, uncorrelated; the first 3x wider
    kernel = (coef @ basis + rng.normal(size=c * p * p)).reshape(d, c, p, p)  # + a common mean filter
    f = embedding_filter_components(kernel, k=5)
    # the kernel: a 2-term product, + noise (3 roundings), the mean over d = 64 filters and its subtraction (d + 1)
    vec_atol, ratio_atol = _svd_atols(kernel.reshape(d, -1), d + 4, [3.0, 1.0])
    assert f.images.shape == (5, p, p, c)
    got = f.images.transpose(0, 3, 1, 2).reshape(len(f.images), -1)
    for i in range(2):
        want = basis[i] * np.sign(basis[i][np.abs(basis[i]).argmax()])
        np.testing.assert_allclose(got[i], want, rtol=0, atol=vec_atol)
    np.testing.assert_allclose(f.variance_ratio[:2], [0.9, 0.1], rtol=0, atol=ratio_atol)  # 3^2 : 1^2
    np.testing.assert_allclose(f.variance_ratio[2:], 0.0, rtol=0, atol=ratio_atol)


def test_filter_components_of_grey_inputs_ignore_untrained_colour_differences():
    """Grey inputs train only each filter's channel sum: planted grey patterns are found under channel noise."""
    rng = np.random.default_rng(2)
    p, d = 4, 32
    basis = np.linalg.qr(rng.normal(size=(p * p, 2)))[0].T
    z = rng.normal(size=(d, 2))
    grey = (np.linalg.qr(z - z.mean(0))[0] * np.array([2.0, 1.0])) @ basis  # (D, P*P) channel sums
    noise = rng.normal(size=(d, 3, p * p)) * 5
    noise -= noise.mean(1, keepdims=True)  # colour differences only: they sum to 0 over channels
    kernel = (grey[:, None, :] / 3 + noise).reshape(d, 3, p, p)
    f = embedding_filter_components(kernel, k=3, sum_channels=True)
    # the channel sum: grey / 3 (1 rounding) and the centred noise (mean over 3, subtraction: 3) cancel to the grey
    # pattern only up to the noise's roundings, ~6 of max|noise| per entry (a further sqrt(m n) gamma(6) max|noise|
    # in norm), the sum over 3 channels 2, the mean over d filters and its subtraction d + 1
    summed = kernel.reshape(d, 3, -1).sum(1)
    vec_atol, ratio_atol = _svd_atols(summed, d + 3, [2.0, 1.0],
                                      extra=summed.size ** 0.5 * gamma(6) * float(np.abs(noise).max()))
    assert f.channels_summed and f.images.shape == (3, p, p, 1)
    for i in range(2):
        want = basis[i] * np.sign(basis[i][np.abs(basis[i]).argmax()])
        np.testing.assert_allclose(f.images[i].ravel(), want, rtol=0, atol=vec_atol)
    np.testing.assert_allclose(f.variance_ratio, [0.8, 0.2, 0.0], rtol=0, atol=ratio_atol)
    rgb = embedding_filter_components(kernel, k=3)  # the noise dominates the RGB components
    assert abs(rgb.images[0].transpose(2, 0, 1).reshape(3, -1).sum(0) @ basis[0]) < 0.5


# ---- inspect_model on a fake attention function (no framework) -----------------------------------------------
def _fake_weights(layout: TokenLayout, d: int = 8, patch: int = 4, grid: int | None = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    g = grid or layout.grid_h
    return {"pos_embed": rng.normal(size=(1, layout.num_prefix_tokens + g * g, d)).astype(np.float32),
            "patch_embed.proj.weight": rng.normal(size=(d, 3, patch, patch)).astype(np.float32),
            "head.weight": np.zeros((5, d), np.float32)}


def test_inspect_model_with_two_extra_tokens_and_resampled_position_embeddings():
    """A DeiT-like distillation token is a parameter; a checkpoint trained on a 8x8 grid is inspected on 4x4."""
    spec = get_spec("ViT-Nano/4")
    layout = TokenLayout.of(spec, 16, num_prefix_tokens=2)
    seen = []

    def uniform_fn(weights, spec_, resolution, images):
        seen.append((weights["pos_embed"].shape, spec_.num_classes, resolution, len(images)))
        return _uniform(layout, layers=spec_.arch.depth, images=len(images), heads=spec_.arch.heads,
                        prefix_weight=0.2)

    from vitbench.models.posemb_resize import resample_pos_embed

    weights = _fake_weights(layout, grid=8)
    images = np.zeros((5, 16, 16, 3), np.float32)
    r = inspect_model(weights, spec, 16, images, uniform_fn, num_prefix_tokens=2, num_rollout=3, batch_size=2)
    assert seen == [((1, 18, 8), 5, 16, 2), ((1, 18, 8), 5, 16, 2), ((1, 18, 8), 5, 16, 1)]
    assert r.posemb_grid_trained == (8, 8) and (r.layout.grid_h, r.layout.grid_w) == (4, 4)
    want = posemb_similarity(resample_pos_embed(weights["pos_embed"], 4, 8, num_prefix_tokens=2), layout)
    np.testing.assert_array_equal(r.posemb_similarity, want)  # the same functions on the same table: identical
    want = _mean_pairwise_px(4, 4, 4)
    np.testing.assert_allclose(r.attention_distance_px, want, rtol=_distance_rtol(layout, 5))
    np.testing.assert_allclose(r.prefix_attention_share, 0.2, rtol=0, atol=_share_atol(layout, 5))
    assert r.rollout.shape == (3, 4, 4) and r.rollout_images.shape == (3, 16, 16, 3)
    assert r.filters.channels_summed and r.filters.images.shape == (7, 4, 4, 1)  # grey inputs; D - 1 = 7 of 28
    colour = np.random.default_rng(0).normal(size=(1, 16, 16, 3)).astype(np.float32)
    rc = inspect_model(weights, spec, 16, colour, uniform_fn, num_prefix_tokens=2)
    assert not rc.filters.channels_summed and rc.filters.images.shape == (7, 4, 4, 3)
    doc = json.loads(json.dumps(r.to_json()))
    assert np.array(doc["attention_distance_px"]).shape == (spec.arch.depth, spec.arch.heads)
    assert np.array(doc["posemb_similarity"]).shape == (4, 4, 4, 4)
    # JSON keeps a float64 exactly (repr is the shortest string that reads back the same); the headline is the
    # mean over the heads of the distances above: one more rounding per head
    assert doc["headline"]["attention_distance_first_layer_px"] == pytest.approx(
        _mean_pairwise_px(4, 4, 4), rel=_distance_rtol(layout, 5) + gamma(spec.arch.heads))


def test_inspect_model_refuses_a_resnet_and_wrong_images():
    spec = get_spec("ViT-Nano/4")
    with pytest.raises(ConfigError, match="does not apply to R-Nano .family bit.: it has no self-attention layers"):
        inspect_model({}, get_spec("R-Nano"), 32, np.zeros((1, 32, 32, 3)), None)
    with pytest.raises(ConfigError, match="expected"):
        inspect_model(_fake_weights(TokenLayout.of(spec, 16)), spec, 16, np.zeros((1, 32, 32, 3)), None)


def test_pictures_and_markdown(tmp_path):
    spec = get_spec("ViT-Nano/4")
    layout = TokenLayout.of(spec, 16)

    def fn(weights, spec_, resolution, images):
        return _uniform(layout, layers=spec_.arch.depth, images=len(images), heads=spec_.arch.heads,
                        prefix_weight=0.1)

    r = inspect_model(_fake_weights(layout), spec, 16, np.zeros((3, 16, 16, 3), np.float32), fn, num_rollout=2)
    paths = r.write_pictures(tmp_path, label="vit")
    assert set(paths) == set(Picture)
    for kind, path in paths.items():
        assert path.name == f"vit_{kind.value}.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*"))  # no temporary files left
    md = to_markdown(r, {k: p.name for k, p in paths.items()})
    for layer in range(1, spec.arch.depth + 1):
        assert f"\n| {layer} | " in md
    for p in paths.values():
        assert f"]({p.name})" in md
    hybrid = InspectResult(**{**r.__dict__, "filters": None, "model": "hybrid"})
    assert Picture.FILTERS not in hybrid.write_pictures(tmp_path / "h")
    assert "1x1" in to_markdown(hybrid)


# ---- the frameworks: the same attention on the same weights ---------------------------------------------------
def _random_weights(name: str, resolution: int = 32) -> dict:
    import torch
    from test_flax_models import randomize_

    from vitbench.models.torch import build_torch_model

    torch.manual_seed(0)
    model = randomize_(build_torch_model(get_spec(name), resolution).eval(), seed=3)
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", ["ViT-Nano/4", "R-Nano+ViT-Micro/8"])
def test_torch_attention_maps_are_probabilities_of_the_model(name, one_torch_thread):
    """Rows sum to 1, and rebuilding attention @ v by hand from the captured maps gives the block's output."""
    import torch

    from vitbench.backends.torch.attention import attention_maps
    from vitbench.models.torch import build_torch_model

    spec = get_spec(name)
    weights = _random_weights(name)
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    a = attention_maps(weights, spec, 32, x)
    t = (32 // spec.stride) ** 2 + 1
    assert a.shape == (spec.arch.depth, 2, spec.arch.heads, t, t) and a.dtype == np.float32
    # softmax (4 roundings) summed over t
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=0, atol=(t + 4) * EPS32)
    model = build_torch_model(spec, 32).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    with torch.no_grad():  # the first block's attention output, fused path vs captured probabilities @ v
        h = model.norm_pre(model._pos_embed(model.patch_embed(torch.from_numpy(x.transpose(0, 3, 1, 2)))))
        attn = model.blocks[0].attn
        y = attn(model.blocks[0].norm1(h))
        qkv = attn.qkv(model.blocks[0].norm1(h)).reshape(2, t, 3, spec.arch.heads, -1).permute(2, 0, 3, 1, 4)
        o = (torch.from_numpy(a[0]) @ qkv[2]).transpose(1, 2).reshape(2, t, -1)
        # fp32 rounding, both paths: the qkv matmul (width terms), the scores (head_dim terms, whose error moves
        # a probability by its relative amount times the scores' term magnitudes s), the softmax (t + 4), a @ v
        # (t) and the projection (width), all relative to |proj| <= sum_j |W_ij| max|v| + |b_i| (o is a convex
        # combination of v's rows); a wrong map (another head's, no scale) is off by O(max|v|)
        q, k, v = qkv[0].numpy(), qkv[1].numpy(), qkv[2].numpy()
        s = float((np.abs(q) @ np.abs(k).swapaxes(-1, -2)).max()) * attn.scale
        n = 2 * spec.arch.width + 2 * t + 4 + (q.shape[-1] + spec.arch.width) * s
        w, b = attn.proj.weight.abs(), attn.proj.bias.abs()
        scale = float(w.sum(1).max()) * float(np.abs(v).max()) + float(b.max())
        np.testing.assert_allclose(attn.proj(o).numpy(), y.numpy(), rtol=0, atol=n * EPS32 * scale)


@pytest.mark.jax
@pytest.mark.parametrize("name", ["ViT-Nano/4", "R-Nano+ViT-Micro/8"])
def test_torch_and_jax_agree_on_the_same_weights(name, one_torch_thread):
    pytest.importorskip("flax")
    from vitbench.backends.base import get_backend

    torch_maps, flax_maps = get_backend("torch").attention_maps, get_backend("jax").attention_maps

    spec = get_spec(name)
    weights = _random_weights(name)
    x = np.random.default_rng(1).normal(size=(3, 32, 32, 3)).astype(np.float32)
    a, b = torch_maps(weights, spec, 32, x), flax_maps(weights, spec, 32, x)
    assert a.shape == b.shape
    assert np.abs(a - b).max() <= forward_parity(spec, 32)  # probabilities (max 1) at the end of a forward
    assert a.max(-1).mean() > 2 / a.shape[-1]  # not near-uniform maps, where agreement would say little
    ra = inspect_model(weights, spec, 32, x, torch_maps, num_rollout=2)
    rb = inspect_model(weights, spec, 32, x, flax_maps, num_rollout=2)
    # what follows the maps is float64 numpy on both: the results differ by what the maps' difference carries
    delta, p = float(np.abs(a - b).max()), spec.num_prefix_tokens
    mass = float(a[..., p:, p:].sum(-1).min())  # the least weight a query puts on patch keys
    dist = attention_distance_bound(delta, a.shape[-1] - p, 32, mass)
    assert np.abs(ra.attention_distance_px - rb.attention_distance_px).max() <= dist
    assert np.abs(ra.rollout - rb.rollout).max() <= rollout_bound(delta, spec.arch.depth, a.shape[-1])


@pytest.mark.jax
def test_flax_model_output_is_unchanged_by_inspection():
    pytest.importorskip("flax")
    from vitbench.models.convert import torch_to_flax
    from vitbench.models.flax import build_flax_model

    spec = get_spec("ViT-Nano/4")
    params = torch_to_flax(_random_weights("ViT-Nano/4"), spec)
    model = build_flax_model(spec, 32)
    x = np.random.default_rng(2).normal(size=(2, 32, 32, 3)).astype(np.float32)
    plain = model.apply({"params": params}, x)
    sown, state = model.apply({"params": params}, x, mutable=["intermediates"])
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(sown))
    assert len(state["intermediates"]["Transformer"]) == spec.arch.depth


# ---- the command ----------------------------------------------------------------------------------------------
def test_cli_json_from_a_variant_name(cli, one_torch_thread):
    r = cli("inspect", "ViT-Nano/4", "-r", "16", "--images", "3", "--threads", "1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # one JSON document, nothing else on stdout
    spec = get_spec("ViT-Nano/4")
    assert np.array(doc["attention_distance_px"]).shape == (spec.arch.depth, spec.arch.heads)
    assert np.array(doc["posemb_similarity"]).shape == (4, 4, 4, 4)
    assert doc["num_images"] == 3 and doc["source"] == "random init"
    d = np.array(doc["attention_distance_px"])
    assert ((d > 0) & (d <= 4 * math.hypot(3, 3))).all()  # farthest patch centres of a 4x4 grid of 4 px


def test_cli_checkpoint_at_another_resolution_writes_json_and_pictures(cli, tmp_path, one_torch_thread):
    from vitbench.transfer.checkpoint import save_checkpoint

    ckpt = save_checkpoint(tmp_path / "hyb.safetensors", _random_weights("R-Nano+ViT-Micro/8", 32),
                           {"model": "R-Nano+ViT-Micro/8", "resolution": 32, "num_classes": 10})
    out = tmp_path / "out"
    r = cli("inspect", ckpt, "-r", "64", "--images", "2", "--rollout", "2", "--threads", "1", "--out", out)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "inspect.json").read_text())
    assert doc["grid"] == [8, 8] and doc["posemb_grid_trained"] == [4, 4] and doc["token_stride_px"] == 8
    assert doc["embedding_filter_components"] is None  # a hybrid's projection is 1x1 on CNN features
    assert sorted(p.name for p in out.iterdir()) == sorted([".vitbench-inspect.json", "inspect.json",
                                                             *doc["pictures"].values()])
    assert set(doc["pictures"]) == {"posemb_similarity", "attention_distance", "attention_rollout"}
    # its own files are replaced by the next run; a file of the user's in --out never is (refused before the
    # model runs, nothing written; before: overwritten), unless --allow-other-files puts them beside it
    args = ("inspect", ckpt, "-r", "64", "--images", "2", "--threads", "1", "--out", out)
    assert cli(*args).exit_code == 0
    (out / "attention_distance.png").write_text("mine")
    r = cli(*args)
    assert r.exit_code == 2 and "no inspect can prove it wrote (attention_distance.png)" in r.output, r.output
    assert (out / "attention_distance.png").read_text() == "mine"
    (out / "attention_distance.png").rename(out / "notes.png")
    assert cli(*args, "--allow-other-files").exit_code == 0 and (out / "notes.png").read_text() == "mine"


@pytest.mark.parametrize("args, match", [
    (["R-Nano"], "no self-attention layers"),
    (["ViT-Nano/4", "--backend", "tensorflow"], "allowed: torch, jax"),
    (["ViT-Nano/4", "-r", "18"], "must be a positive multiple of 4"),
    (["ViT-Nano/4", "--out", "{file}"], "is a file"),
    (["nothere.safetensors"], "does not exist"),
])
def test_cli_bad_input_exits_2_with_one_line(cli, tmp_path, args, match):
    f = tmp_path / "f.txt"
    f.write_text("x")
    r = cli("inspect", *[a.format(file=f) for a in args], "--threads", "1")
    assert r.exit_code == 2
    assert match in r.stderr and "Traceback" not in r.output
    assert f.read_text() == "x"


# ---- the study task and its report section ---------------------------------------------------------------------
def test_inspect_rows_in_a_study_and_the_report(tmp_path, monkeypatch, one_torch_thread):
    """Two pre-training budgets of a tiny ViT and a hybrid: one inspect row each, sharing the transfer tasks'
    upstream cache; the report draws the distance comparison from the rows' raw data; a ResNet is refused when
    the study is parsed."""
    from records import job

    from vitbench.errors import ConfigError
    from vitbench.report import build_report
    from vitbench.store import Store
    from vitbench.study import parse_study
    from vitbench.trial import run_trial

    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    study = parse_study("""
name: insp
calibration: false
defaults: {threads: 1, pretrain_batch_size: 16, pretrain_warmup_steps: 2, inspect_images: 4, inspect_rollout: 1}
axes: {task: [inspect], pretrain_steps: [5, 10]}
zip:
  - {model: [ViT-Nano/4, R-Nano+ViT-Micro/8], resolution: [16, 32], pretrain_resolution: [16, 32]}
""", "insp.yaml")
    assert len(study.trials) == 4
    with Store(tmp_path / "res") as store:
        for t in study.trials:
            rec = run_trial(job(t.config, t.key, study.name))
            assert rec.status == "ok", rec.error
            assert rec.metrics["attention_distance_first_layer_px"] > 0 and rec.metrics["pretrain_exaflops"] > 0
            assert InspectResult.from_json(rec.raw).attention_distance_px.shape == (2, 2 if "Nano/4" in
                                                                                  t.config["model"] else 4)
            store.append(rec)
    rep = build_report(tmp_path / "res", formats=("md",))
    assert len(rep.tables["inspect"]) == 4 and "attention_distance" in rep.figures
    from vitbench.insight.report import distance_comparison
    from vitbench.report.tables import ok_rows

    fig = distance_comparison(ok_rows(rep.df, ("inspect",)))  # a panel per model, a line per budget in each
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert sorted(ax.get_title() for ax in panels) == ["R-Nano+ViT-Micro/8 torch @ 32px",
                                                       "ViT-Nano/4 torch @ 16px"]
    assert all(sorted(t.get_text() for t in ax.get_legend().get_texts()) ==
               ["pretrain_steps=10", "pretrain_steps=5", "uniform attention"] for ax in panels)
    with pytest.raises(ConfigError, match="no self-attention layers"):
        parse_study("name: x\naxes: {model: [R-Nano], task: [inspect]}\n", "x.yaml")
