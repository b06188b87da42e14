"""The `serve` task (issue 54): MLPerf's LoadGen, its real library, driving ViT-Nano/4 through the backend
interface; its verdicts and reasons, the logs kept with each row, and the Offline figure beside the throughput
mode. Each LoadGen run is short (min_duration_s a fraction of a second, few queries): seconds per test."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from vitbench.measure import loadgen
from vitbench.record import Record, Status
from vitbench.tasks.serve import Serve

pytest.importorskip("mlperf_loadgen")

NANO = "ViT-Nano/4"
# short runs: LoadGen's minimums set low (a CPU under other load answers slowly, so the bounds are wide: these
# tests check what vitbench does with LoadGen's verdicts, not how fast a model is)
SHORT = {"min_duration_s": 0.3, "min_query_count": 32, "threads": 1, "warmup_steps": 1, "batch_size": 4,
         "qsl_images": 64}
# LoadGen's early stopping proves a p90 from no fewer queries ("Only processed 32 queries. Need to process at
# least 64 queries for early stopping"): a SingleStream or MultiStream run judged at p90 must ask for them, or it
# is VALID only where SHORT's 0.3 s held 64 quick queries (not on a loaded machine)
EARLY_STOP_QUERIES = 64


def serve(**fields) -> Record:
    if fields.get("backend") == "jax":  # the framework's default threads: JAX fixes its pools once per process,
        fields = {"threads": None, **fields}  # and an earlier test in this process may have made them
    short = {k: v for k, v in SHORT.items() if k not in Serve.Params.moot(fields)}  # SingleStream: no batch_size
    p = Serve.Params.model_validate({"task": "serve", "model": NANO, **short, **fields})
    rec = Serve().run(p)
    assert rec.status is not Status.OK or not rec.unmeasured([Serve.headline])  # an ok row has its measure
    return rec


def logs_of(rec: Record) -> list[dict]:
    return [r["logs"] for r in rec.raw["runs"]]


def sizes(run: dict) -> set[int]:
    """The batch sizes a LoadGen run ran (its row's batch_size_counts: samples -> batches, one entry per size)."""
    return {int(n) for n, c in run["batch_size_counts"].items() if c > 0}


def test_server_search_finds_a_valid_qps_with_its_percentiles_and_logs(one_torch_thread):
    # p90: LoadGen's early stopping proves a p90 from tens of queries (a p99 needs ~460 within the bound)
    rec = serve(scenario="Server", latency_bound_ms=2000.0, latency_percentile=90.0, max_probes=2,
                qps_tolerance=0.5, dataset="digits")
    assert rec.status is Status.OK, rec.error
    m = rec.metrics
    assert m["loadgen_valid"] is True and m["loadgen_invalid_reason"] is None
    runs = rec.raw["runs"]
    assert 1 <= len(runs) <= 2 and m["probes"] == len(runs)
    valid = [r for r in runs if r["valid"]]
    # the headline is the highest target QPS LoadGen judged VALID, one of the probes
    assert m["samples_per_s"] == max(r["target_qps"] for r in valid)
    best = next(r for r in valid if r["target_qps"] == m["samples_per_s"])
    assert m["latency_ms_p90"] == best["latency_ms"]["p90"] <= 2000.0
    assert m["latency_ms_p50"] <= m["latency_ms_p90"] <= m["latency_ms_p99"]
    assert m["host_input"] is True and m["qsl_images_loaded"] == 64
    for run, logs in zip(runs, logs_of(rec)):  # LoadGen's own two logs, whole, for every probe
        assert set(logs) == set(loadgen.LOG_FILES)
        assert ("Result is : VALID" in logs["mlperf_log_summary.txt"]) == run["valid"]
        assert '"key": "result_validity"' in logs["mlperf_log_detail.txt"]
    assert all(sizes(r) and max(sizes(r)) <= 4 for r in runs)  # the SUT's max batch held
    json.dumps(rec.to_dict())  # the row, logs and all, is JSON
    assert set(m) <= {d.name for d in Serve.metrics}, set(m) - {d.name for d in Serve.metrics}  # each declared


def test_an_invalid_server_run_is_an_error_row_that_says_why(one_torch_thread):
    """A bound no model meets: LoadGen's INVALID becomes an error row naming the percentile and the bound, with
    the numbers and logs kept; never an ok row. At a percentile no row reports otherwise (p95), the judged one's
    latency is in the row (latency_ms_judged), in its run's raw latencies (p95) and in the reason."""
    rec = serve(scenario="Server", target_qps=200.0, latency_bound_ms=1e-3, latency_percentile=95.0)
    assert rec.status is Status.ERROR
    assert rec.metrics["samples_per_s"] is None and rec.metrics["loadgen_valid"] is False
    reason = rec.metrics["loadgen_invalid_reason"]
    assert "over the bound 0.001 ms" in reason and reason in rec.error.message
    assert rec.metrics["latency_ms_p99"] > 1e-3
    assert "INVALID" in logs_of(rec)[0]["mlperf_log_summary.txt"]
    log = loadgen.mllog(logs_of(rec)[0]["mlperf_log_detail.txt"])
    p95 = log["result_95.00_percentile_latency_ns"] / 1e6  # LoadGen's own
    assert rec.metrics["latency_percentile_judged"] == 95.0
    assert rec.metrics["latency_ms_judged"] == rec.raw["runs"][0]["latency_ms"]["p95"] == p95
    assert f"p95 latency {p95:.3g} ms over the bound" in reason
    assert not [k for k in rec.metrics if k.startswith("latency_ms_p") and k not in Serve.Params.model_fields
                and k not in {m.name for m in Serve.metrics}]  # every latency the row holds is declared


def test_min_duration_not_met_says_so(one_torch_thread):
    """Offline told to expect 1 sample/s generates a query a model answers at once: the run ends before its
    minimum duration, and the row says so rather than give a number alone."""
    rec = serve(scenario="Offline", target_qps=1.0, min_duration_s=1.0, min_query_count=1)
    assert rec.status is Status.ERROR
    assert "minimum duration not met (1 s)" in rec.metrics["loadgen_invalid_reason"]


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_single_stream_percentiles_on_each_backend(backend, one_torch_thread):
    rec = serve(backend=backend, scenario="SingleStream", dataset="synthetic", min_query_count=EARLY_STOP_QUERIES)
    assert rec.status is Status.OK, rec.error
    m = rec.metrics
    assert m["latency_percentile_judged"] == 90.0  # mlperf.conf's SingleStream default
    assert 0 < m["latency_ms_p50"] <= m["latency_ms_p90"] <= m["latency_ms_p99"]
    log = loadgen.mllog(logs_of(rec)[0]["mlperf_log_detail.txt"])
    assert m["samples_per_s"] == log["result_qps_with_loadgen_overhead"] > 0  # LoadGen's figure, read back
    assert sizes(rec.raw["runs"][0]) == {1}  # one query at a time, one sample each
    assert rec.config["backend"] == backend
    assert "batch_size" not in rec.config and list(rec.raw["prepare"]) == ["1"]  # no max batch: not a setting


def test_offline_beside_the_throughput_mode(one_torch_thread):
    rec = serve(scenario="Offline", min_query_count=64)
    assert rec.status is Status.OK, rec.error
    m, raw = rec.metrics, rec.raw
    windows = raw["throughput"]["before"]["img_per_s_windows"] + raw["throughput"]["after"]["img_per_s_windows"]
    assert m["throughput_img_per_s_min"] == min(windows) and m["throughput_img_per_s_max"] == max(windows)
    assert m["offline_over_throughput"] == m["samples_per_s"] / m["throughput_img_per_s"]
    assert m["offline_within_throughput_spread"] == (min(windows) <= m["samples_per_s"] <= max(windows))
    counts = {int(n): c for n, c in raw["runs"][0]["batch_size_counts"].items()}  # samples -> batches run
    assert max(counts) == 4 and m["mean_batch"] == sum(n * c for n, c in counts.items()) / sum(counts.values())
    assert set(m) <= {d.name for d in Serve.metrics}, set(m) - {d.name for d in Serve.metrics}  # each declared


def test_the_throughput_modes_median_window_is_taken_in_time_as_every_vitbench_speed():
    """An even count of windows (5 before and 5 after the Offline run): the median window's img/s is the images
    of a window over the median window time, as a bench row's img_per_s is; the median of the rates averaged the
    two middle rates (20 img/s windows of 1 s and 0.5 s: 30 for 26.7)."""
    from vitbench.measure.serve import offline_beside_throughput

    times = [1.0, 0.5, 2.0, 0.25]  # windows of 20 images each
    rates = [20 / t for t in times]
    out = offline_beside_throughput(25.0, {"img_per_s_windows": rates[:2]}, {"img_per_s_windows": rates[2:]})
    assert out["throughput_img_per_s"] == pytest.approx(20 / 0.75)  # the median time: (0.5 + 1) / 2
    assert out["offline_over_throughput"] == pytest.approx(25.0 / (20 / 0.75))
    assert out["throughput_img_per_s_min"] == 10 and out["throughput_img_per_s_max"] == 80
    assert out["offline_within_throughput_spread"] is True


def test_offline_expects_three_times_the_fastest_window_not_the_median(one_torch_thread, monkeypatch):
    # a full-suite run under -n 2: the Offline run went more than 3x the bracket's median window, ran out of
    # samples before its minimum duration and was INVALID; the fastest window is the host's speed undisturbed
    import vitbench.measure.serve as serve_mod

    real = serve_mod.throughput

    def slow_median(be, work, seconds):
        out = real(be, work, seconds)
        out["img_per_s_windows"] = [out["img_per_s_windows"][0] / 4] * 4 + [out["img_per_s_windows"][0]]
        return out

    monkeypatch.setattr(serve_mod, "throughput", slow_median)
    rec = serve(scenario="Offline", min_query_count=64)
    before = rec.raw["throughput"]["before"]["img_per_s_windows"]
    assert rec.raw["runs"][0]["target_qps"] == serve_mod.OFFLINE_MARGIN * max(before)


def test_multistream_queries_are_batched_whole(one_torch_thread):
    # p90: EARLY_STOP_QUERIES prove it (MultiStream's p99 default needs 662)
    rec = serve(scenario="MultiStream", samples_per_query=4, max_wait_ms=50.0, min_query_count=EARLY_STOP_QUERIES,
                latency_percentile=90.0)
    assert rec.status is Status.OK, rec.error
    log = loadgen.mllog(logs_of(rec)[0]["mlperf_log_detail.txt"])  # one query outstanding: 4 samples per query
    # the samples completed per second of the run, LoadGen's own time between queries in it (as SingleStream's)
    assert rec.metrics["samples_per_s"] == loadgen.completed_rate(log, "MultiStream")
    assert sizes(rec.raw["runs"][0]) == {4}  # a query's 4 samples arrive together: one batch


def test_multistream_latencies_are_per_query_as_mlperf_reports_them(one_torch_thread):
    """MLPerf's MultiStream metric is a query's latency (until its last sample completes): the row's judged
    latency and percentiles are LoadGen's per-query ones, not its per-sample ones. A query's 4 samples run one
    at a time (batch 1), so they complete apart and the two differ (a whole-query batch makes them equal)."""
    rec = serve(scenario="MultiStream", samples_per_query=4, batch_size=1, max_wait_ms=0.0,
                min_query_count=EARLY_STOP_QUERIES, latency_percentile=90.0)
    log = loadgen.mllog(logs_of(rec)[0]["mlperf_log_detail.txt"])
    m = rec.metrics
    per_query = log["result_90.00_percentile_per_query_latency_ns"] / 1e6
    assert log["result_90.00_percentile_latency_ns"] / 1e6 != per_query  # per sample: not MLPerf's metric
    assert m["latency_ms_judged"] == m["latency_ms_p90"] == per_query
    assert m["latency_ms_p50"] == log["result_50.00_percentile_per_query_latency_ns"] / 1e6
    assert m["latency_ms_max"] == log["result_max_query_latency_ns"] / 1e6
    assert m["latency_per"] == "query" and rec.raw["runs"][0]["latency_per"] == "query"
    assert sizes(rec.raw["runs"][0]) == {1}


MULTI = "\n".join(":::MLLOG " + json.dumps({"key": k, "value": v}) for k, v in {
    "result_validity": "VALID", "result_min_duration_met": True, "result_min_queries_met": True,
    "early_stopping_met": True, "result_mean_query_latency_ns": 4_000_000,
    "result_max_query_latency_ns": 9_000_000, "result_50.00_percentile_per_query_latency_ns": 3_000_000,
    "result_99.00_percentile_per_query_latency_ns": 8_000_000,
    "result_50.00_percentile_latency_ns": 2_000_000, "result_99.00_percentile_latency_ns": 7_000_000,
    "result_mean_latency_ns": 2_500_000, "result_max_latency_ns": 9_000_000}.items())


def test_judge_reads_multistream_per_query_and_the_others_per_sample():
    r = loadgen.judge(loadgen.mllog(MULTI), loadgen.Settings("MultiStream", 1.0, 15.0, 99.0, 2.0, 100, 4, 1.0))
    assert r.latency_per == "query"
    assert (r.latency_ms["p50"], r.latency_ms["p99"], r.latency_ms["mean"]) == (3.0, 8.0, 4.0)
    r = loadgen.judge(loadgen.mllog(MULTI), loadgen.Settings("SingleStream", 1.0, 15.0, 99.0, 2.0, 100, 4, 1.0))
    assert r.latency_per == "sample"
    assert (r.latency_ms["p50"], r.latency_ms["p99"], r.latency_ms["mean"]) == (2.0, 7.0, 2.5)


def test_the_report_reads_an_old_multistream_rows_per_query_latencies_from_its_log():
    """A MultiStream row written before its latencies were per query (no latency_per; per-sample numbers): the
    report's table gives MLPerf's per-query ones from the detail log the row keeps and says so; other scenarios'
    rows say 'sample' and keep theirs."""
    import pandas as pd

    from vitbench.report import serving

    runs = [{"scenario": "MultiStream", "percentile": 99.0, "latency_ms": {"p50": 2.0, "p99": 7.0},
             "logs": {loadgen.LOG_FILES[1]: MULTI}}]
    old = {"scenario": "MultiStream", "latency_ms_p50": 2.0, "latency_ms_p99": 7.0, "latency_ms_judged": 7.0,
           "latency_percentile_judged": 99.0, "raw": json.dumps({"runs": runs})}
    single = {"scenario": "SingleStream", "latency_ms_p50": 1.0, "latency_ms_p99": 1.5, "latency_ms_judged": 1.2,
              "latency_percentile_judged": 90.0,
              "raw": json.dumps({"runs": [{**runs[0], "scenario": "SingleStream"}]})}
    out = serving.per_query_of_old(pd.DataFrame([old, single]))
    assert out[["latency_per", "latency_ms_p50", "latency_ms_p99", "latency_ms_judged"]].values.tolist() == [
        ["query", 3.0, 8.0, 8.0], ["sample", 1.0, 1.5, 1.2]]
    assert serving._judged(runs[0]) == 8.0  # a kept run: from its log too
    new = {**old, "latency_per": "query", "latency_ms_judged": 8.5}  # a row that says so: as it is
    assert serving.per_query_of_old(pd.DataFrame([new]))["latency_ms_judged"].tolist() == [8.5]


DETAIL = "\n".join(":::MLLOG " + json.dumps({"key": k, "value": v}) for k, v in {
    "result_validity": "INVALID", "result_min_duration_met": False, "result_min_queries_met": True,
    "early_stopping_met": False, "early_stopping_result": " * Run unsuccessful.\n * Processed 3 queries.",
    "result_perf_constraints_met": False, "result_99.00_percentile_latency_ns": 25_000_000,
    "result_50.00_percentile_latency_ns": 5_000_000, "result_completed_samples_per_sec": 123.0}.items())


def test_judge_names_every_unmet_condition():
    s = loadgen.Settings("Server", 100.0, 15.0, 99.0, 2.0, 100, 8, 1.0)
    r = loadgen.judge(loadgen.mllog("noise line\n" + DETAIL + "\n:::MLLOG {broken"), s)
    assert not r.valid
    assert r.reason == ("minimum duration not met (2 s); early stopping not met: Run unsuccessful. Processed 3 "
                        "queries; p99 latency 25 ms over the bound 15 ms")
    assert r.latency_ms["p99"] == 25.0 and r.latency_ms["p50"] == 5.0  # ns / 1e6, one rounding each: exact here
    assert r.samples_per_s == 123.0


def test_judge_reports_and_names_the_judged_percentile():
    """A percentile judged beside p50/p90/p99 (p95): its latency from LoadGen's log, under its own name, and in
    the reason (the row held p50/p90/p99 only, the figure drew nothing)."""
    detail = DETAIL.replace("result_99.00", "result_95.00")
    r = loadgen.judge(loadgen.mllog(detail), loadgen.Settings("Server", 100.0, 15.0, 95.0, 2.0, 100, 8, 1.0))
    assert r.latency_ms["p95"] == 25.0 and r.latency_ms["p99"] is None
    assert r.reason.endswith("p95 latency 25 ms over the bound 15 ms")


def test_a_percentile_loadgen_logs_no_latency_at_is_refused(cli):
    """LoadGen judges any percentile but logs the latency at a few: at p97.5 a verdict came with no number."""
    r = cli("serve", NANO, "--latency-percentile", "97.5", "--target-qps", "100", "--min-duration-s", "0.1",
            "--threads", "1")
    assert r.exit_code == 2, r.output
    assert "--latency-percentile: LoadGen's log gives the latency at the percentiles 50, 90, 95, 97, 99, 99.9 " \
        "only, not 97.5" in " ".join(r.output.split())
    for p in loadgen.LOGGED_PERCENTILES:
        assert Serve.Params.model_validate({"task": "serve", "model": NANO, "latency_percentile": p})


def test_a_detail_log_without_a_verdict_is_never_valid():
    s = loadgen.Settings("Offline", 100.0, 15.0, 90.0, 2.0, 100, 8, 1.0)
    r = loadgen.judge(loadgen.mllog(':::MLLOG {"key": "result_samples_per_second", "value": 50.0}'), s)
    assert not r.valid and "no result_validity" in r.reason


def test_batch_sizes_cover_the_max_batch():
    from vitbench.measure.serve import batch_sizes

    assert batch_sizes(6, "Server") == [1, 2, 4, 6]
    assert batch_sizes(8, "Offline") == [1, 2, 4, 8]
    assert batch_sizes(8, "SingleStream") == [1]


def test_a_workload_without_host_input_serves_only_synthetic_images(monkeypatch, one_torch_thread):
    """A backend whose workload takes no host images (an inference runtime without infer_host) is served its own
    batch on a synthetic QSL, said in the row; asked for real images, the trial says why it cannot."""
    from vitbench.backends.workload import Workload
    from vitbench.backends.torch.workload import TorchWorkload

    monkeypatch.setattr(TorchWorkload, "infer_host", Workload.infer_host)
    rec = serve(scenario="SingleStream", dataset="synthetic", min_query_count=EARLY_STOP_QUERIES)
    assert rec.status is Status.OK and rec.metrics["host_input"] is False, rec.error
    from vitbench.errors import ConfigError

    with pytest.raises(ConfigError, match="dataset: synthetic"):
        serve(scenario="SingleStream", dataset="digits")


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_infer_host_is_the_steps_forward_on_the_given_images(backend, one_torch_thread):
    """infer_host on the workload's own input, brought to the host as NHWC, returns exactly what the workload's
    step computes: the same program on the same numbers (so a QSL image is what the step would have run)."""
    from vitbench.backends.base import Step, get_backend

    be = get_backend(backend)
    be.setup("cpu", 1 if backend == "torch" else None)  # JAX: its pools as this process made them (serve())
    work = be.prepare(Step(NANO, batch_size=2))
    try:
        if backend == "torch":
            own, x = work.step().float().numpy(), work.x.permute(0, 2, 3, 1).numpy()
        else:
            own, x = np.asarray(work.step(), np.float32), np.asarray(work.args[1], np.float32)
        got = work.infer_host(np.ascontiguousarray(x))
    finally:
        work.close()
    assert got.dtype == np.float32 and got.shape == own.shape
    np.testing.assert_array_equal(got, own)


def _row(backend: str, qps_valid: list[float], qps_invalid: list[float], bound: float = 15.0) -> Record:
    """A serve row as the task writes it (no LoadGen run): Server probes at these target rates."""
    runs = [{"target_qps": q, "valid": v, "percentile": 99.0, "latency_bound_ms": bound,
             "latency_ms": {"p50": q / 100, "p90": q / 50, "p99": q / 20}}
            for qs, v in ((qps_valid, True), (qps_invalid, False)) for q in qs]
    best = max(qps_valid)
    return Record.measured("serve", {"model": NANO, "backend": backend, "task": "serve", "device": "cpu",
                                     "precision": "fp32", "scenario": "Server", "batch_size": 8, "max_wait_ms": 0.0,
                                     "latency_bound_ms": bound, "min_duration_s": 3.0},
                           metrics={"samples_per_s": best, "latency_ms_p50": best / 100, "latency_ms_p90": best / 50,
                                    "latency_ms_p99": best / 20, "loadgen_valid": True, "probes": len(runs),
                                    "qps_search_bracket": "VALID up to x, INVALID from y QPS"},
                           raw={"runs": runs})


def test_a_serve_rows_noise_flag_is_checked_as_benchs_is():
    """serve writes `unstable` and `noise` (vitbench.measure.serve) but declared neither: row_check read
    `unstable: "yes"` in a serve row as clean, where it refuses it in a bench row."""
    from vitbench.tasks import row_check

    check = row_check()
    good = _row("torch", [100.0], [200.0])
    good.metrics.update(unstable=True, noise="other processes kept 1.5 cores busy")
    assert check(good) is None
    for bad in ("yes", 1):
        good.metrics["unstable"] = bad
        problem = check(good)
        assert problem is not None and problem.refuse and "unstable = " in problem.text, problem
    assert {"unstable", "noise"} <= {m.name for m in Serve.metrics}


def test_the_report_draws_latency_against_qps_with_the_bound(tmp_path):
    """Every probe of every Server row is a point (VALID filled, INVALID hollow), per model and backend, and the
    bound is a dashed line; the section's table has one row per configuration."""
    from vitbench.report.build import build_report, figure
    from vitbench.store import Store
    from vitbench.tidy import load_each

    rows = [_row("torch", [100.0, 150.0], [200.0, 175.0]), _row("jax", [80.0], [160.0, 120.0])]
    with Store(tmp_path / "r") as store:
        for r in rows:
            store.append(r)
    df = load_each(tmp_path / "r", (None,), raw_json=True)[0]
    fig = figure("latency_vs_qps", df)
    ax = fig.axes[0]
    bound = [ln for ln in ax.lines if list(ln.get_ydata()) == [15.0, 15.0]]
    assert len(bound) == 1 and bound[0].get_linestyle() == "--"
    hollow = [ln for ln in ax.lines if ln.get_marker() == "o" and ln.get_markerfacecolor() == "white"
              and len(ln.get_xdata())]
    assert sorted(x for ln in hollow for x in ln.get_xdata()) == [120.0, 160.0, 175.0, 200.0]
    rep = build_report(tmp_path / "r", tmp_path / "out", formats="md", plots=True)
    assert "latency_vs_qps" in rep.figures
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Serving under MLPerf's LoadGen" in md and "VALID up to x" in md


def _failed_row(backend: str, qps: list[float], percentile: float = 95.0, logged: bool = False) -> Record:
    """A Server search's error row (no probe VALID) at `percentile`: its latency in each run's `latency_ms`, or
    (`logged`: a row written before 2026-11-30) only in the detail log the run keeps."""
    def run(q: float) -> dict:
        lat = {"p50": q / 100, "p90": q / 50, "p99": q / 10, **({} if logged else {f"p{percentile:g}": q / 20})}
        detail = f':::MLLOG {{"key": "result_{percentile:.2f}_percentile_latency_ns", "value": {q * 5e4}}}'
        return {"target_qps": q, "valid": False, "percentile": percentile, "latency_bound_ms": 15.0,
                "latency_ms": lat, "logs": {loadgen.LOG_FILES[1]: detail}}

    config = {"model": NANO, "backend": backend, "task": "serve", "device": "cpu", "precision": "fp32",
              "scenario": "Server", "batch_size": 8, "max_wait_ms": 0.0, "latency_bound_ms": 15.0,
              "min_duration_s": 3.0}
    from vitbench.record import ErrorInfo

    error = ErrorInfo("LoadGenInvalid", "no target QPS probed was VALID")
    return Record.measured("serve", config, metrics={"samples_per_s": None, "loadgen_valid": False,
                                                     "probes": len(qps)}, raw={"runs": [run(q) for q in qps]},
                           status=Status.ERROR, error=error)


def _report_of(tmp_path, rows: list[Record]):
    from vitbench.report.build import build_report, figure
    from vitbench.store import Store
    from vitbench.tidy import load_each

    with Store(tmp_path / "r") as store:
        for r in rows:
            store.append(r)
    df = load_each(tmp_path / "r", (None,), raw_json=True)[0]
    return figure("latency_vs_qps", df), build_report(tmp_path / "r", tmp_path / "out", formats="md", plots=True)


def _hollow(fig) -> list[float]:
    return sorted(x for ln in fig.axes[0].lines if ln.get_marker() == "o" and ln.get_markerfacecolor() == "white"
                  for x in ln.get_xdata())


def test_the_report_draws_the_probes_of_a_search_none_of_whose_probes_was_valid(tmp_path):
    """A Server row none of whose probes was VALID is an error row: its probes are drawn hollow all the same
    (the figure draws every Server run), at the judged percentile (p95 here, the row's own or, in a row written
    before its runs kept it, from the detail log), and with every Server row failed the figure is still drawn."""
    rows = [_failed_row("torch", [400.0, 200.0]), _failed_row("jax", [300.0], logged=True),
            _row("torch", [100.0], [150.0])]
    fig, rep = _report_of(tmp_path, rows)
    assert _hollow(fig) == [150.0, 200.0, 300.0, 400.0]
    judged = {x: y for ln in fig.axes[0].lines if ln.get_linewidth() == 1.6
              for x, y in zip(ln.get_xdata(), ln.get_ydata())}
    assert judged[400.0] == 20.0 and judged[300.0] == 15.0  # q / 20: p95, not p99 (q / 10)
    assert "latency_vs_qps" in rep.figures
    fig, rep = _report_of(tmp_path / "failed_only", [_failed_row("torch", [400.0, 200.0])])
    assert _hollow(fig) == [200.0, 400.0] and "latency_vs_qps" in rep.figures


def test_a_latency_figure_with_no_point_to_draw_says_why(tmp_path):
    """Server runs none of which holds its judged latency (a percentile the run's row and log lack): a note in
    the figure's place, not a figure silently left out."""
    from vitbench.report.parts import NotDrawn

    row = _failed_row("torch", [400.0], percentile=97.5, logged=True)
    row.raw["runs"][0]["logs"] = {}
    fig, rep = _report_of(tmp_path, [row])
    assert isinstance(fig, NotDrawn) and "none with a target QPS and its judged latency (p97.5)" in fig.reason
    assert "latency_vs_qps" in rep.not_drawn
    assert "Not drawn: 1 LoadGen Server run(s)" in (tmp_path / "out" / "report.md").read_text()


def _fake_run(valid_below: float):
    """A stand-in for one LoadGen run (no LoadGen): VALID at target rates below `valid_below`."""
    from types import SimpleNamespace

    def one(s):
        ok = s.target_qps < valid_below
        return SimpleNamespace(settings=s, result=SimpleNamespace(valid=ok, reason=None if ok else "over"))

    return one


def test_the_server_search_halves_then_bisects_to_its_tolerance():
    from vitbench.measure.serve import Search, search_qps

    s = loadgen.Settings("Server", 1.0, 15.0, 99.0, 1.0, 100, 8, 1.0)
    runs, best, _ = search_qps(_fake_run(300.0), s, 1000.0, Search(0.05, 20))
    rates = [r.settings.target_qps for r in runs]
    assert rates[:2] == [500.0, 250.0]  # halved from half the ceiling until VALID, then bisected
    assert best.settings.target_qps < 300.0 <= min(q for q in rates if q >= 300.0)
    assert min(q for q in rates if q >= 300.0) - best.settings.target_qps <= 0.05 * best.settings.target_qps


def test_the_search_bracket_names_the_unit_beside_each_rate():
    """The bracket of a search with no INVALID probe read 'VALID up to 128.6, no INVALID probe (capacity not
    probed) QPS': the unit after the words, none after the rate."""
    from vitbench.measure.serve import Search, _bracket, search_qps

    s = loadgen.Settings("Server", 1.0, 15.0, 99.0, 1.0, 100, 8, 1.0)
    runs, _, _ = search_qps(_fake_run(1e9), s, 1000.0, Search(0.05, 2))
    assert _bracket(runs).startswith(f"VALID up to {max(r.settings.target_qps for r in runs):.4g} QPS, no INVALID")
    assert not _bracket(runs).endswith("QPS")
    runs, _, _ = search_qps(_fake_run(300.0), s, 1000.0, Search(0.05, 20))
    assert re.fullmatch(r"VALID up to [0-9.]+ QPS, INVALID from [0-9.]+ QPS", _bracket(runs)), _bracket(runs)


def test_the_server_search_stops_halving_where_a_probe_would_last_too_long():
    from vitbench.measure.serve import MAX_PROBE_S, Search, _bracket, search_qps

    s = loadgen.Settings("Server", 1.0, 15.0, 99.0, 1.0, 1000, 8, 1.0)  # 1000 queries: 10 s at 100 QPS
    runs, best, _ = search_qps(_fake_run(0.0), s, 800.0, Search(0.05, 50))  # never VALID
    rates = [r.settings.target_qps for r in runs]
    assert best is None and all(1000 / q <= MAX_PROBE_S for q in rates)
    assert 1000 / (rates[-1] / 2) > MAX_PROBE_S  # the next halving would have run too long
    assert "stopped: a probe at" in _bracket(runs)


def test_the_serve_table_says_whose_latencies_it_shows(cli, monkeypatch):
    """A MultiStream row's latencies are per query (from its issue to its last sample's completion), the others'
    per sample: the row says which (`latency_per`), and the table showed p50/p90/p99 without it."""
    from records import record

    def fake_run(self, p):  # the row a MultiStream run writes, without running LoadGen
        cfg = {"model": NANO, "backend": "torch", "device": "cpu", "scenario": "MultiStream", "batch_size": 2,
               "max_wait_ms": 0.0}
        return record("serve", cfg, metrics={"loadgen_valid": True, "samples_per_s": 211.2,
                                             "latency_ms_p50": 36.03, "latency_ms_p99": 48.51,
                                             "latency_percentile_judged": 99.0, "latency_per": "query"})

    monkeypatch.setattr(Serve, "run", fake_run)
    r = cli("serve", NANO, "--scenario", "MultiStream", "-b", "2", "--min-duration-s", "0.3")
    assert r.exit_code == 0, r.output
    line = next((x for x in r.output.splitlines() if "latency_per " in x), "")
    assert "query" in line, r.output
    assert r.output.index("latency_percentile_judged") < r.output.index("latency_per ")


def test_the_serve_table_shows_a_rows_noise_once(cli, monkeypatch):
    """`noise`, now declared with serve's metrics, is shown once among the table's words (never its flag)."""
    from records import record

    def fake_run(self, p):  # an unstable Offline row, without running LoadGen
        cfg = {"model": NANO, "backend": "torch", "device": "cpu", "scenario": "Offline", "batch_size": 2,
               "max_wait_ms": 0.0}
        return record("serve", cfg, metrics={"loadgen_valid": True, "samples_per_s": 211.2, "unstable": True,
                                             "noise": "other processes kept 1.5 cores busy"})

    monkeypatch.setattr(Serve, "run", fake_run)
    r = cli("serve", NANO, "--scenario", "Offline", "-b", "2", "--min-duration-s", "0.3")
    assert r.exit_code == 0, r.output
    assert r.output.count("1.5 cores busy") == 1 and "unstable" not in r.output, r.output


def test_an_option_for_another_scenario_is_refused_not_ignored(cli):
    r = cli("serve", NANO, "--scenario", "SingleStream", "--target-qps", "5", "--max-probes", "3")
    assert r.exit_code == 2, r.output
    assert "--target-qps applies only with --scenario Server or Offline" in r.output
    assert "--max-probes applies only with --scenario Server (here --scenario SingleStream)" in r.output
    p = Serve.Params.model_validate({"task": "serve", "model": NANO, "scenario": "SingleStream", "max_probes": 12})
    assert "max_probes" not in p.config() and "target_qps" not in p.config()  # at its default: left out


def test_batch_size_applies_where_the_sut_batches_not_in_single_stream(cli):
    """SingleStream has one sample outstanding at a time: its SUT runs batch 1 whatever -b says (batch_sizes), so
    a batch size given there is refused, and none is recorded (a study's defaults leave it out there, as for
    target_qps); MultiStream batches a query's samples up to it."""
    config = {s: Serve.Params.model_validate({"task": "serve", "model": NANO, "scenario": s}).config()
              for s in ("SingleStream", "MultiStream", "Server", "Offline")}
    assert "batch_size" not in config["SingleStream"]
    assert all(config[s]["batch_size"] == 8 for s in ("MultiStream", "Server", "Offline"))
    r = cli("serve", NANO, "--scenario", "SingleStream", "-b", "64", "--min-duration-s", "0.1", "--threads", "1")
    assert r.exit_code == 2, r.output
    assert "--batch-size applies only with --scenario Server or MultiStream or Offline (here --scenario " \
        "SingleStream)" in " ".join(r.output.split())
    from vitbench.errors import ConfigError
    from vitbench.study import load_study, parse_study

    s = load_study("serve")  # the shipped study: its defaults' batch_size 8 left out of SingleStream's trials
    assert {t.config["scenario"]: "batch_size" in t.config for t in s.trials} == {
        "Server": True, "MultiStream": True, "Offline": True, "SingleStream": False}
    assert len({t.key for t in s.trials}) == len(s.trials)
    with pytest.raises(ConfigError, match="batch_size applies only with scenario Server or MultiStream or Off"):
        parse_study("name: b\naxes: {model: [ViT-Nano/4], task: [serve], scenario: [SingleStream], "
                    "batch_size: [4]}\n")


def test_a_server_rate_whose_query_count_stretches_the_run_is_said_or_refused(cli, monkeypatch, one_torch_thread):
    from vitbench.errors import VitbenchWarning

    r = cli("serve", NANO, "--target-qps", "0.0001")  # 100 queries at 1e-4 QPS: 11.6 days
    assert r.exit_code == 2 and "--target-qps 0.0001 schedules 100 queries over" in r.output, r.output
    assert "lower --min-query-count" in r.output

    def stop(*a, **k):
        raise RuntimeError("no LoadGen run in this test")

    monkeypatch.setattr(loadgen, "run", stop)
    with pytest.warns(VitbenchWarning, match=r"schedule at 0.5 QPS lasts 200 s, not the minimum duration's 0.3 s"), \
            pytest.raises(RuntimeError, match="no LoadGen run"):
        serve(target_qps=0.5, min_query_count=100)


def test_a_lazily_compiled_model_reports_its_compile_time(monkeypatch, one_torch_thread):
    """torch.compile compiles in the first call, so its workload has no compile_s of its own: a compiled serve row
    said `compile_s: null` ("nothing compiled"). It is now the first step less a warm-up step, as in bench. Here
    torch.compile is stood in by a wrapper whose first call takes 0.3 s longer (inductor would take minutes on
    this CPU)."""
    import time

    import torch

    class FirstCallSlow(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.called = inner, False

        def forward(self, x):
            if not self.called:
                self.called = True
                time.sleep(0.3)
            return self.inner(x)

    monkeypatch.setattr(torch, "compile", lambda model, mode=None: FirstCallSlow(model))
    rec = serve(scenario="SingleStream", dataset="synthetic", compile=True, min_query_count=EARLY_STOP_QUERIES)
    assert rec.status is Status.OK, rec.error
    assert rec.metrics["compile_s"] is not None and rec.metrics["compile_s"] >= 0.25, rec.metrics["compile_s"]
    eager = serve(scenario="SingleStream", dataset="synthetic", min_query_count=EARLY_STOP_QUERIES)
    assert eager.metrics["compile_s"] is None  # eager execution: nothing compiled


@pytest.mark.parametrize("scenario", ["Offline", "SingleStream"])
def test_every_step_of_a_serve_runs_on_one_thread(scenario, monkeypatch, one_torch_thread):
    """torch.compile's CUDA-graph trees are per thread: graphs warmed up on the main thread were recorded again
    inside the first LoadGen run, on the SUT's thread (a first-query outlier). The warm-up, the throughput mode and
    LoadGen's batches all run on one thread, the same across the runs of a search."""
    import threading

    from vitbench.backends.torch.workload import TorchWorkload

    seen = []
    for name in ("step", "infer_host"):
        def spy(self, *a, _f=getattr(TorchWorkload, name), **k):
            seen.append(threading.current_thread().name)
            return _f(self, *a, **k)
        monkeypatch.setattr(TorchWorkload, name, spy)
    rec = serve(scenario=scenario, min_query_count=EARLY_STOP_QUERIES)
    assert rec.status is Status.OK, rec.error
    assert len(seen) > 10 and len(set(seen)) == 1 and seen[0].startswith("vitbench-steps"), sorted(set(seen))


def test_the_steps_thread_makes_the_trials_device_current_before_any_step(monkeypatch, one_torch_thread):
    """torch's current CUDA device is per thread and a new thread's is device 0: a model on cuda:1 served from
    serve's steps thread had its CUDA graphs, streams and argument-less syncs on cuda:0. The thread's first act is
    the backend's own hook (`Backend.use_device_in_this_thread`), before any step, warm-up or LoadGen batch (no
    GPU here: the hook is a spy that records its thread)."""
    import threading

    from vitbench.backends.torch.backend import TorchBackend
    from vitbench.backends.torch.workload import TorchWorkload

    events = []
    hook = TorchBackend.use_device_in_this_thread

    def spy_hook(self):
        events.append(("device", threading.current_thread()))
        return hook(self)
    monkeypatch.setattr(TorchBackend, "use_device_in_this_thread", spy_hook)
    for name in ("step", "infer_host"):
        def spy(self, *a, _f=getattr(TorchWorkload, name), **k):
            events.append((name, threading.current_thread()))
            return _f(self, *a, **k)
        monkeypatch.setattr(TorchWorkload, name, spy)
    rec = serve(scenario="SingleStream", min_query_count=EARLY_STOP_QUERIES)
    assert rec.status is Status.OK, rec.error
    assert events[0][0] == "device" and events[0][1] is not threading.main_thread(), events[:3]
    assert events[0][1].name.startswith("vitbench-steps")
    assert [e for e, _ in events].count("device") == 1  # one thread, its device set once
    assert len(events) > 10 and {t for _, t in events} == {events[0][1]}  # every step ran on that thread


def _samples(ids):
    from types import SimpleNamespace

    return [SimpleNamespace(id=i, index=i % 3) for i in ids]


def test_the_sut_queues_an_issued_list_as_it_is_and_batches_across_issues():
    """An Offline query issues every sample of the run in one call (55 M at 1e7 QPS for 5 s): the SUT queued an
    (id, index) tuple per sample besides LoadGen's own list, 128 bytes a sample more (measured: 323 bytes a sample
    at peak, now 212; docs/serving.md, "Memory"). The list is queued as it is and batched from in place; a sample
    issued alone is queued as its (id, index). Batches still take samples in issue order, across issues."""
    from types import SimpleNamespace

    done = []
    lg = SimpleNamespace(QuerySampleResponse=lambda i, address, size: i, QuerySamplesComplete=done.append)
    step = lambda b: np.zeros((len(b), 3), np.float32)  # noqa: E731
    sut = loadgen.BatchingSUT(lg, np.zeros((3, 2, 2, 3), np.float32), {1: step, 2: step, 4: step}, 4, 0.0, True,
                              None)
    offline = _samples(range(10))
    sut.issue(offline)
    for s in _samples(range(10, 13)):
        sut.issue([s])
    assert sut.pending.qsize() == 4  # the list, then the three samples alone
    assert sut.pending.get() is offline  # no object of the SUT's own per sample of it
    sut.pending = type(sut.pending)()
    sut.issue(offline)
    for s in _samples(range(10, 13)):
        sut.issue([s])
    sut.pending.put(None)  # as `stop` does
    sut._serve()  # the worker's loop, here on this thread: it ends at the None
    assert sut.failure is None
    assert done == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12]] and sut.batches == {4: 3, 1: 1}
    assert sut._head == []  # the issued list, batched whole, let go


def test_the_schedule_estimate_is_the_measured_bytes_per_sample_of_its_scenario(monkeypatch):
    """~120 bytes a sample (from one aborted run) was low: an Offline run of 4 M samples peaked at 323 bytes a
    sample (212 now that the SUT keeps no tuple per sample), a saturated Server run at 311-325 a scheduled query
    (docs/serving.md, "Memory"). The estimate takes each scenario's declared bytes, and a run of 55 M Offline
    samples, about 11 GiB, is out of memory under an 8 GiB budget (the old estimate, 6.3 GiB, let it start)."""
    def settings(scenario, qps, seconds):
        return Serve.Params.model_validate({"task": "serve", "model": NANO, **SHORT, "scenario": scenario,
                                            "target_qps": qps, "min_duration_s": seconds}).loadgen_settings()

    per = loadgen.BYTES_PER_SCHEDULED_SAMPLE
    assert per["Offline"] >= 212 and per["Server"] >= 325  # the measured peaks, not below them
    offline = settings("Offline", 1e7, 5.0)
    assert loadgen.schedule_bytes(offline) == pytest.approx((55e6, 5.0, 55e6 * per["Offline"]))
    server = settings("Server", 1e3, 10.0)
    assert loadgen.schedule_bytes(server) == pytest.approx((11e3, 10.0, 11e3 * per["Server"]))
    stream = loadgen.Settings("SingleStream", None, None, 90.0, 1.0, 100, 8, 0.1)
    assert loadgen.schedule_bytes(stream) is None  # one query at a time
    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", "8")
    with pytest.raises(MemoryError, match=f"about {55e6 * per['Offline'] / 2**20:,.0f} MiB; lower target_qps or "
                                          r"min_duration_s \(over the budget of 8"):
        loadgen.check_schedule_fits(offline)
    loadgen.check_schedule_fits(settings("Offline", 1e6, 5.0))  # 5.5 M samples, about 1.1 GiB: within it


def test_a_schedule_over_the_memory_budget_is_out_of_memory_before_loadgen_starts(monkeypatch, cli):
    """Offline at 1e7 QPS for 5 s made LoadGen generate one query of 55 M samples and abort the whole
    process (std::bad_alloc, SIGABRT, no row; found by a hostile-input review). What it would generate is
    checked against the memory budget first: out of memory (an oom row in a sweep, exit 1 here) saying the
    samples, the MiB and the settings to lower; a schedule within the budget passes."""
    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", "0.5")
    p = Serve.Params.model_validate({"task": "serve", "model": NANO, **SHORT, "scenario": "Offline",
                                     "target_qps": 1e7, "min_duration_s": 5.0})
    need = 55e6 * loadgen.BYTES_PER_SCHEDULED_SAMPLE["Offline"] / 2**20
    with pytest.raises(MemoryError, match=r"LoadGen would generate 55,000,000 samples up front \(Offline at "
                                          rf"target_qps 1e\+07 for 5 s\), about {need:,.0f} MiB; lower target_qps "
                                          r"or min_duration_s \(over the budget of 512"):
        loadgen.check_schedule_fits(p.loadgen_settings())
    import vitbench.measure.serve as serve_mod

    def built(*a, **k):  # the rate is the user's: refused before any model is built (it was after the warm-up
        raise AssertionError("a model was built")  # and the Offline throughput mode: 30 s, 10 min at defaults)

    monkeypatch.setattr(serve_mod, "get_backend", built)
    r = cli("serve", NANO, "--scenario", "Offline", "--target-qps", "1e7", "--min-duration-s", "5", "--threads",
            "1", "--qsl-images", "8", "--batch-size", "4")
    assert r.exit_code == 1 and "Traceback" not in r.output and "a model was built" not in r.output, r.output
    assert "lower target_qps or min_duration_s" in " ".join(r.output.split())
    monkeypatch.undo()
    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", "0.5")
    loadgen.check_schedule_fits(Serve.Params.model_validate(
        {"task": "serve", "model": NANO, **SHORT, "scenario": "Offline", "target_qps": 1e4}).loadgen_settings())


# A LoadGen run driven until Ctrl-C: the first batch's step writes a marker (LoadGen has started), then each
# takes a millisecond; the run would last 30 s
_INTERRUPTED_RUN = """
import sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np
from vitbench.measure import loadgen
marker = Path(sys.argv[1])
def step(b):
    marker.touch()
    time.sleep(0.001)
    return np.zeros((len(b), 3), np.float32)
s = loadgen.Settings(scenario=sys.argv[2], target_qps=200.0, latency_bound_ms=15.0, percentile=90.0,
                     min_duration_s=30.0, min_query_count=10, samples_per_query=2, expected_latency_ms=0.1)
loadgen.run(np.zeros((4, 2, 2, 3), np.float32), {1: step, 2: step}, s, 2, 0.0, True, ThreadPoolExecutor(1))
"""


@pytest.mark.parametrize("scenario", ["Server", "SingleStream"])
def test_ctrl_c_during_a_loadgen_run_ends_it_with_one_line_not_a_crash(scenario, tmp_path):
    """Ctrl-C while LoadGen runs raised KeyboardInterrupt in its issue callback (LoadGen issues from the thread
    that started it), through LoadGen's C++ run: `vitbench serve` died of SIGSEGV or std::bad_function_call's abort
    (exit 134, 'terminate called ...'), LoadGen's state half torn down. LoadGen cannot be stopped part-way: the
    process ends at once, with one line and the shell's 130, its temporary log directory removed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    marker = tmp_path / "started"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", _INTERRUPTED_RUN, str(marker), scenario], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not marker.exists() and proc.poll() is None and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    assert marker.exists(), proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=25)  # long before the run's 30 s
    assert proc.returncode == 128 + signal.SIGINT, err[-2000:]
    assert "interrupted" in err and "terminate called" not in err and "Traceback" not in err
    assert not list(tmp_path.glob("vitbench-loadgen-*"))


def test_a_stream_schedule_over_the_memory_budget_is_out_of_memory_not_an_abort(monkeypatch):
    """LoadGen generates the stream scenarios' queries up front too, each with its samples: `--scenario
    MultiStream --samples-per-query 100000 --min-query-count 100 --min-duration-s 0.3` passed 3.4 GB of RSS in 12 s
    and kept growing (2e9 samples: ~120 GB, std::bad_alloc or the host's OOM killer), unchecked since only Server
    and Offline were. The count is LoadGen's own (its log's generated_query_count); the bytes, measured per query
    and per sample (docs/serving.md, "Memory"); a MultiStream or SingleStream run at MLPerf's defaults passes."""
    from concurrent.futures import ThreadPoolExecutor

    def stream(scenario, queries, spq, seconds, latency_ms):
        return loadgen.Settings(scenario, None, None, 99.0, seconds, queries, spq, latency_ms)

    step = lambda b: np.zeros((len(b), 3), np.float32)  # noqa: E731
    for s in (stream("MultiStream", 10, 4, 0.01, 1e-3), stream("SingleStream", 300, 1, 0.01, 1e-2)):
        with ThreadPoolExecutor(1) as worker:
            served = loadgen.run(np.zeros((4, 2, 2, 3), np.float32), {1: step, 2: step, 4: step}, s, 4, 0.0, True,
                                 worker)
        queries, samples, _ = loadgen.stream_schedule(s)
        assert queries == served.result.log["generated_query_count"] and samples == queries * (
            s.samples_per_query if s.scenario == "MultiStream" else 1)
    assert loadgen.STREAM_BYTES_PER_QUERY >= 288 and loadgen.STREAM_BYTES_PER_SAMPLE >= 56  # the measured
    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", "8")
    with pytest.raises(MemoryError, match=r"20,001 queries of 100000 samples.*lower min_query_count, "
                                          "samples_per_query or min_duration_s"):
        loadgen.check_schedule_fits(stream("MultiStream", 100, 100_000, 0.3, 0.03))
    for scenario, spq in (("MultiStream", 8), ("SingleStream", 1)):  # 600 s at the least hint serve gives: 2 M
        loadgen.check_schedule_fits(stream(scenario, 662, spq, 600.0, 600.0 * 1000 / 1e6))


def test_the_server_search_probes_no_rate_whose_schedule_would_pass_the_memory_budget(monkeypatch):
    """The search bisected above its first VALID probe to a rate whose schedule passed the memory budget: the
    whole trial was out of memory, its VALID probes lost, saying 'lower target_qps' to a user who gave none. A
    rate over the budget is now never probed: it bounds the search from above as an INVALID one would, and the
    bracket says so; where no rate fits at all, it is out of memory as before."""
    from vitbench.measure.serve import Search, _bracket, search_qps

    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", "0.002")  # 2 MiB: 5000 QPS for 1 s fits, 7500 does not
    s = loadgen.Settings("Server", 1.0, 15.0, 99.0, 1.0, 100, 8, 1.0)
    runs, best, over = search_qps(_fake_run(1e9), s, 10_000.0, Search(0.05, 20))  # every probe VALID
    for r in runs:
        loadgen.check_schedule_fits(r.settings)  # none over the budget
    assert best.settings.target_qps >= 5000.0
    assert over is not None and "memory budget" in _bracket(runs, over), _bracket(runs, over)
    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", "0.00001")  # not even min_query_count's samples fit
    with pytest.raises(MemoryError, match="out of memory before starting"):
        search_qps(_fake_run(1e9), s, 10_000.0, Search(0.05, 20))
