"""Transfer on the JAX backend: same numbers as torch from the same weights, and torch checkpoints in JAX."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from vitbench.backends.base import get_backend  # noqa: E402
from vitbench.models.specs import get_spec  # noqa: E402
from vitbench.transfer.data import load_splits  # noqa: E402
from vitbench.protocols.fewshot import FewshotConfig, fewshot  # noqa: E402
from vitbench.protocols.finetune import FinetuneConfig, finetune  # noqa: E402
from vitbench.protocols.pretrain import PretrainConfig, ensure_upstream  # noqa: E402
from vitbench.transfer.schedules import OptimConfig  # noqa: E402
from tolerances_fp import forward_parity  # noqa: E402

pytestmark = [pytest.mark.jax, pytest.mark.usefixtures("one_torch_thread")]
SPEC = get_spec("ViT-Nano/4")
RES = 16


@pytest.fixture(scope="module")
def engines():
    jx, th = get_backend("jax"), get_backend("torch")
    jx.setup("cpu")
    th.setup("cpu")
    return jx, th


@pytest.fixture(scope="module")
def data():
    return load_splits({"classes": "0-4"})


def test_same_weights_same_logits_and_features(engines, data):
    jx, th = engines
    mt = th.init_model(SPEC, RES, 5, seed=0)
    mj = jx.load_weights(jx.init_model(SPEC, RES, 5, seed=3), th.weights(mt))
    x = data.test.array(RES)[:16]
    tol = forward_parity(SPEC, RES)  # relative to the largest output: fp32 rounding along the forward
    for a, b in ((jx.logits(mj, x), th.logits(mt, x)), (jx.features(mj, x), th.features(mt, x))):
        assert np.abs(a - b).max() <= tol * np.abs(b).max()
    back = jx.weights(mj)  # the conversion is lossless both ways
    for k, v in th.weights(mt).items():
        np.testing.assert_array_equal(back[k], v)


def test_training_matches_torch_step_for_step(engines, data):
    """Same init, batches, schedule, decoupled decay on kernels, clipping and label smoothing => same run. SGD:
    its update is linear in the gradient, so the two programs' rounding stays rounding (tests/tolerances_fp.py);
    Adam's own arithmetic: test_adam_update_matches_torch_given_the_same_gradients."""
    from tolerances_fp import EPS32, clipped_gradient_error, model_roundings, sgd_weight_bound

    jx, th = engines
    w = th.weights(th.init_model(SPEC, RES, 5, seed=0))
    opt = OptimConfig(optimizer="sgd", lr=0.1, steps=4, warmup_steps=1, weight_decay=0.3, label_smoothing=0.1,
                      clip_norm=1.0)
    roundings = model_roundings(SPEC, RES, 16)
    bound = sgd_weight_bound(opt, clipped_gradient_error(opt, roundings))
    mt, lt = th.train(th.load_weights(th.init_model(SPEC, RES, 5, 0), w), data.train, RES, opt, 16, seed=1)
    mj, lj = jx.train(jx.load_weights(jx.init_model(SPEC, RES, 5, 0), w), data.train, RES, opt, 16, seed=1)
    # the first loss, from the same weights: the forward's rounding (a mean CE, ~log 5: never near zero); the
    # later ones follow from the weights, compared next
    assert lj[0] == pytest.approx(lt[0], rel=roundings * EPS32)
    wt, wj = th.weights(mt), jx.weights(mj)
    assert max(float(np.abs(wt[k] - wj[k]).max()) for k in wt) <= bound
    assert max(float(np.abs(wt[k] - w[k]).max()) for k in wt) > 10 * bound  # moved: the bound resolves 10 %


@pytest.mark.parametrize("model", ["ViT-Nano/4", "DeiT-Nano/4-dist"])
def test_adam_update_matches_torch_given_the_same_gradients(engines, model):
    """Adam across frameworks (torch.optim.AdamW with vitbench's decoupled decay, optax's chain): betas, eps, bias
    correction, schedule and decay on the same parameters (the distillation token: not decayed), fed one
    gradient sequence in both, so no rounding noise reaches Adam's division: the bound is Adam's own rounding
    (tests/tolerances_fp.py adam_update_bound, ~3e-6 here; a wrong beta, eps or decay set moves weights by ~lr)."""
    import jax
    import torch

    from vitbench.backends.jax.training import apply_update, make_tx
    from vitbench.backends.torch.training import make_optimizer, update
    from vitbench.models.convert import torch_to_flax
    from vitbench.transfer.schedules import lr_table
    from tolerances_fp import adam_update_bound

    jx, th = engines
    spec = get_spec(model)
    opt = OptimConfig(optimizer="adam", lr=3e-3, steps=4, warmup_steps=1, weight_decay=0.3, clip_norm=1.0)
    mt = th.init_model(spec, RES, 5, seed=0)
    w = th.weights(mt)
    mj = jx.load_weights(jx.init_model(spec, RES, 5, 0), w)
    rng = np.random.default_rng(0)
    grads = []
    for _ in range(opt.steps):
        # components at three scales: ordinary, at Adam's eps (1e-4 of the rest, ~1e-7 absolute: the regime where
        # eps decides the step) and exactly 0; global norm 0.5, below the clipping norm on both sides
        g = {k: rng.normal(0, 1, v.shape) * rng.choice([1.0, 1e-4, 0.0], v.shape) for k, v in w.items()}
        norm = np.sqrt(sum(float((v**2).sum()) for v in g.values()))
        grads.append({k: (v * 0.5 / norm).astype(np.float32) for k, v in g.items()})
    lrs = lr_table(opt)

    optim, decay, params = make_optimizer(opt, mt)
    for s, lr in enumerate(lrs):
        for k, p in mt.named_parameters():
            p.grad = torch.from_numpy(grads[s][k])
        update(optim, params, decay, opt, float(lr))

    tx = make_tx(opt, mj.params)
    step = jax.jit(lambda g, state, p, lr: apply_update(tx, g, state, p, lr))
    p, state = mj.params, tx.init(mj.params)
    for s, lr in enumerate(lrs.astype(np.float32)):  # as the JAX training loop passes it
        p, state = step(torch_to_flax(grads[s], spec), state, p, lr)
    mj.params = p

    wt, wj = th.weights(mt), jx.weights(mj)
    bound = adam_update_bound(opt, max(float(np.abs(v).max()) for v in w.values()))
    assert max(float(np.abs(wt[k] - wj[k]).max()) for k in wt) <= bound
    assert max(float(np.abs(wt[k] - w[k]).max()) for k in wt) > 100 * bound  # moved, by ~lr per step


def _fewshot_inputs(name: str, ckpt, cfg: FewshotConfig) -> tuple:
    """What the few-shot protocol gets from a backend (vitbench.protocols.fewshot.fewshot): the features of the
    train rows its draws use, of the val and of the test split; the float64 regression after them is shared."""
    from vitbench.protocols.fewshot import kshot_features
    from vitbench.transfer import ops

    be = get_backend(name)
    be.setup("cpu")
    splits = load_splits(cfg.data)
    model = ops.from_weights(be, ckpt.spec, ckpt.weights, RES, ckpt.num_classes or 1, seed=0)
    labels, rows, train = kshot_features(be, model, splits, RES, cfg.shots, cfg.seeds, ckpt.spec.name)
    val, test = ops.embed(be, model, splits.val, RES), ops.embed(be, model, splits.test, RES)
    return (train, labels), val, test, rows, splits.num_classes


def test_torch_checkpoint_fewshot_and_finetune_in_jax(tmp_path):
    from vitbench.protocols.fewshot import evaluate_features

    up = PretrainConfig(model="ViT-Nano/4", resolution=RES, steps=80, warmup_steps=8, batch_size=32, lr=3e-3)
    ckpt, _ = ensure_upstream(up, directory=tmp_path)  # trained with torch
    assert ckpt.meta["backend"] == "torch"
    cfgs = {b: FewshotConfig(checkpoint=str(ckpt.path), backend=b, shots=[5], seeds=2) for b in ("torch", "jax")}
    fs = {b: fewshot(cfg) for b, cfg in cfgs.items()}
    assert fs["jax"].config["backend"] == "jax"
    # What the comparison means: JAX's few-shot differs from torch's only through the features (the regression
    # after them is the same float64 code). So: the features of every image it reads agree to the forward's fp32
    # bound (relative to the largest: tests/tolerances_fp.py forward_parity) ...
    inputs = {b: _fewshot_inputs(b, ckpt, cfg) for b, cfg in cfgs.items()}
    tol = forward_parity(SPEC, RES)
    for (a, ya), (b, yb) in zip(inputs["jax"][:3], inputs["torch"][:3]):
        assert np.array_equal(ya, yb) and np.abs(a - b).max() <= tol * np.abs(b).max()
    # ... and each record is exactly what the shared regression makes of its own backend's features (float64,
    # deterministic). Its accuracy then differs only where a test image's two largest scores lie within what
    # the features' rounding moves them, a prediction flipping there by 1 / (images x seeds): not a number to
    # bound in advance (that margin is the data's), so the accuracies themselves are not compared.
    cfg = cfgs["torch"]
    for name, (train, val, test, rows, classes) in inputs.items():
        metrics, raw = evaluate_features(train, val, test, classes, cfg.shots, cfg.seeds, cfg.l2_reg,
                                         train_rows=rows)
        assert fs[name].metrics["accuracy"] == metrics["accuracy"] and fs[name].raw["l2"] == raw["l2"]
    # resolution 24: an interpolated pos-embed
    ft = {b: finetune(FinetuneConfig(checkpoint=str(ckpt.path), backend=b, steps=60, warmup_steps=5,
                                     batch_size=32, lr_grid=[0.1], resolution=24, seeds=1))
          for b in ("torch", "jax")}
    m = ft["jax"].metrics
    assert ft["jax"].config["backend"] == "jax" and ft["jax"].config["upstream_backend"] == "torch"
    # the zero head ties every logit, so both predict the first class everywhere: the same accuracy, exactly
    assert m["initial_accuracy"] == ft["torch"].metrics["initial_accuracy"]
    assert m["accuracy"] > m["initial_accuracy"] + 0.25
    # Not derived: 60 SGD steps carry the two programs' rounding through the training's dynamics, beyond the
    # linear bound of tests/tolerances_fp.py sgd_weight_bound (test_training_matches_torch_step_for_step checks the
    # same updates step for step); a test prediction flips by 1 / n. Allowed: 4 of the n test images.
    n = len(inputs["torch"][2][1])
    assert abs(m["accuracy"] - ft["torch"].metrics["accuracy"]) <= 4 / n


@pytest.mark.parametrize("model", ["ViT-Nano/4", "ViT-Nano/4[rep_size=16,posemb=learned_2d]",
                                   "ViT-Nano/4[posemb=relative]", "ViT-Nano/4[classifier=gap]", "DeiT-Nano/4-dist",
                                   "R-Nano+ViT-Micro/8", "R-Nano", "Axial-ViT-Nano/4", "Axial-R-Nano"])
def test_both_backends_initialise_every_parameter_from_the_same_distribution(model):
    """A model trained from scratch (the torch backend's init_model): torch built timm's default initialisation (truncated normal 0.02 on every kernel, a random head), the Flax
    models vit_jax's (Xavier-uniform kernels, zero head and class token): ViT-Nano/4's first qkv kernel had std
    0.020 against 0.177, and pre-training the same recipe from each start gave 0.964 against 0.987 test accuracy
    on digits. Per parameter, zero on both or neither, and the sample standard deviations alike: two samples of
    n values of one distribution differ in std by a relative ~1/sqrt(n - 1) (the normal's; a uniform's or a
    truncated normal's less), so 6 of those is a bound a same-distribution pair exceeds with odds ~1e-9."""

    from vitbench.models.convert import flax_to_torch
    from vitbench.models.flax import build_flax_model, init_params

    spec = get_spec(model)
    th = get_backend("torch")
    th.setup("cpu")
    mine = {k: v.detach().numpy() for k, v in th.init_model(spec, 32, 5, seed=0).state_dict().items()}
    flax = {k: np.asarray(v) for k, v in flax_to_torch(init_params(build_flax_model(spec, 32, 5), 32, 0),
                                                         spec).items()}
    assert set(mine) == set(flax)
    for k, w in mine.items():
        st, sf = float(w.std()), float(flax[k].std())
        assert (st == 0) == (sf == 0), (k, st, sf)
        if sf == 0:  # a constant (a norm's scale, a zero head): the same one (the hybrid's gn3 was 1, norm3 0)
            assert float(w.mean()) == float(flax[k].mean()), (k, float(w.mean()), float(flax[k].mean()))
        if sf > 0:
            assert abs(st / sf - 1) <= 6 / np.sqrt(max(w.size - 1, 1)), (k, w.shape, st, sf)
