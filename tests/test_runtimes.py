"""The inference-runtime backends (vitbench.backends.runtime: ONNX Runtime, OpenVINO): the graph each runs computes
the torch model's function on the same weights (the seed the torch backend builds them from), for the paper's
three families and a timm model; the exported graph is cached by its key; int8 is really quantised; training is
refused when a study is parsed. Tiny models, one thread."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vitbench.backends.base import Step, backend_spec, get_backend
from vitbench.models.specs import get_spec
from vitbench.models.torch import build_torch_model
from vitbench.registry import Kind, entries
from tolerances_fp import EPS32, forward_parity

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RUNTIMES = [n for n, e in entries(Kind.BACKEND).items()
            if not e.missing() and n in ("onnxruntime", "openvino")]
# (model, resolution): a ViT, a BiT, a hybrid, and a ViT from timm (built by timm, pretrained=False)
MODELS = [("ViT-Nano/4", 16), ("R-Nano", 32), ("R-Nano+ViT-Micro/8", 32), ("timm:test_vit", 32)]


def _bound(name: str, res: int) -> float:
    """forward_parity's n EPS32 (tests/tolerances_fp.py: two fp32 programs of one model, relative to the largest
    logit); timm's test_vit (patch 16, width 64, depth 6, MLP 192; 4 patches + the class token at 32 px) counted
    the way forward_roundings counts a ViT: the patch's 3 p^2, per block the tokens, 3 x the width and the MLP,
    the head's width."""
    if name == "timm:test_vit":
        return (3 * 16**2 + 6 * (5 + 3 * 64 + 192) + 64) * EPS32
    return forward_parity(get_spec(name), res)


@pytest.fixture(scope="module")
def runtimes():
    out = {}
    for name in RUNTIMES:
        be = get_backend(name)
        be.setup("cpu", threads=1)
        out[name] = be
    return out


@pytest.mark.parametrize("model,res", MODELS, ids=[m for m, _ in MODELS])
@pytest.mark.parametrize("name", RUNTIMES)
def test_runtime_logits_are_the_torch_models(name, model, res, runtimes):
    be = runtimes[name]
    work = be.prepare(Step(model, batch_size=3, resolution=res, seed=1))
    try:
        got = np.array(work.step(), dtype=np.float64)
        x = work.x
        host = work.infer_host(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))  # NHWC, as a server feeds it
    finally:
        work.close()
    spec = get_spec(model)
    torch.manual_seed(1)  # the torch backend's weights for seed 1
    ref = build_torch_model(spec, res, spec.num_classes).eval()
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).double().numpy()
    assert got.shape == want.shape == (3, spec.num_classes)
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=_bound(model, res) * np.abs(want).max())
    # the same graph on the same images through the serving path: the same function (one fp32 program run
    # twice; bounded like two, should a runtime pick another kernel for another request)
    np.testing.assert_allclose(host, got, rtol=0, atol=_bound(model, res) * np.abs(want).max())


@pytest.mark.parametrize("name", RUNTIMES)
def test_the_graph_is_cached_by_its_key_and_the_row_names_it(name, runtimes):
    be = runtimes[name]
    a = be.prepare(Step("ViT-Nano/4", batch_size=2, resolution=16, seed=1))  # exported, or the parity test's
    hits, misses = be.compile_cache_counts()
    b = be.prepare(Step("ViT-Nano/4", batch_size=4, resolution=16, seed=1))  # another batch: the same graph
    assert be.compile_cache_counts() == (hits + 1, misses)
    c = be.prepare(Step("ViT-Nano/4", batch_size=2, resolution=16, seed=7))  # other weights: another graph
    try:
        assert be.compile_cache_counts() == (hits + 1, misses + 1)
        assert a.settings["graph"] == b.settings["graph"] != c.settings["graph"]
        assert b.settings["graph_cached"] is True and c.settings["graph_cached"] is False
        assert b.settings["graph_export_s"] == a.settings["graph_export_s"] > 0  # the export's, kept
        assert a.compile_s > 0 and a.settings["intra_op_threads"] == 1 and a.settings["inter_op_threads"] == 1
        # explicit fp32, as the runtime reports it back (OpenVINO's CPU plug-in would pick bf16 on AMX by itself)
        assert {"onnxruntime": ("graph_optimization_level", "ORT_ENABLE_ALL"),
                "openvino": ("openvino_inference_precision_hint", "f32")}[name] in a.settings.items()
        assert np.array(b.step()).shape[0] == 4
    finally:
        for w in (a, b, c):
            w.close()


def test_int8_is_quantised_and_close_to_fp32(runtimes):
    """int8 (ONNX Runtime's dynamic quantization) computes another function than fp32: not within fp32's rounding
    of it. How far it moves accuracy is measured, not bounded here (docs/runtimes.md)."""
    if "onnxruntime" not in runtimes:
        pytest.skip("onnxruntime not installed")
    be = runtimes["onnxruntime"]
    out = {}
    for precision in ("fp32", "int8"):
        work = be.prepare(Step("ViT-Nano/4", batch_size=3, resolution=16, precision=precision))
        try:
            out[precision] = np.array(work.step(), dtype=np.float64)
            if precision == "int8":
                assert "int8" in work.settings["matmul_precision"]
        finally:
            work.close()
    scale = np.abs(out["fp32"]).max()
    assert np.isfinite(out["int8"]).all()
    assert np.abs(out["int8"] - out["fp32"]).max() > forward_parity(get_spec("ViT-Nano/4"), 16) * scale


def test_quantising_prints_no_advice_of_onnxruntimes_on_the_terminal(runtimes, tmp_path, caplog):
    """quantize_dynamic's root-logger warning ('Please consider to run pre-processing before quantization')
    reached the user's terminal as if vitbench asked for it; logging is as it was afterwards."""
    import logging

    if "onnxruntime" not in runtimes:
        pytest.skip("onnxruntime not installed")
    from vitbench.backends.onnxruntime.backend import export_onnx, quantize

    export_onnx(Step("ViT-Nano/4", batch_size=1, resolution=16), tmp_path / "m.onnx")
    with caplog.at_level(logging.WARNING):  # (a terminal's last-resort handler prints what is logged here)
        quantize(tmp_path / "m.onnx", tmp_path / "q.onnx")
    assert (tmp_path / "q.onnx").stat().st_size > 0
    assert not [r for r in caplog.records if "pre-processing" in r.getMessage()]
    assert logging.root.manager.disable == logging.NOTSET


def test_a_model_torch_cannot_export_is_one_line_naming_it(runtimes, tmp_path, monkeypatch):
    """torch.export's refusal (a forward that branches on its data) reached the terminal as two tracebacks, an FX
    graph and colour codes (19 KB, exit 1; found by a hostile-input review): it is one bounded line naming the
    model and the backend to use, exit 2."""
    import torch

    if "onnxruntime" not in runtimes:
        pytest.skip("onnxruntime not installed")
    from vitbench.backends.onnxruntime.backend import export_onnx
    from vitbench.errors import ConfigError

    def refuse(*a, **k):
        raise RuntimeError("\n\x1b[31mCould not guard on data-dependent expression Eq(u0, 1)\x1b[0m\n"
                           + "graph():\n    %x : [num_users=1] = placeholder[target=x]\n" * 500)

    monkeypatch.setattr(torch.onnx, "export", refuse)
    with pytest.raises(ConfigError) as e:
        export_onnx(Step("ViT-Nano/4", batch_size=1, resolution=16), tmp_path / "m.onnx")
    text = str(e.value)
    assert "\n" not in text and "\x1b" not in text and len(text) < 600, text
    assert "cannot export ViT-Nano/4 to ONNX (RuntimeError: Could not guard on data-dependent" in text
    assert "backend 'torch'" in text


class _Branches(torch.nn.Module):
    """A forward that branches on its data: the sign of the mean image picks one of two heads."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.head = torch.nn.Linear(3, num_classes)

    def forward(self, x):
        h = x.mean((2, 3))
        if h.mean() > 0:
            return self.head(h)
        return -self.head(h)


def test_openvino_refuses_a_forward_that_branches_on_its_data(runtimes, monkeypatch):
    """convert_model traced the torch module: the branch the example input (zeros) took was baked into the IR and
    OpenVINO ran another function than the model's on any other image, without a word. The conversion goes
    through torch.export, whose refusal is one line naming the model and the backend to use (exit 2)."""
    if "openvino" not in runtimes:
        pytest.skip("openvino not installed")
    from vitbench.backends.openvino import backend
    from vitbench.errors import ConfigError

    monkeypatch.setattr(backend, "build_torch_model", lambda spec, res, k: _Branches(k))
    with pytest.raises(ConfigError) as e:
        backend.convert(Step("ViT-Nano/4", batch_size=2, resolution=16, seed=1))
    text = str(e.value)
    assert "\n" not in text and "\x1b" not in text and len(text) < 700, text
    assert "backend 'openvino' cannot export ViT-Nano/4 with torch.export" in text
    assert "data-dependent" in text and "backend 'torch'" in text


def test_openvino_converts_from_torch_export_and_keys_the_graph_by_it(runtimes):
    """The IR comes from the exported program (batch axis dynamic), and the graph key names that conversion:
    an IR cached from a trace of the module is not taken for one."""
    if "openvino" not in runtimes:
        pytest.skip("openvino not installed")
    from vitbench.backends.openvino import backend

    step = Step("ViT-Nano/4", batch_size=2, resolution=16, seed=1)
    assert "torch.export" in runtimes["openvino"].graph_request(step)["converter"]
    model = backend.convert(step)
    assert model.inputs[0].get_partial_shape().to_string() == "[?,3,16,16]"


@pytest.mark.parametrize("name", RUNTIMES)
def test_a_runtime_refuses_training_naming_the_backends_that_train(name):
    spec = backend_spec(name)
    from vitbench.tasks import get_task

    problems = dict(spec.problems({"task": "train"}, get_task("train").needs))
    assert "cannot train" in problems["task"] and "backends that can train: torch, jax" in problems["task"]
    assert "backends that train: torch, jax" in dict(spec.problems({"mode": "train"}))["mode"]
    assert dict(spec.problems({"device": "cuda"}))["device"].endswith("runs on cpu only")


def test_the_shipped_study_runs_every_backend_side_by_side_and_refuses_training_on_a_runtime(tmp_path):
    from vitbench.errors import ConfigError
    from vitbench.study import load_study

    study = load_study(Path(__file__).resolve().parents[1] / "studies" / "runtimes.yaml")
    infer = [t.config for t in study.trials if t.config["task"] == "infer" and t.config["precision"] == "fp32"]
    by_model = {}
    for c in infer:
        by_model.setdefault((c["model"], c["timing"]), set()).add(c["backend"])
    assert by_model and all(b == {"torch", "jax", "onnxruntime", "openvino"} for b in by_model.values())
    assert any(t.config["precision"] == "int8" for t in study.trials)
    bad = tmp_path / "s.yaml"
    bad.write_text("name: s\naxes:\n  model: [ViT-Nano/4]\n  task: [train]\n  backend: [onnxruntime]\n")
    with pytest.raises(ConfigError, match="backends that can train: torch, jax"):
        load_study(str(bad))


def test_the_report_puts_every_backend_beside_the_default_one(tmp_path):
    """The report's 'backends' table is generic: a column of img/s per backend and each one's ratio to the
    default backend (the first registered: torch), for the same model and settings (compile off: eager)."""
    from test_report import make_results

    from vitbench.report import build_report

    make_results(tmp_path, backends=("torch", "jax", "onnxruntime", "openvino"))
    piv = build_report(tmp_path, formats="csv", plots=False).tables["backends"]
    for b in ("jax", "onnxruntime", "openvino"):
        assert {f"img_per_s_{b}", f"{b}_vs_torch"} <= set(piv.columns)
        ratio = piv[f"img_per_s_{b}"] / piv["img_per_s_torch"]
        assert (piv[f"{b}_vs_torch"] == ratio).all()  # the same one division of the same two numbers


def test_a_sweep_calibrates_only_backends_with_a_matmul_of_their_own(tmp_path):
    from vitbench.runner import calibration_trials
    from vitbench.study import load_study

    s = tmp_path / "s.yaml"
    s.write_text("name: s\ncalibration: true\naxes:\n  model: [ViT-Nano/4]\n  task: [infer]\n"
                 "  backend: [torch, onnxruntime, openvino]\n")
    cal = calibration_trials(load_study(str(s)))
    assert [t.config["backend"] for t in cal] == ["torch"]  # the runtimes' MFU uses the CPU peak torch measures


@pytest.mark.skipif("onnxruntime" not in RUNTIMES, reason="onnxruntime is not installed")
def test_the_onnxruntime_row_times_the_session_and_input_of_its_perf_tools_loop():
    """What an onnxruntime row times is what onnxruntime_perf_test's loop times (docs/runtimes.md, "vitbench
    against the runtimes' own loops"): the session options benchmarks/ort_perf_loop.py takes from the tool's
    source, and the input that loop feeds. A backend that set another option (memory pattern or arena off,
    parallel execution, a lower optimisation level) would time something its row and the docs do not say."""
    import importlib.util

    import onnxruntime as ort

    from vitbench.backends.onnxruntime.backend import SESSION_CONFIG
    from vitbench.backends.runtime import images

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "ort_perf_loop.py"
    spec = importlib.util.spec_from_file_location("ort_perf_loop", path)
    loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loop)
    be = get_backend("onnxruntime")
    be.setup("cpu", threads=1)
    ours, tool = be.session_options(), loop.session_options(be.threads)
    for option in ("enable_cpu_mem_arena", "enable_mem_pattern", "execution_mode", "graph_optimization_level",
                   "intra_op_num_threads"):
        assert getattr(ours, option) == getattr(tool, option), option
    # vitbench's own additions: inter-op threads (no inter-op pool runs in sequential mode: the tool sets them in
    # parallel mode only) and GELU's tanh approximation written out as off, ONNX Runtime's default
    assert ours.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert SESSION_CONFIG == {"optimization.enable_gelu_approximation": "0"}
    assert np.array_equal(images(2, 8, 3), loop.images(2, 8, 3))


def test_a_cached_graph_replaced_or_damaged_since_is_exported_again(tmp_path, monkeypatch):
    """A graph file under the right key that is not what the export wrote (a foreign graph copied over it, a
    truncated file): before, it was read as the model, measured at 17x the real speed, and set the device's peak;
    now the entry's hashes do not hold and the graph is exported again. No runtime needed: a fake export."""
    from vitbench import paths
    from vitbench.backends.graphs import GraphCache

    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    exports = []

    def export(d):
        exports.append(d)
        (d / "model.onnx").write_bytes(b"the real graph")

    cache = GraphCache("fake-runtime")
    first = cache.get({"model": "ViT-Nano/4"}, (), (), export)
    assert not first.cached and cache.get({"model": "ViT-Nano/4"}, (), (), export).cached
    for damage in (b"a foreign graph", b""):
        (first.path / "model.onnx").write_bytes(damage)
        again = cache.get({"model": "ViT-Nano/4"}, (), (), export)
        assert not again.cached and (again.path / "model.onnx").read_bytes() == b"the real graph"
    assert len(exports) == 3 and cache.counts() == (1, 3)


@pytest.mark.parametrize("name", ["jax", *RUNTIMES])
@pytest.mark.parametrize("value", [True, False])
def test_a_backend_with_its_own_memory_layout_refuses_channels_last(name, value):
    """channels_last was recorded and ignored on every backend but torch: two trial keys for one measurement.
    A backend that does not lay out memory on request (BackendSpec.memory_formats) refuses either value."""
    problems = dict(backend_spec(name).problems({"channels_last": value}))
    assert "chooses its own memory layout" in problems["channels_last"]
    assert f"`channels_last: {str(value).lower()}`" in problems["channels_last"]
    assert not backend_spec(name).problems({"channels_last": None}) and not backend_spec("torch").problems(
        {"channels_last": value})
