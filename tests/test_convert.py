"""Weights both ways, original-layout .npz checkpoints, and position-embedding resampling on both backends."""

from __future__ import annotations

import pytest

pytest.importorskip("flax")  # the [jax] extra: jax, flax, optax
pytestmark = pytest.mark.jax

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from flax.traverse_util import flatten_dict  # noqa: E402
from test_flax_models import TINY, nhwc, randomize_, rel_diff  # noqa: E402

from vitbench.errors import ConfigError, UnsafeFileError  # noqa: E402
from vitbench.models.convert import flax_to_torch, torch_to_flax  # noqa: E402
from vitbench.models.npz import load_npz, load_vit_jax_npz, params_from_checkpoint, save_npz  # noqa: E402
from vitbench.models.posemb_resize import (  # noqa: E402
    interp_matrix,
    resample_pos_embed,
    resize_params_pos_embed,
    resize_state_dict_pos_embed,
)
from vitbench.models.flax import build_flax_model  # noqa: E402
from vitbench.models.specs import get_spec  # noqa: E402
from vitbench.models.torch import build_torch_model  # noqa: E402
from tolerances_fp import forward_parity, resample_bound  # noqa: E402


def _torch(name: str, resolution: int = 32, seed: int = 1) -> torch.nn.Module:
    torch.manual_seed(0)
    return randomize_(build_torch_model(get_spec(name), resolution).eval(), seed=seed)


def _x(resolution: int = 32, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, resolution, resolution, generator=torch.Generator().manual_seed(5))


def _flax_logits(name: str, params: dict, x: torch.Tensor, **kw) -> np.ndarray:
    model = build_flax_model(name, x.shape[-1], **kw)
    return np.asarray(jax.jit(model.apply)({"params": params}, nhwc(x)))


# ---- torch <-> flax ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_round_trip_torch_flax_torch_is_exact(name):
    tm = _torch(name)
    sd = tm.state_dict()
    back = flax_to_torch(torch_to_flax(sd, name), name)
    assert set(back) == set(sd)
    for k, v in sd.items():
        assert torch.equal(back[k], v), k
    fresh = build_torch_model(get_spec(name))
    fresh.load_state_dict(back, strict=True)  # loads into a new timm model as is


def test_round_trip_flax_torch_flax_is_exact():
    spec = get_spec("R-Nano+ViT-Micro/8")
    x = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    shapes = flatten_dict(jax.eval_shape(build_flax_model(spec).init, jax.random.PRNGKey(0), x)["params"])
    rng = np.random.default_rng(0)
    params = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in shapes.items()}
    from flax.traverse_util import unflatten_dict

    back = flatten_dict(torch_to_flax(flax_to_torch(unflatten_dict(params), spec), spec))
    assert set(back) == set(params)
    for k in params:
        np.testing.assert_array_equal(back[k], params[k])


def test_a_state_dict_of_another_model_is_refused_with_the_keys():
    with pytest.raises(ConfigError, match="do not fit ViT-Micro/4: missing.*look like ViT-Nano/4"):
        torch_to_flax(_torch("ViT-Nano/4").state_dict(), "ViT-Micro/4")
    with pytest.raises(ValueError):  # still a ValueError for callers that catch one
        torch_to_flax(_torch("ViT-Nano/4").state_dict(), "DeiT-Nano/4-dist")


# ---- original vit_jax .npz checkpoints ---------------------------------------------------------------
def _write_vit_jax_npz(path, params: dict, *, gn_4d: bool = False, linen_names: bool = False) -> list[str]:
    """Write params the way vit_jax checkpoints are stored: flat '/'-joined keys in an .npz. `gn_4d`: GroupNorm
    scale/bias as (1,1,1,C) (older files); `linen_names`: flax convert_pre_linen's per-class counters."""
    flat = {k: np.asarray(v) for k, v in flatten_dict(params, sep="/").items()}
    if gn_4d:
        flat = {k: v.reshape(1, 1, 1, -1) if "/gn" in "/" + k and v.ndim == 1 else v for k, v in flat.items()}
    if linen_names:
        ren = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0", "LayerNorm_2": "LayerNorm_1",
               "MlpBlock_3": "MlpBlock_0"}
        flat = {"/".join(ren.get(p, p) for p in k.split("/")): v for k, v in flat.items()}
    np.savez(path, **flat)
    return sorted(flat)


@pytest.mark.parametrize("name,variant", [("ViT-Nano/4", {}), ("ViT-Nano/4", {"linen_names": True}),
                                          ("R-Nano+ViT-Micro/8", {"gn_4d": True}), ("R-Nano", {"gn_4d": True})])
def test_npz_in_vit_jax_layout_loads_and_matches_torch(tmp_path, name, variant):
    tm = _torch(name)
    path = tmp_path / "ckpt.npz"
    keys = _write_vit_jax_npz(path, torch_to_flax(tm.state_dict(), name), **variant)
    if name == "ViT-Nano/4" and not variant:  # the file really is in the original layout
        assert "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel" in keys
        assert "Transformer/posembed_input/pos_embedding" in keys and "cls" in keys
    params = load_vit_jax_npz(path, name)
    x = _x()
    with torch.no_grad():
        ref = tm(x).numpy()
    # max|torch - flax| / max|torch|: fp32 rounding along the forward (the file round trip is exact)
    assert rel_diff(ref, _flax_logits(name, params, x)) <= forward_parity(get_spec(name), x.shape[-1])


def test_fine_tuning_head_swap_drops_pre_logits_and_zero_inits_the_head(tmp_path):
    name = "ViT-Nano/4"
    src = build_flax_model(name, num_classes=10, representation_size=32)
    x = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    shapes = flatten_dict(jax.eval_shape(src.init, jax.random.PRNGKey(0), x)["params"], sep="/")
    rng = np.random.default_rng(1)
    ckpt = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in shapes.items()}
    assert "pre_logits/kernel" in ckpt
    path = tmp_path / "upstream.npz"
    np.savez(path, **ckpt)
    with pytest.raises(ConfigError, match="pre_logits"):
        load_vit_jax_npz(path, name, num_classes=5)  # 10-class head + pre_logits do not fit a 5-class model
    params = flatten_dict(load_vit_jax_npz(path, name, num_classes=5, new_head=True), sep="/")
    assert not any(k.startswith("pre_logits") for k in params)
    assert params["head/kernel"].shape == (32, 5) and not params["head/kernel"].any()  # paper: zero-init head
    np.testing.assert_array_equal(params["Transformer/encoder_norm/scale"], ckpt["Transformer/encoder_norm/scale"])


def test_checkpoint_at_another_resolution_gets_its_position_embeddings_resampled(tmp_path):
    name = "ViT-Nano/4"
    p32 = torch_to_flax(_torch(name).state_dict(), name)
    path = tmp_path / "p32.npz"
    save_npz(path, p32)
    loaded = load_vit_jax_npz(path, name, resolution=48)
    want = resize_params_pos_embed(p32, name, 48)
    pe = "Transformer/posembed_input/pos_embedding"
    assert flatten_dict(loaded, sep="/")[pe].shape == (1, 12 * 12 + 1, 32)
    got, expect = flatten_dict(loaded, sep="/")[pe], flatten_dict(want, sep="/")[pe]
    np.testing.assert_allclose(got, expect, atol=resample_bound(expect, 8))  # the 8 x 8 grid resampled twice


def test_a_checkpoint_for_another_model_is_a_clear_error(tmp_path):
    path = tmp_path / "micro.npz"
    save_npz(path, torch_to_flax(_torch("ViT-Micro/4").state_dict(), "ViT-Micro/4"))
    with pytest.raises(ConfigError, match="does not fit"):
        load_vit_jax_npz(path, "ViT-Nano/4")


def test_unsafe_missing_and_corrupt_files_are_refused(tmp_path):
    bad = tmp_path / "pickled.npz"
    np.savez(bad, cls=np.array([{"evil": 1}], dtype=object))
    with pytest.raises(UnsafeFileError, match="pickle"):
        load_npz(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_npz(tmp_path / "nope.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file at all")
    with pytest.raises(ConfigError, match="not a readable"):
        load_npz(junk)


def test_save_npz_writes_flat_slash_keys(tmp_path):
    params = {"Transformer": {"encoder_norm": {"scale": np.ones(3, np.float32)}}, "cls": np.zeros((1, 1, 3))}
    save_npz(tmp_path / "p.npz", params)
    assert set(load_npz(tmp_path / "p.npz")) == {"Transformer/encoder_norm/scale", "cls"}
    assert list(tmp_path.iterdir()) == [tmp_path / "p.npz"]  # no temporary file left behind


def test_params_from_checkpoint_rejects_a_wrong_shape():
    template = {"head": {"kernel": np.zeros((4, 3)), "bias": np.zeros(3)}}
    with pytest.raises(ConfigError, match="head/kernel"):
        params_from_checkpoint({"head/kernel": np.zeros((4, 2)), "head/bias": np.zeros(3)}, template)


# ---- position-embedding resampling ---------------------------------------------------------------------
@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
@pytest.mark.parametrize("n_in,n_out", [(4, 7), (8, 12), (12, 8), (5, 5), (7, 3)])
def test_interp_matrix_is_torch_interpolate(method, n_in, n_out):
    g = torch.randn(1, 3, n_in, n_in, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ref = F.interpolate(g, size=(n_out, n_out), mode=method, align_corners=False)
    m = torch.from_numpy(interp_matrix(n_in, n_out, method))
    # float64 both: resample_bound(g, n_in, float64 eps) <= 2e-14 for these grids (|g| < 5)
    np.testing.assert_allclose(torch.einsum("ih,jw,chw->cij", m, m, g[0]).numpy(), ref[0].numpy(),
                               atol=resample_bound(g, n_in, float(np.finfo(np.float64).eps)))


@pytest.mark.parametrize("method", ["bilinear", "bicubic"])
def test_resample_is_the_same_on_numpy_torch_and_jax(method):
    rng = np.random.default_rng(0)
    pe = rng.standard_normal((1, 1 + 8 * 8, 16)).astype(np.float32)
    a = resample_pos_embed(pe, 12, method=method)
    b = resample_pos_embed(torch.from_numpy(pe), 12, method=method)
    c = resample_pos_embed(jnp.asarray(pe), 12, method=method)
    assert isinstance(b, torch.Tensor) and isinstance(c, jax.Array) and a.shape == (1, 145, 16)
    tol = resample_bound(pe, 8)  # three programs (numpy, torch, XLA), one fp32 resampling of an 8 x 8 grid
    np.testing.assert_allclose(b.numpy(), a, atol=tol)
    np.testing.assert_allclose(np.asarray(c), a, atol=tol)
    np.testing.assert_array_equal(a[:, :1], pe[:, :1])  # class token kept as is


def test_bilinear_resampling_reproduces_a_linear_field_inside_the_grid():
    i, j = np.meshgrid(np.arange(6.0), np.arange(6.0), indexing="ij")
    pe = np.concatenate([np.full((1, 1), 7.0), (2 * i + 3 * j).reshape(-1, 1)])[None]  # (1, 37, 1)
    up = resample_pos_embed(pe, 12)[0, 1:, 0].reshape(12, 12)
    src = (np.arange(12) + 0.5) / 2 - 0.5  # half-pixel source coordinates of the 12 new cells
    want = 2 * src[:, None] + 3 * src[None, :]
    eps64 = float(np.finfo(np.float64).eps)
    # borders are clamped: the inside only
    np.testing.assert_allclose(up[1:-1, 1:-1], want[1:-1, 1:-1], atol=resample_bound(pe, 6, eps64))


def test_resample_is_identity_at_the_same_grid_and_checks_shapes():
    pe = np.random.default_rng(0).standard_normal((1, 17, 8))
    assert resample_pos_embed(pe, 4) is pe
    np.testing.assert_array_equal(resample_pos_embed(pe[0], (4, 4)), pe[0])  # the same grid: returned as is
    # exact: at scale 1 the source coordinate (i + 0.5) * 1 - 0.5 is i exactly, where bilinear's weights are 1 and
    # 0 and Keys' cubic (a = -0.75, all its coefficients binary fractions) evaluates to exactly 0, 1, 0, 0
    for m in ("bilinear", "bicubic"):
        np.testing.assert_array_equal(interp_matrix(6, 6, m), np.eye(6))
    with pytest.raises(ValueError, match="square"):
        resample_pos_embed(np.zeros((1, 1 + 15, 8)), 4)
    with pytest.raises(ConfigError, match="allowed"):
        resample_pos_embed(pe, 6, method="nearest")


def test_upsampled_models_agree_across_backends():
    """Fine-tuning at a higher resolution (paper 3.2): torch model 32 -> 48 px via its state dict, Flax via its
    params, each resampled on its own backend -- the two 48 px models still compute the same function."""
    name = "ViT-Nano/4"
    sd32 = _torch(name).state_dict()
    tm48 = build_torch_model(get_spec(name), 48).eval()
    tm48.load_state_dict(resize_state_dict_pos_embed(sd32, name, 48))
    p48 = resize_params_pos_embed(jax.tree_util.tree_map(jnp.asarray, torch_to_flax(sd32, name)), name, 48)
    assert isinstance(p48["Transformer"]["posembed_input"]["pos_embedding"], jax.Array)
    x = _x(48)
    with torch.no_grad():
        ref = tm48(x).numpy()
    # fp32 rounding along the forward, plus the two resamplings' difference (resample_bound, absolute) carried to
    # the logits at gain ~1 (the assumption forward_parity makes: residuals and norms keep the scale)
    pe_gap = resample_bound(sd32["pos_embed"].numpy(), 8) / float(np.abs(ref).max())
    assert rel_diff(ref, _flax_logits(name, p48, x)) <= forward_parity(get_spec(name), 48) + pe_gap


def test_distilled_position_embeddings_keep_both_prefix_tokens_when_resampled():
    name = "DeiT-Nano/4-dist"
    sd32 = _torch(name).state_dict()
    sd48 = resize_state_dict_pos_embed(sd32, name, 48)
    assert sd48["pos_embed"].shape == (1, 2 + 12 * 12, 32)
    assert torch.equal(sd48["pos_embed"][:, :2], sd32["pos_embed"][:, :2])  # class and distillation tokens kept
    p48 = resize_params_pos_embed(torch_to_flax(sd32, name), name, 48)
    np.testing.assert_allclose(p48["Transformer"]["posembed_input"]["pos_embedding"], sd48["pos_embed"].numpy(),
                               atol=resample_bound(sd32["pos_embed"].numpy(), 8))
    build_torch_model(get_spec(name), 48).load_state_dict(sd48)  # fits a model built at 48 px


def test_distilled_npz_at_another_resolution_is_resampled_with_two_prefix_tokens(tmp_path):
    name = "DeiT-Nano/4-dist"
    p32 = torch_to_flax(_torch(name).state_dict(), name)
    save_npz(tmp_path / "d.npz", p32)
    loaded = flatten_dict(load_vit_jax_npz(tmp_path / "d.npz", name, resolution=48), sep="/")
    want = flatten_dict(resize_params_pos_embed(p32, name, 48), sep="/")
    pe = "Transformer/posembed_input/pos_embedding"
    np.testing.assert_allclose(loaded[pe], want[pe], atol=resample_bound(want[pe], 8))


def test_resnets_have_no_position_embeddings():
    with pytest.raises(ConfigError, match="no position embeddings"):
        resize_state_dict_pos_embed({}, "R-Nano", 64)
