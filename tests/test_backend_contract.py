"""The contract every registered backend keeps: what its declared capabilities promise, checked the same way for
each (torch and JAX here; a plug-in backend can run this module against itself with VITBENCH_PLUGINS set).

Tiny models, one thread; heavy checks (torch.compile) are marked slow.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vitbench.backends.base import (Backend, Capability, DeviceKind, MemoryKind, Step, StopRule, backend_spec,
                                   get_backend)
from vitbench.cpus import ThreadsChosen
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import get_spec
from vitbench.registry import Kind, entries
from tolerances_fp import EPS32, forward_parity

MODEL = "ViT-Nano/4"
AVAILABLE = [name for name, e in entries(Kind.BACKEND).items() if not e.missing()]


def _cases(capability: Capability) -> list:
    return [pytest.param(n, marks=() if capability in backend_spec(n).capabilities else
                         pytest.mark.skip(reason=f"{n} does not declare {capability.value}")) for n in AVAILABLE]


@pytest.fixture(scope="module")
def backends() -> dict[str, Backend]:
    out = {}
    for name in AVAILABLE:
        be = get_backend(name)
        be.setup("cpu")  # the framework's default threads: JAX fixes its pools once per process
        out[name] = be
    return out


def test_every_backend_is_described_without_importing_it():
    assert AVAILABLE, "no backend is available"
    for name in AVAILABLE:
        spec = backend_spec(name)
        assert spec.name == name and spec.capabilities and spec.precisions and spec.devices
        assert spec.problems({"precision": "fp8"})[0][0] == "precision"  # what it cannot run is a problem
        assert spec.problems({"precision": spec.precisions[0]}) == []


@pytest.mark.parametrize("name", AVAILABLE)
def test_setup_names_what_it_resolved_and_versions_come_from_metadata(name, backends):
    be = backends[name]
    info = be.setup("cpu")
    assert info["backend"] == name and info["device"] == "cpu" and info["threads"] >= 1
    assert info["threads_chosen"] in ThreadsChosen.values()  # every row says how its thread count was chosen
    versions = be.versions()
    assert set(be.spec.distributions) <= set(versions) and all(versions[d] for d in be.spec.distributions)
    assert all("+" not in str(v) for v in versions.values() if v)  # package metadata, not local build tags


@pytest.mark.parametrize("name", _cases(Capability.INFER))
def test_infer_steps_are_timed_after_a_sync(name, backends):
    be = backends[name]
    work = be.prepare(Step(MODEL, mode="infer", batch_size=2))
    try:
        out = work.step()
        work.sync(out)
        assert work.batch_size == 2
        times = be.time_steps(work, StopRule(min_steps=3, min_seconds=0.0, max_seconds=30))
        assert len(times) >= 3 and all(t > 0 and math.isfinite(t) for t in times)
    finally:
        work.close()


@pytest.mark.parametrize("name", _cases(Capability.INFER))
def test_throughput_windows_queue_steps_and_the_device_is_named(name, backends):
    be = backends[name]
    assert be.device_info().kind is DeviceKind.CPU and be.spec.device_string(DeviceKind.CPU) == "cpu"
    work = be.prepare(Step(MODEL, mode="infer", batch_size=2))
    try:
        work.sync(work.step())
        windows = be.time_windows(work, 3, StopRule(min_steps=6, min_seconds=0.0, max_seconds=30, min_windows=2))
        assert len(windows) >= 2 and all(w > 0 and math.isfinite(w) for w in windows)
    finally:
        work.close()


@pytest.mark.parametrize("name", _cases(Capability.INFER))
def test_a_thread_that_made_the_trials_device_its_own_runs_the_steps(name, backends):
    """A framework may keep the current device per thread (torch's CUDA device: a new thread's is device 0): a
    thread other than setup's that runs steps (the serve task's) first calls `use_device_in_this_thread`, and
    the backend's steps then run there as on setup's thread."""
    from concurrent.futures import ThreadPoolExecutor

    be = backends[name]
    work = be.prepare(Step(MODEL, mode="infer", batch_size=2))
    try:
        with ThreadPoolExecutor(1, initializer=be.use_device_in_this_thread) as thread:
            thread.submit(lambda: work.sync(work.step())).result()
            windows = thread.submit(be.time_windows, work, 2, StopRule(min_steps=2, min_seconds=0.0,
                                                                       max_seconds=30)).result()
        assert windows and all(w > 0 and math.isfinite(w) for w in windows)
    finally:
        work.close()


@pytest.mark.parametrize("name", _cases(Capability.TRAIN))
def test_train_steps_update_and_report_a_finite_loss(name, backends):
    be = backends[name]
    work = be.prepare(Step(MODEL, mode="train", batch_size=4, optimizer="sgd"))
    try:
        for _ in range(2):
            out = work.step()
            work.sync(out)
        loss = out[1] if isinstance(out, tuple) else out
        assert math.isfinite(float(np.asarray(loss if not hasattr(loss, "detach") else loss.detach())))
    finally:
        work.close()


@pytest.mark.parametrize("name", _cases(Capability.MEMORY))
def test_peak_memory_is_measured_per_step(name, backends):
    be = backends[name]
    be.reset_peak_memory()
    work = be.prepare(Step(MODEL, mode="infer", batch_size=2))
    try:
        work.sync(work.step())
        assert be.peak_memory_mib() >= 0 and be.process_peak_mib() > 0
        be.restart_peak_memory(work)  # the steady phase: the state still counts
        work.sync(work.step())
        state = work.state_bytes()
        assert isinstance(be.memory_kind(), MemoryKind) and be.peak_memory_mib() >= (state or 0) / 2**20
    finally:
        work.close()
        be.cleanup()


@pytest.mark.parametrize("name", _cases(Capability.MAX_BATCH))
def test_out_of_memory_is_recognised_and_a_probe_runs_in_a_fresh_process(name, backends):
    from vitbench.measure.max_batch import run_probe

    be = backends[name]
    assert be.is_oom(MemoryError()) and not be.is_oom(ValueError("shape mismatch"))
    probe = run_probe(Step(MODEL, mode="infer"), batch=2, backend=name, threads=1, timeout_s=300)  # own process
    assert probe.fits and probe.status == "ok" and probe.process_peak_mib > 0, probe


@pytest.mark.parametrize("name", _cases(Capability.FLOPS))
def test_flop_counters_count_the_model(name, backends):
    spec = get_spec(MODEL)
    counted = backends[name].count_flops(spec, 32, spec.num_classes)
    analytic = analytic_counts(spec, 32, spec.num_classes).macs
    assert counted and all(c["excludes"] for c in counted.values())
    for c in counted.values():  # counters add elementwise work (norms, ...) but never miss a matmul
        assert analytic <= c["macs"] < 1.5 * analytic, counted


@pytest.mark.parametrize("name", _cases(Capability.MATMUL_PEAK))
def test_matmul_throughput_is_positive_flops(name, backends):
    flops = backends[name].matmul_flops_per_s("fp32", n=256, seconds=0.05)
    assert 1e6 < flops < 1e16


@pytest.mark.parametrize("name", _cases(Capability.TRANSFER))
def test_transfer_primitives_round_trip_in_timm_naming(name, backends):
    from vitbench.models.torch import build_torch_model
    from vitbench.transfer.data import load_splits
    from vitbench.transfer.schedules import OptimConfig

    be = backends[name]
    spec = get_spec(MODEL)
    model = be.init_model(spec, 16, 5, seed=0)
    weights = be.weights(model)
    assert set(weights) == set(build_torch_model(spec, 16, 5).state_dict())  # timm naming, every tensor
    assert all(w.dtype == np.float32 for w in weights.values())
    again = be.weights(be.load_weights(be.init_model(spec, 16, 5, seed=1), weights))
    assert all(np.array_equal(again[k], v) for k, v in weights.items())
    data = load_splits({"classes": "0-4"})
    x = data.test.array(16)[:3]
    assert be.logits(model, x).shape == (3, 5) and be.features(model, x).shape == (3, spec.feature_dim)
    compile_before = be.compile_s
    model, losses = be.train(model, data.train, 16, OptimConfig(steps=2, warmup_steps=1), 8, seed=0)
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses) and be.compile_s >= compile_before


@pytest.mark.slow
@pytest.mark.parametrize("name", _cases(Capability.COMPILE))
def test_the_optional_compiler_runs_the_same_step(name, backends):
    """The compiled step computes the eager step's function: the same seeded weights and input give the same
    logits. Bound: the compiler may fuse and reassociate fp32 sums, so the two are two fp32 programs of one model:
    forward_parity (each logit's longest chain of roundings, ViT-Nano/4 at 32 px: 658 x EPS32 = 7.8e-5), relative
    to the largest logit (so it holds where single logits cross zero)."""
    be = backends[name]
    out = {}
    for compiled in (False, True):
        work = be.prepare(Step(MODEL, mode="infer", batch_size=2, compile=compiled))
        try:
            y = work.step()
            work.sync(y)
            out[compiled] = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y, dtype=np.float64)
        finally:
            work.close()
    eager, compiled = out[False], out[True]
    assert eager.shape == compiled.shape and np.isfinite(compiled).all()
    bound = forward_parity(get_spec(MODEL), 32) * np.abs(eager).max()
    np.testing.assert_allclose(compiled, eager, rtol=0, atol=bound)
    assert not np.array_equal(eager, np.zeros_like(eager))  # a real output, not an empty step


@pytest.mark.parametrize("name", _cases(Capability.ATTENTION))
def test_attention_maps_are_probabilities_over_every_token(name, backends):
    from vitbench.models.torch import build_torch_model

    spec = get_spec(MODEL)
    weights = {k: v.numpy() for k, v in build_torch_model(spec, 32).state_dict().items()}
    x = np.random.default_rng(0).standard_normal((2, 32, 32, 3)).astype(np.float32)
    a = np.asarray(backends[name].attention_maps(weights, spec, 32, x))
    t = spec.tokens(32) + spec.num_prefix_tokens
    assert a.shape == (spec.arch.depth, 2, spec.arch.heads, t, t)
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=0, atol=(t + 4) * EPS32)  # softmax (4 roundings) summed over t
