"""What the runtime and serve rows record, recomputed from what they ran: the int8 graph's integer and float
products (what runs on int8, what stays fp32), the state counted as torch counts it (weights and input, not the
graph's files), an unset thread count decided by torch's rule, MultiStream's completed samples per second, the
LoadGen settings that applied (None where none did) and where capacity_samples_per_s came from. Tiny models,
one thread, the shortest LoadGen runs."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import pytest
import torch

from vitbench.backends.base import Step, get_backend
from vitbench.models.specs import get_spec
from vitbench.models.torch import build_torch_model
from vitbench.registry import Kind, entries

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RUNTIMES = [n for n, e in entries(Kind.BACKEND).items()
            if not e.missing() and n in ("onnxruntime", "openvino")]
NANO, RES = "ViT-Nano/4", 16
ORT = pytest.mark.skipif("onnxruntime" not in RUNTIMES, reason="onnxruntime is not installed")


def _prepare(name: str, precision: str = "fp32"):
    be = get_backend(name)
    be.setup("cpu", threads=1)
    return be.prepare(Step(NANO, batch_size=2, resolution=RES, seed=1, precision=precision))


@ORT
def test_the_int8_row_says_what_runs_on_int8_and_what_stays_fp32():
    """Dynamic quantization makes int8 the products with a weight only: attention's q.k^T and attn.v (two
    activations) stay fp32 MatMuls. The row's counts are the graph's own, and its label says both."""
    work = _prepare("onnxruntime", "int8")
    try:
        s = dict(work.settings)
        graph = onnx.load(str(work.graph.path / "model.int8.onnx"))
    finally:
        work.close()
    ops = Counter(n.op_type for n in graph.graph.node)
    assert s["graph_int8_matmul_nodes"] == ops["MatMulInteger"] > 0
    assert s["graph_int8_conv_nodes"] == ops["ConvInteger"] == 1  # the patch embedding
    assert s["graph_fp32_matmul_nodes"] == ops["MatMul"] + ops["Gemm"] == 2 * get_spec(NANO).arch.depth
    assert s["graph_fp32_conv_nodes"] == ops["Conv"] == 0
    assert s["graph_fp32_activation_product_nodes"] == s["graph_fp32_matmul_nodes"]  # no weight left in fp32
    assert 0 < s["graph_int8_macs_fraction"] < 1
    label = s["matmul_precision"]
    assert f"{ops['MatMulInteger']} MatMulInteger" in label and "fp32 for" in label and "attention" in label
    assert f"{1 - s['graph_int8_macs_fraction']:.0%} of the MACs" in label


def _torch_state_bytes(x: np.ndarray) -> int:
    """What torch's state counts of an inference step (parameters, buffers, the input) for the seeded model."""
    spec = get_spec(NANO)
    torch.manual_seed(1)
    model = build_torch_model(spec, RES, spec.num_classes)
    return sum(t.nbytes for t in (*model.parameters(), *model.buffers())) + x.nbytes


@pytest.mark.parametrize("name", RUNTIMES)
def test_the_state_is_the_graphs_weights_and_the_input_as_torch_counts_them(name):
    """The same weights and input: about torch's state_bytes (a few constants the graph adds), not the graph's
    files (the ONNX exporter's node metadata, OpenVINO's XML, the cache's key.json)."""
    work = _prepare(name)
    try:
        state, x = work.state_bytes(), work.x
        files = sum(p.stat().st_size for p in work.graph.path.iterdir() if p.is_file())
    finally:
        work.close()
    want = _torch_state_bytes(x)
    assert 0.97 < state / want < 1.03, (state, want)
    assert state < files + x.nbytes


@pytest.mark.parametrize("name", RUNTIMES)
def test_an_unset_thread_count_follows_torchs_rule(name, monkeypatch):
    """OMP_NUM_THREADS set and no count asked for: torch takes the variable's count ('default'); so do the
    runtimes (which read no such variable themselves: the count is set on them)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    want = get_backend("torch").setup("cpu", threads=None)
    got = get_backend(name).setup("cpu", threads=None)
    assert (got["threads"], got["threads_chosen"]) == (want["threads"], want["threads_chosen"]) == (1, "default")


# -- serve --------------------------------------------------------------------------------------------------------
def _log(**entries) -> str:
    return "\n".join(":::MLLOG " + json.dumps({"key": k, "value": v}) for k, v in entries.items())


# a MultiStream run's detail log as LoadGen 6.0.17 wrote it (the reviewed openvino row): 2390 queries of 8 samples,
# 2.003 s from the first issue to the last completion, a mean query latency of 0.812 ms (queries back to back
# would give 9849 samples/s; the run's own span 9546)
MULTI = _log(result_validity="VALID", result_min_duration_met=True, result_min_queries_met=True,
             early_stopping_met=True, effective_samples_per_query=8, effective_target_qps=66836,
             result_query_count=2390, result_mean_query_latency_ns=812248,
             power_begin="11-30-2026 15:40:48.140", power_end="11-30-2026 15:40:50.143")


def test_multistream_samples_per_s_are_the_samples_completed_per_second_of_the_run():
    from vitbench.measure import loadgen
    from vitbench.tasks.serve import METRICS

    r = loadgen.judge(loadgen.mllog(MULTI), loadgen.Settings("MultiStream", None, None, 99.0, 2.0, 100, 8, 0.015))
    assert r.samples_per_s == pytest.approx(2390 * 8 / 2.003)
    assert r.samples_per_s <= 2390 * 8 / 2.0  # the run lasted its minimum duration at least
    said = {m.name: m.description for m in METRICS}["samples_per_s"]
    assert "result_qps_with_loadgen_overhead" in said and "power_begin" in said


def test_a_stream_run_records_the_settings_loadgen_read_and_none_of_the_others(one_torch_thread):
    pytest.importorskip("mlperf_loadgen")
    from vitbench.measure import loadgen
    from vitbench.tasks.serve import Serve

    p = Serve.Params.model_validate({
        "task": "serve", "model": NANO, "resolution": RES, "scenario": "MultiStream", "samples_per_query": 2,
        "batch_size": 2, "min_duration_s": 0.1, "min_query_count": 64, "latency_percentile": 90.0, "threads": 1,
        "warmup_steps": 1, "qsl_images": 16, "dataset": "synthetic"})
    rec = Serve().run(p)
    run = rec.raw["runs"][0]
    log = loadgen.mllog(run["logs"]["mlperf_log_detail.txt"])
    assert run["target_qps"] is None and run["latency_bound_ms"] is None  # Server's (and Offline's) only
    assert run["samples_per_query"] == 2 and run["expected_latency_ms"] > 0
    assert run["loadgen_effective_target_qps"] == log["effective_target_qps"]
    assert run["loadgen_effective_target_qps"] == pytest.approx(1000 / run["expected_latency_ms"], rel=1e-3)
    # samples/s: the run's completed samples over its span, never above what its minimum duration allows
    m = rec.metrics
    assert m["samples_per_s"] == m["completed_samples_per_s"] == loadgen.completed_rate(log, "MultiStream")
    assert m["samples_per_s"] <= log["result_query_count"] * 2 / 0.1
    assert rec.raw["capacity_from"] == "median warm-up step"


def test_the_settings_a_scenario_does_not_read_are_recorded_as_none():
    from vitbench.measure.loadgen import Settings

    def applied(scenario):
        return Settings(scenario, 50.0, 15.0, 90.0, 1.0, 10, 8, 0.5).applied()

    assert applied("SingleStream") == {"target_qps": None, "latency_bound_ms": None, "expected_latency_ms": 0.5,
                                       "samples_per_query": None}
    assert applied("Server") == {"target_qps": 50.0, "latency_bound_ms": 15.0, "expected_latency_ms": None,
                                 "samples_per_query": None}
    assert applied("Offline")["target_qps"] == 50.0 and applied("Offline")["latency_bound_ms"] is None


def test_capacity_says_how_it_was_measured_in_every_scenario():
    from vitbench.tasks.serve import METRICS

    said = {m.name: m.description for m in METRICS}["capacity_samples_per_s"]
    assert "Server search" in said and "median warm-up step" in said
