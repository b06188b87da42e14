"""One run of MLPerf's LoadGen (pip `mlcommons-loadgen`, module `mlperf_loadgen`) against a model on a backend.

LoadGen generates the queries of an MLPerf Inference scenario, times every sample from issue to completion and
judges the run VALID or INVALID; vitbench supplies the two objects it drives:

- the QSL (query sample library): `images`, preprocessed host arrays (float32 NHWC in [-1, 1]) held in memory,
  all of them the performance set (load/unload are no-ops: nothing is read while LoadGen times);
- the SUT (system under test, `BatchingSUT`, measure/sut.py): a queue and one worker thread with a batching
  policy. The worker takes the oldest waiting sample, then waits at most `max_wait_ms` for more until it holds
  `max_batch`, pads the batch to the smallest prepared batch size that holds it (a compiled step has a fixed
  shape; the padding is counted), runs it through `Workload.infer_host` (the backend interface: host images in,
  host outputs out, the device synchronised) and reports the samples complete with their predicted class.

Nothing here names a framework or a backend: every backend whose workloads implement `infer_host` is served the
same way; one that does not is served its own device-resident input (`Served.host_input` False, said in the row).

LoadGen writes mlperf_log_summary.txt and mlperf_log_detail.txt; `run` reads both back whole (the row keeps them
beside its raw data) and parses the detail log's MLLOG lines for the result (`Result`). Settings nobody gave take
MLPerf's defaults (`SCENARIOS`, cited there).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from vitbench.errors import INTERRUPTED_EXIT, ConfigError, VitbenchError
from vitbench.measure.sut import BatchingSUT
from vitbench.record import finite_number

LOG_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")


@dataclass(frozen=True)
class ScenarioDefaults:
    """What MLPerf Inference sets for a scenario when the submitter does not."""

    percentile: float  # the latency percentile the scenario is judged (Server) or reported (the others) at
    min_query_count: int


# Sources: mlperf.conf as embedded in LoadGen 6.0.17 (`*.SingleStream.target_latency_percentile = 90`,
# `*.MultiStream.target_latency_percentile = 99`, `*.MultiStream.min_query_count = 662`,
# `*.Server.target_latency_percentile = 99`, `*.Offline.target_latency_percentile = 90`) and LoadGen's
# test_settings.h (`min_query_count = 100`, the count where mlperf.conf sets none).
SCENARIOS: dict[str, ScenarioDefaults] = {
    "SingleStream": ScenarioDefaults(90.0, 100),
    "MultiStream": ScenarioDefaults(99.0, 662),
    "Server": ScenarioDefaults(99.0, 100),
    "Offline": ScenarioDefaults(90.0, 100),
}
# mlperf.conf: `*.*.min_duration = 600000` (ms) for every scenario; `*.MultiStream.samples_per_query = 8`;
# `resnet50.Server.target_latency = 15` (ms), the image-classification benchmark's bound.
MLPERF_MIN_DURATION_S = 600.0
MLPERF_SAMPLES_PER_QUERY = 8
MLPERF_VISION_BOUND_MS = 15.0
# mlperf.conf: `*.*.qsl_rng_seed`, `*.*.sample_index_rng_seed`, `*.*.schedule_rng_seed`.
MLPERF_SEEDS = {"qsl": 2085463073848966840, "sample_index": 2747215439041700203,
                "schedule": 16159082839903944936}
# The latency percentiles LoadGen's detail log gives (results.cc: `result_<p>_percentile_latency_ns`, and in
# MultiStream `result_<p>_percentile_per_query_latency_ns`, LoadGen 6.0.17); it judges a run at any target
# percentile but logs the latency at these only, so only these are judged here (a verdict without its number
# says too little: vitbench.tasks.serve refuses the others).
LOGGED_PERCENTILES = (50.0, 90.0, 95.0, 97.0, 99.0, 99.9)
# The latency percentiles every row reports, beside the one judged (`percentile_ms`).
REPORTED_PERCENTILES = (50.0, 90.0, 99.0)
# The scenarios whose latencies are per query: MLPerf's MultiStream metric is the percentile of a query's latency
# (from its issue to its last sample's completion), what LoadGen's summary reports ("Per-query latency") and its
# early stopping estimates (results.cc, `query_latencies`); the detail log gives them as
# `result_<p>_percentile_per_query_latency_ns`, `result_mean_query_latency_ns`, `result_max_query_latency_ns`
# beside the per-sample keys. The other scenarios' are per sample (Server and SingleStream: one per query).
PER_QUERY_SCENARIOS = ("MultiStream",)


# The settings LoadGen reads in some scenarios only (Settings.test_settings): a run's raw data records each where
# it applied, None elsewhere (a value there would read as a setting of the run)
APPLIES = {"target_qps": ("Server", "Offline"), "latency_bound_ms": ("Server",),
           "expected_latency_ms": ("SingleStream", "MultiStream"), "samples_per_query": ("MultiStream",)}


@dataclass(frozen=True)
class Settings:
    """One LoadGen run's settings (the `serve` task's fields, defaults resolved; APPLIES: where each is read)."""

    scenario: str
    target_qps: float | None  # Server: the Poisson arrivals' mean rate; Offline: the expected rate (sizes a query)
    latency_bound_ms: float | None  # Server: the bound the percentile is judged at
    percentile: float  # in (0, 100)
    min_duration_s: float
    min_query_count: int
    samples_per_query: int  # MultiStream
    expected_latency_ms: float | None  # SingleStream/MultiStream: LoadGen's hint for how many queries to generate
    seeds: dict = field(default_factory=lambda: dict(MLPERF_SEEDS))

    def applied(self) -> dict:
        """The settings of APPLIES as this run's scenario had them: None where LoadGen does not read one."""
        return {k: getattr(self, k) if self.scenario in scenarios else None for k, scenarios in APPLIES.items()}

    def test_settings(self, lg) -> Any:
        ts = lg.TestSettings()
        ts.scenario = getattr(lg.TestScenario, self.scenario)
        ts.mode = lg.TestMode.PerformanceOnly
        ts.min_duration_ms = max(1, round(self.min_duration_s * 1000))
        ts.min_query_count = self.min_query_count
        ts.qsl_rng_seed = self.seeds["qsl"]
        ts.sample_index_rng_seed = self.seeds["sample_index"]
        ts.schedule_rng_seed = self.seeds["schedule"]
        # the streams' hint (None: LoadGen's own default, which the serve task never leaves it)
        ns = round(self.expected_latency_ms * 1e6) if self.expected_latency_ms is not None else None
        if self.scenario == "Server":
            ts.server_target_qps = self.target_qps
            ts.server_target_latency_ns = round(self.latency_bound_ms * 1e6)
            ts.server_target_latency_percentile = self.percentile / 100
        elif self.scenario == "Offline":
            ts.offline_expected_qps = self.target_qps
        elif self.scenario == "SingleStream":
            if ns is not None:
                ts.single_stream_expected_latency_ns = ns
            ts.single_stream_target_latency_percentile = self.percentile / 100
        else:
            if ns is not None:
                ts.multi_stream_expected_latency_ns = ns
            ts.multi_stream_target_latency_percentile = self.percentile / 100
            ts.multi_stream_samples_per_query = self.samples_per_query
        return ts


@dataclass
class Result:
    """What LoadGen's detail log says of one run."""

    valid: bool
    reason: str | None  # why INVALID (every unmet condition), None when VALID
    samples_per_s: float | None  # samples completed per second of the run (judge: per scenario, from LoadGen)
    latency_ms: dict[str, float | None]  # 'p50', 'p90', 'p99', the judged 'p<P>', 'mean', 'max' (per latency_per)
    log: dict  # every MLLOG key of the detail log -> its value (settings and results)
    latency_per: str = "sample"  # what latency_ms times: 'sample', or 'query' (MultiStream: latency_per())


def mllog(text: str) -> dict:
    """key -> value of the `:::MLLOG {json}` lines of a LoadGen detail log (the last value of a key wins)."""
    out: dict = {}
    for line in text.splitlines():
        _, sep, payload = line.partition(":::MLLOG")
        if not sep:
            continue
        try:
            entry = json.loads(payload)
        except ValueError:
            continue
        if isinstance(entry, dict) and "key" in entry:
            out[entry["key"]] = entry.get("value")
    return out


def _ms(log: dict, key: str) -> float | None:
    v = log.get(key)
    return v / 1e6 if finite_number(v) else None


def latency_per(scenario: str | None) -> str:
    """'query' where MLPerf's latencies of `scenario` are per query (PER_QUERY_SCENARIOS), else 'sample'."""
    return "query" if scenario in PER_QUERY_SCENARIOS else "sample"


def percentile_ms(log: dict, p: float, per: str = "sample") -> float | None:
    """LoadGen's `p`th percentile latency in ms, per sample or (`per` 'query') per query, from a detail log's
    MLLOG entries (None: not logged)."""
    return _ms(log, f"result_{p:.2f}_percentile_{'per_query_' if per == 'query' else ''}latency_ns")


def latencies_ms(log: dict, p: float, per: str = "sample") -> dict[str, float | None]:
    """p50, p90, p99, the judged `p<P>`, mean and max in ms, per sample or (`per` 'query') per query."""
    lat = {f"p{q:g}": percentile_ms(log, q, per) for q in REPORTED_PERCENTILES}
    lat[f"p{p:g}"] = percentile_ms(log, p, per)  # the judged percentile's, under its own name (p95), whichever
    q = "query_" if per == "query" else ""
    lat.update(mean=_ms(log, f"result_mean_{q}latency_ns"), max=_ms(log, f"result_max_{q}latency_ns"))
    return lat


# how LoadGen writes power_begin and power_end (utils.cc, DateTimeStringForPower): 11-30-2026 15:40:48.140
POWER_TIME = "%m-%d-%Y %H:%M:%S.%f"


def _power_s(log: dict) -> float | None:
    """Seconds from a run's first issued query to its last completed sample: LoadGen's `power_begin` and
    `power_end` (loadgen.cc: the run's start and the start plus the SUT's active time, to the millisecond), None
    where either is missing or unreadable."""
    try:
        begin, end = (datetime.strptime(str(log[k]), POWER_TIME) for k in ("power_begin", "power_end"))
    except (KeyError, ValueError):
        return None
    return (end - begin).total_seconds()



def completed_rate(log: dict, scenario: str) -> float | None:
    """Samples completed per second of the run, as LoadGen's detail log gives it: Offline
    `result_samples_per_second`, Server `result_completed_samples_per_sec`, SingleStream
    `result_qps_with_loadgen_overhead` (LoadGen's time between queries included). MultiStream logs no rate
    (results.cc): the same measure made from what it logs, the samples of its queries (`result_query_count` x
    `effective_samples_per_query`) over the run's active time, first issue to last completion (`power_begin` to
    `power_end`, to the millisecond), LoadGen's time between queries included as in SingleStream's. None where
    the log lacks it."""
    if scenario == "Offline":
        rate = log.get("result_samples_per_second")
    elif scenario == "Server":
        rate = log.get("result_completed_samples_per_sec")
    elif scenario == "SingleStream":
        rate = log.get("result_qps_with_loadgen_overhead")
    else:
        queries, per, span = log.get("result_query_count"), log.get("effective_samples_per_query"), _power_s(log)
        rate = queries * per / span if finite_number(queries) and finite_number(per) and span else None
    return float(rate) if finite_number(rate) and rate > 0 else None


def _met(log: dict, key: str) -> bool | None:
    v = log.get(key)
    return v if isinstance(v, bool) else None


def judge(log: dict, settings: Settings) -> Result:
    """The run's verdict from its detail log: LoadGen's own `result_validity`, and in words every condition it
    found unmet (minimum duration, minimum query count, early stopping, the latency bound)."""
    missing = "result_validity" not in log
    valid = log.get("result_validity") == "VALID"
    why = []
    if missing:
        why.append("LoadGen's detail log has no result_validity (the run did not finish)")
    if _met(log, "result_min_duration_met") is False:
        why.append(f"minimum duration not met ({settings.min_duration_s:g} s)")
    if _met(log, "result_min_queries_met") is False:
        why.append(f"minimum query count not met ({settings.min_query_count})")
    if _met(log, "early_stopping_met") is False:
        said = " ".join(str(log.get("early_stopping_result") or "too few queries").replace("*", " ").split())
        said = said.rstrip(".")
        why.append(f"early stopping not met: {said}")  # LoadGen's own words, on one line
    p, per = settings.percentile, latency_per(settings.scenario)
    lat = latencies_ms(log, p, per)
    judged = lat[f"p{p:g}"]
    if _met(log, "result_perf_constraints_met") is False:  # LoadGen judges a bound in Server only
        name = f"p{p:g} {'per-query ' if per == 'query' else ''}latency"
        over = f"{name} {judged:.3g} ms" if judged is not None else f"{name} (not logged)"
        why.append(f"{over} over the bound {settings.latency_bound_ms:g} ms")
    if not valid and not why:
        why.append(f"LoadGen judged it {log.get('result_validity')!r}")
    rate = completed_rate(log, settings.scenario)
    return Result(valid and not missing, None if valid and not missing else "; ".join(why), rate, lat, log, per)


@dataclass
class Served:
    """One LoadGen run: its settings, verdict, the SUT's batches and LoadGen's logs (text, whole)."""

    settings: Settings
    result: Result
    logs: dict[str, str]
    wall_s: float
    batches: Mapping[int, int]  # samples per batch -> batches run of that size (BatchingSUT.batches)
    padded: int
    host_input: bool

    def raw(self) -> dict:
        """What a row keeps of the run: settings (those of APPLIES where LoadGen read them, None elsewhere; the
        target QPS LoadGen derived from them, `loadgen_effective_target_qps`, from its log: SingleStream and
        MultiStream, one query per expected latency), verdict, how many batches of each size ran
        (`batch_size_counts`: samples -> batches, the sizes as JSON keys), both logs."""
        s = self.settings
        effective = self.result.log.get("effective_target_qps")
        return {"scenario": s.scenario, **s.applied(),
                "loadgen_effective_target_qps": float(effective) if finite_number(effective) else None,
                "percentile": s.percentile, "min_duration_s": s.min_duration_s,
                "min_query_count": s.min_query_count, "valid": self.result.valid, "reason": self.result.reason,
                "samples_per_s": self.result.samples_per_s, "latency_ms": self.result.latency_ms,
                "latency_per": self.result.latency_per,
                "wall_s": self.wall_s, "padded_samples": self.padded,
                "batch_size_counts": {str(n): c for n, c in sorted(self.batches.items())},
                "logs": self.logs}


def loadgen():
    """The LoadGen module, or a ConfigError saying how to install it."""
    try:
        import mlperf_loadgen
    except ImportError as e:
        raise ConfigError(f"the serve task needs MLPerf's LoadGen: pip install 'vitbench[serve]' ({e})") from e
    return mlperf_loadgen


# LoadGen generates a run's queries up front, SCHEDULE_SLACK x rate x duration samples. Peak resident memory per
# sample of that estimate (LoadGen's own bookkeeping, the list of QuerySample objects its Python binding hands the
# SUT and the SUT's queue), fitted over 1, 2 and 4 M samples (Offline) and 0.5 and 1 M (Server, the SUT saturated:
# every query waits in its queue) with a step that answers at once (benchmarks/bench_serve_memory.py,
# docs/serving.md, "Memory"): 212 and 311-325 bytes, here rounded up. ~120 (from one aborted 55 M-sample run)
# was low: Offline took 323 while the SUT queued a tuple per sample.
SCHEDULE_SLACK = 1.1
BYTES_PER_SCHEDULED_SAMPLE = {"Offline": 220, "Server": 330}


def schedule_bytes(settings: Settings) -> tuple[float, float, float] | None:
    """(samples LoadGen generates up front, the seconds they cover, the bytes they take at peak) for a Server or
    Offline run (BYTES_PER_SCHEDULED_SAMPLE); None in the stream scenarios (one query at a time)."""
    if settings.scenario not in BYTES_PER_SCHEDULED_SAMPLE or settings.target_qps is None:
        return None
    seconds = max(settings.min_duration_s, settings.min_query_count / settings.target_qps)
    samples = SCHEDULE_SLACK * settings.target_qps * seconds
    return samples, seconds, samples * BYTES_PER_SCHEDULED_SAMPLE[settings.scenario]


# The stream scenarios' queries are generated up front too, each holding its samples: LoadGen makes
# max(min_query_count, 2 x min duration / expected latency + 1) of them (STREAM_SPAN; its detail log's
# generated_query_count: 20001 for 0.01 s at 1 us). Peak RSS less RSS before, over two counts each, with a step
# that answers at once (docs/serving.md, "Memory"): SingleStream 324 bytes a query; MultiStream 738 a query of 8
# samples, 14675 of 256: 288 a query and 56 a sample, here rounded up.
STREAM_SPAN = 2
STREAM_BYTES_PER_QUERY, STREAM_BYTES_PER_SAMPLE = 300, 60


def stream_schedule(settings: Settings) -> tuple[int, int, float] | None:
    """(queries LoadGen generates up front, their samples, the bytes they take at peak) for a SingleStream or
    MultiStream run whose expected latency is set; None otherwise."""
    if settings.scenario not in APPLIES["expected_latency_ms"] or not settings.expected_latency_ms:
        return None
    per = settings.samples_per_query if settings.scenario == "MultiStream" else 1
    queries = max(settings.min_query_count,
                  int(STREAM_SPAN * settings.min_duration_s * 1000 / settings.expected_latency_ms) + 1)
    return queries, queries * per, queries * (STREAM_BYTES_PER_QUERY + per * STREAM_BYTES_PER_SAMPLE)


def check_schedule_fits(settings: Settings) -> None:
    """MemoryError (an oom row) where what LoadGen generates up front for `settings` passes the memory budget
    (vitbench.memory_budget): it aborted the whole process, with no row."""
    from vitbench.memory_budget import budget_mib, describe

    if (est := schedule_bytes(settings)) is not None:
        samples, seconds, nbytes = est
        what = (f"{samples:,.0f} samples up front ({settings.scenario} at target_qps {settings.target_qps:g} for "
                f"{seconds:g} s)")
        lower = "target_qps or min_duration_s"
    elif (est := stream_schedule(settings)) is not None:
        queries, samples, nbytes = est
        what = (f"{queries:,} queries of {samples // queries} samples up front ({settings.scenario}: "
                f"{STREAM_SPAN} x {settings.min_duration_s:g} s at {settings.expected_latency_ms:.3g} ms a query)")
        lower = "min_query_count" + (", samples_per_query" if settings.scenario == "MultiStream" else "") + \
            " or min_duration_s"
    else:
        return
    if (need := nbytes / 2**20) > (budget := budget_mib()):
        # what to lower before the budget's description: the command line clips the line (a stream's was cut)
        raise MemoryError(f"out of memory before starting: LoadGen would generate {what}, about {need:,.0f} MiB; "
                          f"lower {lower} (over the budget of {describe(budget)})")



@contextlib.contextmanager
def _interrupt_ends_process(tmp: str):
    """While LoadGen runs, Ctrl-C ends the process at once with one line and INTERRUPTED_EXIT, `tmp` (the run's
    logs) removed. Python's KeyboardInterrupt is raised in LoadGen's issue callback (LoadGen issues from the thread
    that started it) and unwinds through its C++ run, which LoadGen does not survive: the process died of SIGSEGV
    or std::bad_function_call's abort. LoadGen has no way to stop a run part-way, so nothing here can be recorded.
    Only where SIGINT is Python's default (a sweep's trial ignores it: its sweep stops it), on the main thread."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def ended(signum, frame):
        shutil.rmtree(tmp, ignore_errors=True)
        sys.stderr.write("\ninterrupted (Ctrl-C) during a LoadGen run, which cannot be stopped part-way: ended at "
                         "once, nothing recorded\n")
        sys.stderr.flush()
        os._exit(INTERRUPTED_EXIT)

    signal.signal(signal.SIGINT, ended)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run(images: np.ndarray, steps: dict[int, Any], settings: Settings, max_batch: int, max_wait_ms: float,
        host_input: bool, worker: Executor) -> Served:
    """One LoadGen run of `settings` against a BatchingSUT over `steps` (prepared batch size -> step), with
    `images` as the QSL; its logs written to a fresh temporary directory and read back whole. `worker`: the one
    thread that runs the batches (BatchingSUT), the caller's: one whose backend made the trial's device current
    there (measure/serve.py; a thread of this run's own would run the steps on the framework's default device)."""
    check_schedule_fits(settings)
    lg = loadgen()
    sut_obj = BatchingSUT(lg, images, steps, max_batch, max_wait_ms / 1000, host_input, worker)
    n = len(images)
    with tempfile.TemporaryDirectory(prefix="vitbench-loadgen-") as tmp:
        log_settings = lg.LogSettings()
        log_settings.log_output.outdir = tmp
        log_settings.log_output.copy_summary_to_stdout = False
        log_settings.enable_trace = False
        sut = lg.ConstructSUT(sut_obj.issue, sut_obj.flush)
        qsl = lg.ConstructQSL(n, n, lambda _: None, lambda _: None)
        sut_obj.start()
        t0 = time.perf_counter()
        try:
            # an audit.config in the working directory would change the settings (LoadGen's compliance tests):
            # a path that does not exist keeps them ours
            with _interrupt_ends_process(tmp):
                lg.StartTestWithLogSettings(sut, qsl, settings.test_settings(lg), log_settings,
                                            str(Path(tmp) / "no-audit.config"))
        finally:
            wall = time.perf_counter() - t0
            sut_obj.stop()
            lg.DestroyQSL(qsl)
            lg.DestroySUT(sut)
        if sut_obj.failure is not None:
            raise sut_obj.failure
        logs = {}
        for name in LOG_FILES:
            p = Path(tmp) / name
            logs[name] = p.read_text(errors="replace") if p.is_file() else ""
    if not logs["mlperf_log_detail.txt"]:
        qps = f", {settings.target_qps:g} QPS" if settings.applied()["target_qps"] is not None else ""
        raise VitbenchError(f"LoadGen wrote no {LOG_FILES[1]} ({settings.scenario}{qps})")
    result = judge(mllog(logs["mlperf_log_detail.txt"]), settings)
    return Served(settings, result, logs, wall, sut_obj.batches, sut_obj.padded, host_input)
