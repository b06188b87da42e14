"""Masked patch prediction (ViT paper Sec. 4.6): corruption proportions, targets by hand, the loss only on the
corrupted positions, torch and JAX step for step, and checkpoints that say (and enforce) their objective."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vitbench.errors import ConfigError
from vitbench.record import Record
from vitbench.models.specs import get_spec
from vitbench.transfer import masked_patch as mpt
from vitbench.transfer.masked_patch import MaskedPatch, Objective, Target
from tolerances_fp import EPS32, clipped_gradient_error, model_roundings, sgd_weight_bound
from tolerances_stat import gamma

SPEC = get_spec("ViT-Nano/4")
RES = 16


def test_corruption_proportions_on_a_large_draw():
    """50 % of positions per image exactly; of those 80/10/10 % [mask]/random/unchanged within 5 sigma of the
    binomial sampling error (sigma = sqrt(p(1-p)/n), n = 32 000 corrupted positions: bound ~ +-1.1 points)."""
    b, n = 1000, 64
    c = mpt.draw(np.random.default_rng(0), b, n, MaskedPatch())
    assert c.positions.shape == (b, 32)
    assert all(len(set(row)) == 32 for row in c.positions[:50])  # distinct positions
    total = c.kind.size
    for kind, p in zip((mpt.MASK, mpt.RANDOM, mpt.KEEP), mpt.KIND_P):
        share = float(np.mean(c.kind == kind))
        assert abs(share - p) < 5 * np.sqrt(p * (1 - p) / total), (kind, share)
    # the [mask] embedding exactly where MASK was drawn; another patch (never itself) exactly where RANDOM was
    assert c.use_mask.sum() == np.sum(c.kind == mpt.MASK)
    own = np.arange(b * n).reshape(b, n)
    moved = c.source != own
    assert moved.sum() == np.sum(c.kind == mpt.RANDOM)
    rows = np.repeat(np.arange(b), 32).reshape(b, 32)
    assert moved[rows[c.kind == mpt.RANDOM], c.positions[c.kind == mpt.RANDOM]].all()
    assert not (moved & (c.use_mask > 0)).any()  # uncorrupted positions untouched
    corrupted = np.zeros((b, n), bool)
    corrupted[rows, c.positions] = True
    assert not (moved | (c.use_mask > 0))[~corrupted].any()
    c15 = mpt.draw(np.random.default_rng(1), 4, 16, MaskedPatch(mask_rate=0.15))
    assert c15.positions.shape == (4, 2)  # round(0.15 x 16)


def test_targets_by_hand():
    """An 8x8 image, patches of 4 px: patch 0 red-ish ramp, patch 3 grey; targets computed by hand."""
    img = np.zeros((1, 8, 8, 3), np.float32)  # in [0, 1]
    img[0, :4, :4, 0] = 0.9  # patch 0: r 0.9, g 0 -> 0.3 in the left half, b 0.5
    img[0, :4, :2, 1] = 0.6
    img[0, :4, :4, 2] = 0.5
    img[0, 4:, 4:, :] = 0.25  # patch 3: grey 0.25
    x = img * 2 - 1  # the model's input range
    pos = np.array([[0, 3]], np.int32)
    # mean colour: patch 0 means (0.9, 0.3, 0.5) -> levels (7, 2, 4) -> 7*64 + 2*8 + 4; patch 3: (2, 2, 2)
    np.testing.assert_array_equal(mpt.targets(x, pos, 4, Target.MEAN_COLOR), [[7 * 64 + 2 * 8 + 4, 2 * 73]])
    # 4x4 grid of a 4 px patch = its pixels: left half g 0.6 -> level 4, right half g 0 -> level 0
    grid = mpt.targets(x, pos, 4, Target.COLOR_GRID)
    assert grid.shape == (1, 2, 16)
    row = [7 * 64 + 4 * 8 + 4] * 2 + [7 * 64 + 0 + 4] * 2
    np.testing.assert_array_equal(grid[0, 0], row * 4)
    np.testing.assert_array_equal(grid[0, 1], [2 * 73] * 16)
    # a whole 8 px patch pooled to 4x4: each cell the mean of 2x2 pixels
    whole = mpt.targets(x, np.array([[0]], np.int32), 8, Target.COLOR_GRID)[0, 0].reshape(4, 4)
    assert whole[0, 0] == 7 * 64 + 4 * 8 + 4 and whole[0, 1] == 7 * 64 + 4
    assert whole[3, 3] == 2 * 73 and whole[0, 3] == 0
    pix = mpt.targets(x, pos, 4, Target.PIXELS_L2)
    assert pix.shape == (1, 2, 4 * 4 * 3)
    # pixels in [0, 1] after a few elementwise fp32 operations: within 4 roundings of 1, 4 EPS32 = 5e-7
    np.testing.assert_allclose(pix[0, 0], img[0, :4, :4].reshape(-1), rtol=0, atol=4 * EPS32)
    np.testing.assert_allclose(pix[0, 1], 0.25, rtol=0, atol=4 * EPS32)
    # grey digits: r = g = b, so only the 8 grey classes occur
    grey = np.repeat(np.random.default_rng(0).random((2, 8, 8, 1), np.float32), 3, -1) * 2 - 1
    t = mpt.targets(grey, np.array([[0, 1, 2, 3]] * 2, np.int32), 4, Target.MEAN_COLOR)
    assert set(t.ravel()) <= {73 * k for k in range(8)}


def test_targets_ignore_uncorrupted_patches():
    x = np.random.default_rng(0).uniform(-1, 1, (2, 8, 8, 3)).astype(np.float32)
    pos = np.array([[1], [2]], np.int32)
    y = x.copy()
    y[0, :4, :4] = 1.0  # patch 0 of image 0 and patch 3 of image 1: not corrupted
    y[1, 4:, 4:] = -1.0
    for t in Target:
        np.testing.assert_array_equal(mpt.targets(x, pos, 4, t), mpt.targets(y, pos, 4, t))


# ViT-like timm models (built by timm, no weights): test_vit (width 64, patch 16, a class token) and a distilled
# DeiT (class and distillation tokens), at 64 px: a 4 x 4 grid, as ViT-Nano/4 at 16 px
TIMM_VITS = [("timm:test_vit", 64, 1), ("timm:deit_tiny_distilled_patch16_224", 64, 2)]


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("model, res, prefix", [("ViT-Nano/4", RES, 1), *TIMM_VITS])
def test_only_corrupted_positions_reach_the_loss(model, res, prefix):
    """The loss's gradient w.r.t. the encoder's output tokens is zero at every uncorrupted position (the prefix
    tokens too) and non-zero at the corrupted ones (torch; the JAX step is the same maths, checked step for step
    below). A timm model's prefix tokens are its own (DeiT distilled: 2)."""
    import torch

    from vitbench.backends.torch import masked_patch as tmp
    from vitbench.models.torch import build_torch_model

    spec = get_spec(model)
    assert mpt.sequence(spec).prefix_tokens == prefix
    mp = MaskedPatch(mask_rate=0.25)
    torch.manual_seed(0)
    model = build_torch_model(spec, res, 1)
    obj = tmp.Objective(mpt.init_head(spec, res, mp, 0))
    x = np.random.default_rng(0).uniform(-1, 1, (3, res, res, 3)).astype(np.float32)
    n, patch = mpt.geometry(spec, res)
    assert n == 16
    c = mpt.draw(np.random.default_rng(0), 3, n, mp)
    kept = {}
    forward = model.forward_features

    def capture(inp):
        out = forward(inp)
        out.retain_grad()
        kept["tokens"] = out
        return out

    model.forward_features = capture
    out = tmp.predict(model, obj, torch.from_numpy(x).permute(0, 3, 1, 2), c, prefix, "cpu")
    tmp.loss(out, torch.from_numpy(mpt.targets(x, c.positions, patch, mp.target)), mp.target).backward()
    grad = kept["tokens"].grad.abs().sum(-1).numpy()
    assert grad.shape == (3, prefix + n) and (grad[:, :prefix] == 0).all()  # prefix tokens: not predicted from
    g = grad[:, prefix:]  # patch tokens
    corrupted = np.zeros_like(g, bool)
    corrupted[np.arange(3)[:, None], c.positions] = True
    assert (g[~corrupted] == 0).all() and (g[corrupted] > 0).all()


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("model, res, prefix", TIMM_VITS[:1])
def test_a_timm_vit_uses_the_mask_token_and_learns(model, res, prefix, tmp_path):
    """A ViT-like timm model pre-trains by masked patch prediction on digits (torch): the [mask] embedding goes in
    after timm's patch embedding (another one, another loss; its gradient non-zero), the loss is finite and
    falls over a few steps, and the encoder it saves transfers (few-shot) with timm's own keys."""
    import torch

    from vitbench.backends.torch import masked_patch as tmp
    from vitbench.models.torch import build_torch_model
    from vitbench.protocols.fewshot import FewshotConfig, fewshot
    from vitbench.protocols.pretrain import PretrainConfig, pretrain
    from vitbench.transfer.data import load_splits

    spec, mp = get_spec(model), MaskedPatch()
    assert mpt.sequence(spec).token_width == 64  # test_vit's embed_dim: the head's input
    torch.manual_seed(0)
    enc = build_torch_model(spec, res, 1)
    init = mpt.init_head(spec, res, mp, 0)
    b = next(mpt.batches(load_splits({"classes": "0-4"}).train, res, 8, 1, 0, spec, mp))
    assert (b.corruption.kind == mpt.MASK).any()
    x, y = torch.from_numpy(b.images).permute(0, 3, 1, 2), torch.from_numpy(b.targets)

    def loss(obj):
        return tmp.loss(tmp.predict(enc, obj, x, b.corruption, prefix, "cpu"), y, mp.target)

    obj = tmp.Objective(init)
    value = loss(obj)
    value.backward()
    assert torch.isfinite(value) and obj.mask_token.grad.abs().sum() > 0
    # another [mask] embedding (not a constant shift, which every LayerNorm on the residual stream removes)
    shift = np.random.default_rng(1).standard_normal(init[mpt.MASK_KEY].shape).astype(np.float32)
    other = tmp.Objective({**init, mpt.MASK_KEY: init[mpt.MASK_KEY] + shift})
    assert loss(other).item() != value.item()

    cfg = PretrainConfig(model=model, backend="torch", resolution=res, steps=8, warmup_steps=1, batch_size=16,
                         objective={})
    rec, ckpt = pretrain(cfg, out=tmp_path / "mp.safetensors", threads=1)
    losses = rec.raw["loss"]
    assert np.isfinite(losses).all() and np.mean(losses[-2:]) < losses[0]
    assert set(ckpt.weights) == {k for k in enc.state_dict() if not k.startswith("head.")}
    assert rec.metrics["exaflops"] == pytest.approx(mpt.train_flops_per_image(spec, res, mp) * 8 * 16 / 1e18)
    down = FewshotConfig(checkpoint=rec.config["checkpoint"], objective="masked_patch", backend="torch",
                         resolution=res, shots=[1], seeds=1, data={"classes": "5-9"})
    assert 0 <= fewshot(down, threads=1).metrics["accuracy"] <= 1


def test_a_masked_patch_pretraining_is_an_ok_row_holding_its_compute(cli, tmp_path, monkeypatch):
    """Every command's record is held to a sweep's row check (tasks.run_checked), which asked every pretrain row
    for its accuracy: `pretrain --objective masked_patch` exited 1 ("measured no accuracy"), and a study's such
    trial was an error row. An upstream without a classifier promises its compute (Pretrain.headline_of)."""
    from vitbench.tasks import row_check

    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path))
    r = cli("pretrain", "ViT-Nano/4", "--objective", "masked_patch", "-r", "16", "--steps", "2", "-b", "8",
            "--threads", "1", "--json")
    assert r.exit_code == 0, r.output
    rec = Record.from_dict(json.loads(r.stdout))
    assert rec.metrics.get("accuracy") is None and rec.metrics["exaflops"] > 0 and row_check()(rec) is None
    supervised = Record.measured("pretrain", {"model": "ViT-Nano/4", "objective": None},
                                 metrics={"exaflops": 1.0, "accuracy": None})
    assert "without its accuracy" in row_check()(supervised).text
    # its encoder's attention is inspected as any checkpoint's: `inspect` said "set objective: masked_patch", an
    # option inspect does not have (session 30's Left list); attention needs no classifier
    r = cli("inspect", rec.config["checkpoint"], "-n", "2", "--rollout", "2", "--threads", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["headline"]["attention_distance_first_layer_px"] > 0


@pytest.mark.parametrize("model, why", [("timm:test_resnet", "no attention layers"),
                                        ("timm:test_maxvit", "not over one sequence of patch tokens")])
def test_a_timm_model_without_one_token_sequence_exits_2_naming_it(cli, model, why):
    r = cli("pretrain", model, "--objective", "masked_patch", "-r", "64", "--steps", "1", "--threads", "1")
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert model in out and why in out and "masked_patch" in out, out


@pytest.mark.jax
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("model,target", [("ViT-Nano/4", Target.MEAN_COLOR), ("ViT-Nano/4", Target.COLOR_GRID),
                                          ("ViT-Nano/4[classifier=gap,posemb=sincos2d]", Target.PIXELS_L2)])
def test_torch_and_jax_take_the_same_steps(model, target):
    """Same weights, batches and corruption (one numpy RNG) => the same losses and weights, step for step."""
    pytest.importorskip("jax")
    from vitbench.backends.base import get_backend
    from vitbench.transfer.data import load_splits
    from vitbench.transfer.schedules import OptimConfig

    spec = get_spec(model)
    data = load_splits({"classes": "0-4"}).train
    jx, th = get_backend("jax"), get_backend("torch")
    jx.setup("cpu")
    th.setup("cpu")
    mp = MaskedPatch(target=target)
    # SGD: linear in the gradient, so the bound is the two programs' rounding (tests/tolerances_fp.py); Adam's own
    # arithmetic across the frameworks: test_transfer_jax's test_adam_update_matches_torch_given_the_same_gradients
    opt = OptimConfig(optimizer="sgd", lr=0.1, steps=3, warmup_steps=1, weight_decay=0.1, clip_norm=1.0)
    # the encoder's chain plus the head's: its forward sums over the width, its backward into the tokens over its
    # outputs, its weight gradient over the batch's corrupted tokens (fewer than model_roundings' batch x tokens)
    roundings = model_roundings(spec, RES, 8) + spec.arch.width + mpt.outputs(target, spec.arch.patch)
    bound = sgd_weight_bound(opt, clipped_gradient_error(opt, roundings))
    w = th.weights(th.init_model(spec, RES, 1, 0))
    init = mpt.init_head(spec, RES, mp, 0)
    runs = [be.train_masked_patch(be.load_weights(be.init_model(spec, RES, 1, 0), w),
                                  mpt.batches(data, RES, 8, 3, 1, spec, mp), opt, mp, init, spec.num_prefix_tokens)
            for be in (th, jx)]
    (mt, ht, lt), (mj, hj, lj) = runs
    # the first loss, from the same weights: the forward's rounding (a CE over 512 colours or a mean square of
    # pixel errors: not near zero at init); the later ones follow from the weights, compared next
    assert lj[0] == pytest.approx(lt[0], rel=roundings * EPS32)
    wt, wj = th.weights(mt), jx.weights(mj)
    assert max(float(np.abs(wt[k] - wj[k]).max()) for k in wt) <= bound
    assert max(float(np.abs(ht[k] - hj[k]).max()) for k in ht) <= bound
    # the objective's parameters learnt: the bound resolves 10 %
    assert max(float(np.abs(ht[k] - init[k]).max()) for k in ht) > 10 * bound


def test_flops_count_encoder_and_head():
    from vitbench.models.analytic import analytic_counts

    mp = MaskedPatch(target=Target.COLOR_GRID, mask_rate=0.5)
    enc = analytic_counts(SPEC, RES, 0).macs
    assert mpt.train_flops_per_image(SPEC, RES, mp) == 6 * (enc + 8 * SPEC.arch.width * 16 * 512)
    with pytest.raises(ConfigError, match="transformer"):
        mpt.geometry(get_spec("R-Nano"), 32)


def test_supervised_keys_unchanged_and_objective_in_the_key():
    from vitbench.tasks.pretrain import Pretrain
    from vitbench.protocols.pretrain import PretrainConfig

    sup = PretrainConfig(model="ViT-Nano/4")
    assert "objective" not in sup.key_data()
    mp = PretrainConfig(model="ViT-Nano/4", objective={})
    assert mp.key() != sup.key() and mp.key_data()["objective"]["target"] == "mean_color"
    p = Pretrain.Params(model="ViT-Nano/4", task="pretrain")
    assert not {"objective", "mask_rate", "mask_target"} & set(p.model_dump())
    q = Pretrain.Params(model="ViT-Nano/4", task="pretrain", objective="masked_patch", mask_rate=0.15)
    assert q.model_dump()["mask_rate"] == 0.15 and q.upstream_config("pretrain").objective.mask_rate == 0.15
    with pytest.raises(ValueError, match="mask_rate"):
        Pretrain.Params(model="ViT-Nano/4", task="pretrain", objective="masked_patch", mask_rate=1.5)
    with pytest.raises(ValueError, match="teacher"):
        Pretrain.Params(model="ViT-Nano/4", task="pretrain", objective="masked_patch", teacher="R-Nano")


@pytest.mark.usefixtures("one_torch_thread")
def test_checkpoint_says_its_objective_and_refuses_mixups(tmp_path):
    from vitbench.transfer.checkpoint import load_checkpoint, read_meta
    from vitbench.protocols.fewshot import FewshotConfig, fewshot
    from vitbench.protocols.pretrain import PretrainConfig, TeacherConfig, pretrain
    from vitbench.protocols.teacher import load_teacher

    cfg = PretrainConfig(model="ViT-Nano/4", backend="torch", resolution=RES, steps=2, batch_size=8,
                         objective={"target": "pixels_l2"})
    rec, made = pretrain(cfg, out=tmp_path / "mp.safetensors", threads=1)
    path = rec.config["checkpoint"]
    from safetensors import safe_open

    with safe_open(path, framework="numpy") as f:  # the file keeps the objective's parameters ...
        assert {mpt.MASK_KEY, mpt.HEAD_W, mpt.HEAD_B} <= set(f.keys())
    for ck in (made, load_checkpoint(path)):  # ... the encoder handed downstream does not, nor a classifier
        assert not any(k.startswith("head.") or mpt.is_objective_key(k) for k in ck.weights)
    assert rec.metrics["accuracy"] is None  # no classifier
    # exact: the same float64 expression (flops per image x images seen / 1e18; the teacher's + 0.0 rounds nothing)
    assert rec.metrics["exaflops"] == mpt.train_flops_per_image(SPEC, RES, cfg.objective) * 16 / 1e18
    meta = read_meta(path)
    assert meta["objective"] == {"objective": "masked_patch", "mask_rate": 0.5, "target": "pixels_l2"}
    down = {"checkpoint": path, "backend": "torch", "resolution": RES, "shots": [2], "seeds": 1,
            "data": {"classes": "5-9"}}
    with pytest.raises(ConfigError, match="objective 'masked_patch', 'supervised' was asked"):
        fewshot(FewshotConfig(**down), threads=1)
    r = fewshot(FewshotConfig(**down, objective="masked_patch"), threads=1)
    assert 0 <= r.metrics["accuracy"] <= 1
    from vitbench.backends.base import get_backend

    said = "pre-trained with objective 'masked_patch', so it has no classifier"  # not "the weights do not fit"
    for named in (None, "ViT-Nano/4"):
        with pytest.raises(ConfigError, match=said):
            load_teacher(TeacherConfig(checkpoint=path, model=named), get_backend("torch"), list("01234"))


def test_report_section_groups_by_objective():
    import pandas as pd

    from vitbench.report.objectives import accuracy_vs_compute, objectives

    rows = [{"kind": "fewshot", "shots": 10, "model": "ViT-Nano/4", "pretrain_steps": s, "seed": seed,
             "pretrain_exaflops": e, "accuracy": a, **extra}
            for s, e, extra in ((20, 1e-9, {}), (16, 1e-9, {"objective": "masked_patch", "mask_rate": 0.5,
                                                            "mask_target": "mean_color"}),
                                (1, 0.0, {"objective": "none"}))
            for seed, a in ((0, 0.5), (1, 0.7))]
    t = objectives(pd.DataFrame(rows))
    assert list(t["arm"]) == ["masked_patch mean_color @0.5", "none", "supervised"]
    # (0.5 + 0.7) / 2: the sum rounds once, / 2 is exact; 0.7 and 0.6 are literals rounded once each
    assert (t["seeds"] == 2).all() and t["accuracy_mean"].tolist() == pytest.approx([0.6] * 3, rel=gamma(3))
    assert accuracy_vs_compute(pd.DataFrame(rows)) is not None
    assert objectives(pd.DataFrame([r for r in rows if "objective" not in r])).empty  # supervised only: no section
    # two datasets are two benchmarks, never two seeds of one (they were averaged, with a spread between them:
    # found by a review): a row and a panel each
    two = [{**r, "dataset": d, "accuracy": r["accuracy"] + shift} for r in rows if r["seed"] == 0
           for d, shift in (("digits", 0.0), ("cifar10", 0.3))]
    t = objectives(pd.DataFrame(two))
    assert len(t) == 6 and (t["seeds"] == 1).all() and t.attrs["split_by"] == ["dataset"], t
    assert sorted(t[t["arm"] == "supervised"]["accuracy_mean"]) == [0.5, 0.8]
    fig = accuracy_vs_compute(pd.DataFrame(two))
    assert sorted(ax.get_title() for ax in fig.axes) == ["fewshot / shots=10 / dataset=cifar10",
                                                         "fewshot / shots=10 / dataset=digits"]


def test_a_row_without_its_compute_is_not_the_random_init():
    """A pre-trained row that does not say its exaFLOPs was read as 0 FLOPs: drawn as the no-pre-training band
    and tabled at 0. Unknown stays blank, is not drawn, and the legend says so; `none` without it is 0."""
    import pandas as pd

    from vitbench.report.objectives import accuracy_vs_compute, objectives

    rows = [{"kind": "fewshot", "shots": 10, "model": "ViT-Nano/4", "pretrain_steps": s, "accuracy": 0.5, **extra}
            for s, extra in ((20, {"pretrain_exaflops": 1e-9}), (30, {}),
                             (16, {"objective": "masked_patch", "mask_rate": 0.5, "mask_target": "mean_color",
                                   "pretrain_exaflops": 1e-9}), (1, {"objective": "none"}))]
    t = objectives(pd.DataFrame(rows)).set_index(["arm", "pretrain_steps"])
    assert pd.isna(t.loc[("supervised", 30), "exaflops"]) and t.loc[("none", 1), "exaflops"] == 0.0
    fig = accuracy_vs_compute(pd.DataFrame(rows))
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "supervised: 1 point(s) without their compute, not drawn" in labels
    assert not any(lab.startswith("supervised (0 FLOPs") for lab in labels), labels


@pytest.mark.usefixtures("one_torch_thread")
def test_objective_none_is_the_random_init_at_zero_compute(tmp_path):
    from vitbench.transfer.checkpoint import load_checkpoint, read_meta
    from vitbench.protocols.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(model="ViT-Nano/4", backend="torch", resolution=RES, steps=1, objective={"objective": "none"})
    rec, _ = pretrain(cfg, out=tmp_path / "none.safetensors", threads=1)
    assert rec.metrics["exaflops"] == 0 and rec.metrics["images_seen"] == 0 and rec.metrics["accuracy"] is None
    path = rec.config["checkpoint"]
    assert mpt.objective_of(read_meta(path)) is Objective.NONE
    assert not any(k.startswith("head.") for k in load_checkpoint(path).weights)
