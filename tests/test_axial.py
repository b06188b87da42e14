"""Axial-ViT and Axial-ResNet (ViT paper D.6): both backends from one row, weights both ways, analytic = counted,
axial mixing, overrides, checkpoints; and the family registry (a toy family registered from this module)."""

from __future__ import annotations

import numpy as np
import pytest

from vitbench.errors import ConfigError
from vitbench.models.analytic import analytic_counts
from vitbench.models.families import Axis
from vitbench.models.specs import all_specs, get_spec
from tolerances_fp import forward_parity

TINY = ["Axial-ViT-Nano/4", "Axial-R-Nano"]


def _torch_flax(name, seed=0):
    import torch

    from vitbench.models.convert import flax_to_torch, torch_to_flax
    from vitbench.models.torch import build_torch_model

    spec = get_spec(name)
    torch.manual_seed(seed)
    model = build_torch_model(spec).eval()
    params = torch_to_flax(model.state_dict(), spec)
    return spec, model, params, flax_to_torch, torch_to_flax


@pytest.mark.parametrize("name", TINY)
def test_torch_and_flax_compute_the_same_function_and_weights_convert_both_ways(name):
    import jax.numpy as jnp
    import torch

    from vitbench.models.flax import build_flax_model

    spec, model, params, flax_to_torch, _ = _torch_flax(name)
    x = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
        feats = model.forward_head(model.forward_features(torch.from_numpy(x)), pre_logits=True).numpy()
        xd = torch.from_numpy(x).double()
        exact = model.double()(xd).numpy()  # float64: the function itself
        exact_f = model.forward_head(model.forward_features(xd), pre_logits=True).numpy()
        model.float()
    fm = build_flax_model(spec)
    got = np.asarray(fm.apply({"params": params}, jnp.asarray(x.transpose(0, 2, 3, 1))))
    # Flax's fp32 forward against the float64 function: within an fp32 forward's rounding (forward_parity, relative
    # to the largest output: Axial-ViT's chain counts like a ViT's, ~8e-5), or within twice torch's own fp32
    # error where the random-init network amplifies rounding past that bound's gain ~1 (the tiny Axial-ResNet's
    # GroupNorms on 2x2 and 1x1 maps: torch fp32 vs fp64 differ by ~1e-4 there; its chain is not counted, so its
    # bound is torch's error alone)
    parity = forward_parity(spec, 32) if spec.family == "axial_vit" else 0.0
    own = np.abs(want - exact).max()
    assert np.abs(got - exact).max() <= max(parity * np.abs(exact).max(), 2 * own)
    got_f = np.asarray(fm.apply({"params": params}, jnp.asarray(x.transpose(0, 2, 3, 1)), pre_logits=True))
    own_f = np.abs(feats - exact_f).max()
    assert np.abs(got_f - exact_f).max() <= max(parity * np.abs(exact_f).max(), 2 * own_f)
    back = flax_to_torch(params, spec)
    sd = model.state_dict()
    assert set(back) == set(sd)
    for k, v in back.items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy())


@pytest.mark.parametrize("name", TINY)
def test_analytic_params_and_macs_equal_the_counted_ones_on_both_backends(name):
    import jax
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from vitbench.models.flax import build_flax_model
    from vitbench.models.param_table import flatten
    from vitbench.models.torch import build_torch_model

    spec = get_spec(name)
    want = analytic_counts(spec)
    model = build_torch_model(spec).eval()
    assert sum(p.numel() for p in model.parameters()) == want.params
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(torch.zeros(1, 3, 32, 32))
    assert fc.get_total_flops() == 2 * want.macs  # scores, relative logits and weighted sums included
    # the parameters' names and shapes as the model's init makes them (traced, not compiled: init_params runs
    # this same init, jitted, which only adds values; they count nothing here)
    fm = build_flax_model(spec)
    params = jax.eval_shape(fm.init, jax.random.PRNGKey(0), jax.numpy.zeros((1, 32, 32, 3), np.float32))["params"]
    assert sum(int(np.prod(v.shape)) for v in flatten(params).values()) == want.params
    assert set(flatten(params)) == {p for e in __import__("vitbench.models.param_table", fromlist=["x"])
                                    .param_table(spec) for p in e.flax_paths}


@pytest.mark.parametrize("backend", ["torch", "flax"])
def test_a_row_layer_mixes_only_along_its_row_and_a_column_layer_only_along_its_column(backend):
    """Known answer: perturb one cell of a (1, 6, 5, C) map; after a row layer only that cell's row changes,
    after a column layer only its column (each with relative logits, as in Axial-ResNet)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 6, 5, 8)).astype(np.float32)
    x2 = x.copy()
    x2[0, 2, 3] += 1.0
    for along, keep in ((Axis.ROW, lambda d: d[0, 2]), (Axis.COLUMN, lambda d: d[0, :, 3])):
        if backend == "torch":
            import torch

            from vitbench.models.families.axial.torch import AxialAttention

            torch.manual_seed(0)
            length = 5 if along is Axis.ROW else 6
            layer = AxialAttention(8, 2, along, bias=False, proj=False, length=length)
            with torch.no_grad():
                d = (layer(torch.from_numpy(x2)) - layer(torch.from_numpy(x))).abs().numpy()
        else:
            import jax

            from vitbench.models.families.axial.flax import AxialAttention

            layer = AxialAttention(2, along, bias=False, proj=False, relative=True)
            p = layer.init(jax.random.PRNGKey(0), x)
            d = np.abs(np.asarray(layer.apply(p, x2)) - np.asarray(layer.apply(p, x)))
        inside = keep(d).sum()
        assert inside > 1e-3  # a real change from a unit perturbation: 4 orders above fp32 rounding (~1e-7)
        # outside the row/column the same program reads the same inputs at the same places: bitwise 0 (exact, no
        # tolerance); a leak would be of the inside's scale (> 1e-3)
        outside = np.ones(d.shape, bool)
        keep(outside)[...] = False
        assert (d[outside] == 0).all()


def test_a_checkpoint_round_trips_through_safetensors_into_both_backends(tmp_path):
    import torch

    from vitbench.models.torch import build_torch_model
    from vitbench.transfer.checkpoint import save_checkpoint

    spec, model, params, flax_to_torch, torch_to_flax = _torch_flax("Axial-R-Nano", seed=3)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    path = save_checkpoint(tmp_path / "axial", sd, {"model": spec.name, "spec": spec.to_dict()})
    from safetensors.numpy import load_file

    loaded = load_file(str(path))
    fresh = build_torch_model(spec).eval()
    fresh.load_state_dict({k: torch.from_numpy(v) for k, v in loaded.items()}, strict=True)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())
    back = flax_to_torch(torch_to_flax(loaded, spec), spec)  # through the Flax layout and back: bit-exact
    assert all(np.array_equal(back[k].numpy(), v) for k, v in loaded.items()) and set(back) == set(loaded)


def test_rows_overrides_and_errors():
    names = {s.name for s in all_specs("axial_vit")} | {s.name for s in all_specs("axial_resnet")}
    assert {"Axial-ViT-B/32", "Axial-ViT-B/16", "Axial-ResNet-50", "Axial-ViT-Nano/4", "Axial-R-Nano"} <= names
    s = get_spec("Axial-ViT-Nano/4[depth=1,heads=4,patch=8]")
    assert (s.arch.depth, s.arch.heads, s.stride, s.tokens(32)) == (1, 4, 8, 16)
    assert analytic_counts(s).macs < analytic_counts(get_spec("Axial-ViT-Nano/4")).macs
    r = get_spec("Axial-R-Nano[blocks=1x1x1,heads=4]")
    assert (r.stride, r.feature_dim) == (16, 128)
    with pytest.raises(ConfigError, match="does not apply to a axial_resnet model; allowed: width_factor"):
        get_spec("Axial-R-Nano[width=64]")
    with pytest.raises(ConfigError, match="heads=3 must divide width=32"):
        get_spec("Axial-ViT-Nano/4[heads=3]")


@pytest.mark.filterwarnings("ignore:ModelSpec.patch moved:DeprecationWarning")
def test_a_family_registered_from_outside_the_package_builds_counts_and_converts(scratch_registry):
    """A toy family (a linear model on pooled pixels) registered from this test module: every shared entry
    point (table, name lookup, overrides, analytic counts, both builders, conversion) goes through the registry.
    It is written against ModelSpec's flat fields of before issue 52 (`patch=8`, `s.patch`): they still work, with
    a DeprecationWarning (docs/plugins.md, 'Moved fields')."""
    from vitbench.models.analytic import Counts
    from vitbench.models.convert import torch_to_flax
    from vitbench.models.families import (
        FamilyBuild,
        FamilyComputation,
        FamilyName,
        FamilyPlugin,
        family_names,
        register_family,
    )
    from vitbench.models.param_table import _linear
    from vitbench.models.specs import ModelSpec
    from vitbench.models.torch import build_torch_model

    with pytest.warns(DeprecationWarning, match=r"flat fields of before issue 52 \(patch\) go in `arch=`"):
        row = ModelSpec(name="Toy-Linear/8", family=FamilyName("toy_linear"), tiny=True, resolution=32,
                        num_classes=10, patch=8)
    assert row.arch.patch == 8 and row.flat()["patch"] == 8
    plugin = FamilyPlugin(
        name=FamilyName("toy_linear"), description="pooled pixels -> linear", rows=(row,), fields=("patch",),
        override_keys=("patch",), build=FamilyBuild(torch=f"{__name__}:_toy_torch", flax=f"{__name__}:_toy_flax"),
        computation=FamilyComputation(counts=lambda s, r, k: Counts(3 * k + k, 3 * k),
                                      param_table=lambda s, r: _linear("head", "head"), stride=lambda s: s.patch,
                                      feature_dim=lambda s: 3, describe=lambda s: "toy"))
    register_family(plugin)
    register_family(plugin)  # the same object twice: harmless
    assert "toy_linear" in family_names()
    spec = get_spec("toy-linear/8[patch=16]")
    assert (spec.stride, spec.describe(), analytic_counts(spec).params) == (16, "toy", 40)
    model = build_torch_model(spec)
    assert sum(p.numel() for p in model.parameters()) == 40
    assert set(torch_to_flax(model.state_dict(), spec)["head"]) == {"kernel", "bias"}
    from vitbench.insight.run import inspect_model  # a family that declares no attention maps: refused, saying so

    with pytest.raises(ConfigError, match="inspect does not apply to Toy-Linear/8 .family toy_linear.: its attention is "
                                          "not one tokens x tokens map"):
        inspect_model({}, get_spec("Toy-Linear/8"), 32, np.zeros((1, 32, 32, 3), np.float32), None)


def _toy_torch(spec, resolution, num_classes):
    import torch

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(3, num_classes)

        def forward(self, x):
            return self.head(x.mean(dim=(2, 3)))

    return Toy()


def _toy_flax(spec, num_classes, dtype):
    raise NotImplementedError


def test_figure13_section_joins_accuracy_compute_gflops_and_speed_per_backend():
    import pandas as pd

    from vitbench.report import figure13

    rows = []
    for m, res, speed in (("ViT-Nano/4", 16, 900.0), ("Axial-ViT-Nano/4", 16, 300.0)):
        for steps, acc in ((100, 0.5), (300, 0.7)):
            rows.append(dict(kind="fewshot", model=m, resolution=res, accuracy=acc,
                             pretrain_exaflops=steps * 1e-10,
                             shots=10, backend="torch"))
        for b, f in (("torch", 1.0), ("jax", 2.0)):
            rows.append(dict(kind="bench", task="infer", model=m, resolution=res, backend=b, img_per_s=speed * f))
    t = figure13.table(pd.DataFrame(rows))
    assert len(t) == 4 and set(t["family"]) == {"vit", "axial_vit"}
    ax = t[(t["model"] == "Axial-ViT-Nano/4") & (t["backend"] == "jax")].iloc[0]
    want = analytic_counts(get_spec("Axial-ViT-Nano/4"), 16).gflops
    # exact: the table reads the same analytic count and multiplies it by the same img/s (one rounding, the same)
    assert ax["gflops"] == want and ax["img_per_s"] == 600.0 and ax["accuracy"] == 0.7
    assert ax["achieved_gflop_per_s"] == 600.0 * want
    assert figure13.figure(pd.DataFrame(rows)) is not None
    assert figure13.table(pd.DataFrame(rows[:2])).empty  # no speed rows: no section


def test_figure13_never_pools_resolutions_or_devices():
    """Accuracies at 32 and 64 px were averaged as two 'seeds' (0.7 of 0.5 and 0.9) and set against the 32 px
    speed; a CPU's and a GPU's speed of one model were two rows differing in img/s alone, and the accuracy-vs-speed
    figure took the GPU's silently (found by a review). Each resolution and device is its own row and point."""
    import pandas as pd

    from vitbench.report import figure13, fit_figures

    rows = [dict(kind="finetune", model="ViT-Nano/4", resolution=res, accuracy=acc, pretrain_exaflops=1e-8,
                 backend="torch", dataset="digits", status="ok", family="vit") for res, acc in ((32, 0.5), (64, 0.9))]
    rows += [dict(kind="bench", task="infer", model="ViT-Nano/4", resolution=res, backend="torch", device=dev,
                  img_per_s=ips, status="ok", batch_size=8, family="vit")
             for res, dev, ips in ((32, "cpu", 100.0), (64, "cpu", 30.0), (32, "cuda", 5000.0), (64, "cuda", 900.0))]
    t = figure13.table(pd.DataFrame(rows))
    assert sorted(zip(t["resolution"], t["device"], t["accuracy"], t["seeds"], t["img_per_s"])) == [
        (32, "cpu", 0.5, 1, 100.0), (32, "cuda", 0.5, 1, 5000.0), (64, "cpu", 0.9, 1, 30.0),
        (64, "cuda", 0.9, 1, 900.0)]
    assert figure13.figure(pd.DataFrame(rows)) is not None
    fig = fit_figures.throughput_vs_accuracy(pd.DataFrame(rows), speed_task="infer", compute="pretrain_exaflops")
    points = sorted(tuple(p) for c in fig.axes[0].collections for p in c.get_offsets().tolist())
    assert points == [(30.0, 90.0), (100.0, 50.0), (900.0, 90.0), (5000.0, 50.0)], points


@pytest.mark.parametrize("name", TINY)
def test_the_flops_task_counts_axial_models_with_every_torch_counter(name):
    """fvcore traces the model (the relative index is built in torch, so tracing works) and sees at least the
    analytic MACs (it adds norm terms); FlopCounterMode equals them."""
    from vitbench.measure.flops import flops

    rec = flops(name)
    assert rec.status == "ok"
    assert rec.metrics["rel_diff_torch_flop_counter"] == 0.0  # equal integer MAC counts: their ratio is exactly 1
    assert rec.metrics["gmacs_fvcore"] >= rec.metrics["gmacs"]


def test_axial_vit_grid_position_table_resizes_in_2d_and_relative_tables_are_refused():
    from vitbench.models.posemb_resize import resize_table

    g = np.arange(4 * 4 * 2, dtype=np.float32).reshape(1, 4, 4, 2)
    assert resize_table("pos_embed", g, (1, 4, 4, 2), 0) is g
    up = resize_table("pos_embed", g, (1, 8, 8, 2), 0)
    assert up.shape == (1, 8, 8, 2)
    assert up[0, :, :, 0].min() >= g[0, :, :, 0].min() and up[0, :, :, 0].max() <= g[0, :, :, 0].max()
    with pytest.raises(ConfigError, match="use the pre-training resolution"):
        resize_table("rel_embedding", np.zeros((15, 4), np.float32), (7, 4), 0)


@pytest.mark.parametrize("name, resolution", [("Axial-ViT-Nano/4", 16), ("Axial-R-Nano", 64)])
def test_weights_made_at_another_resolution_are_recognised_at_it_in_both_namings(name, resolution):
    """The grid-sized tables (Axial-ViT's (1, h, w, D) position table, Axial-ResNet's relative tables) say the
    resolution, so a checkpoint made off the row's native size loads (and converts) at its own."""
    from vitbench.models import posemb
    from vitbench.models.checkpoints import check_weights
    from vitbench.models.convert import flatten, torch_to_flax
    from vitbench.models.torch import build_torch_model

    spec = get_spec(name)
    weights = {k: v.numpy() for k, v in build_torch_model(spec, resolution, 10).state_dict().items()}
    assert check_weights(weights, spec).resolution == resolution
    flat = {k: tuple(v.shape) for k, v in flatten(torch_to_flax(weights, spec)).items()}
    assert posemb.resolution_of(flat, spec, "flax_path") == resolution
    assert posemb.resolution_of({}, spec) == spec.resolution  # nothing grid-sized: the native one
