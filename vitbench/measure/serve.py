"""Serving scenarios of one (model, backend, settings) under MLPerf's LoadGen (records of kind 'serve').

Method (one LoadGen run each: vitbench.measure.loadgen):
  build one inference workload per batch size the SUT may run (powers of two up to the max batch, and the max
  batch; SingleStream: 1), each timed apart through its first step (compilation) and `warmup_steps` more on the
  host images (never inside a LoadGen run), then
  - SingleStream / MultiStream: one run; LoadGen's latency percentiles are the result (SingleStream: per
    sample; MultiStream: per query, MLPerf's metric, the row's `latency_per` says which);
  - Offline: one run (LoadGen's samples/s), bracketed by vitbench's own throughput mode on the max-batch workload
    (`Backend.time_windows`, the windows `bench --timing throughput` times), before and after, so the two figures
    for the same model and batch sit side by side with the windows' spread;
  - Server with a `target_qps`: one run at it; without: a search for the highest target QPS that LoadGen judges
    VALID at the latency bound: the first probe at half the max batch's rate in the throughput mode (measured
    first, up to 2 s; no server completes more), halved while INVALID, then bisection between the highest VALID
    and the lowest INVALID until they are within `qps_tolerance` of each other or `max_probes` runs were made,
    and never halved to a rate whose run would last over MAX_PROBE_S. Each probe is a full LoadGen run, kept.
A row is ok only when LoadGen judged its run VALID (Server: at least one probe); otherwise it is an error row
that keeps its numbers, LoadGen's reasons (minimum duration, query count, early stopping, the bound) and logs.
"""

from __future__ import annotations

import statistics
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from vitbench.backends.base import Step, StopRule, get_backend
from vitbench.env import environment
from vitbench.errors import ConfigError, VitbenchWarning
from vitbench.measure import loadgen
from vitbench.measure.load import OTHER_LOAD, LoadMeter
from vitbench.measure.noise import UNSTABLE, NoiseFlag, assess, summary
from vitbench.measure.throughput import resolve_step, step_config
from vitbench.measure.timing import MIN_WINDOWS, compile_seconds, summarize_windows, window_steps_for
from vitbench.record import ErrorInfo, Record, Status, now

KIND = "serve"
# Offline's expected rate over the throughput mode's just measured (see `serve`): 1.5 left an R-Nano JAX run
# at load ~13 INVALID (it ran at 2.1x the bracket's rate and out of samples in 2.4 of its 3 s)
OFFLINE_MARGIN = 3.0
MAX_QUERIES = 1_000_000  # stream queries LoadGen is asked to make at most (MLPerf's 600 s at 0.6 ms each)
# The Server search halves no further once a probe's schedule would last longer than this: at a rate where
# min_query_count queries take minutes, a busy host's tail, not the model, decides the verdict (a torch search at
# load ~15 was still halving 10 min into a trial); the row's bracket then says where it stopped.
MAX_PROBE_S = 120.0
HINT_S = 1e-4  # the expected stream latency LoadGen is told at most: 10,000 queries per second of minimum duration


@dataclass(frozen=True)
class Search:
    """The Server scenario's search for the highest VALID target QPS."""

    tolerance: float  # stop when (lowest INVALID - highest VALID) <= tolerance x highest VALID
    max_probes: int


def batch_sizes(max_batch: int, scenario: str) -> list[int]:
    """The batch sizes the SUT runs (a batch of n samples runs at the smallest of them >= n, padded).
    SingleStream: 1 (one sample outstanding at a time; the task gives it no max batch); MultiStream: up to the max
    batch, a query's samples_per_query samples arriving together."""
    if scenario == "SingleStream":
        return [1]
    sizes, s = [], 1
    while s < max_batch:
        sizes.append(s)
        s *= 2
    return [*sizes, max_batch]


def timed_s(fn, *args) -> float:
    """The seconds fn(*args) takes, on the calling thread."""
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def serve(step: Step, backend: str, device: str, threads: int | None, images: np.ndarray, real_images: bool,
          settings: loadgen.Settings, max_wait_ms: float, warmup_steps: int, search: Search,
          given_qps: bool) -> Record:
    """The scenario of `settings` on `step`'s model with `images` as the QSL (see the module docstring);
    `step.batch_size` is the SUT's max batch. `given_qps`: Server runs once at settings.target_qps, Offline takes
    it as its expected rate; otherwise the search starts from the warm-up's rate and Offline expects
    OFFLINE_MARGIN x the throughput mode's."""
    started = now()
    loadgen.loadgen()  # before any work: a missing LoadGen is a ConfigError, not a failed measurement
    if given_qps:  # the schedule LoadGen makes is the user's settings alone: refused before the model is built
        loadgen.check_schedule_fits(settings)  # (not after the warm-up and an Offline throughput mode of minutes)
    step = resolve_step(replace(step, mode="infer"))
    be = get_backend(backend)
    info = be.setup(device, threads)
    env = environment(info)
    config = {**step_config(be.name, step, device, threads), "task": "serve"}
    sizes = batch_sizes(step.batch_size, settings.scenario)
    works, run_steps, prep = {}, {}, {}
    host_input = True
    # Every step runs on one thread, the warm-up, the throughput mode and LoadGen's batches alike: torch.compile's
    # CUDA-graph trees are per thread (torch/_inductor/cudagraph_trees.py keeps them in a threading.local), so
    # graphs warmed up on this thread were recorded again inside the first LoadGen run, on the SUT's thread.
    # Its first act: the trial's device made current there (torch's current CUDA device is per thread too, and a
    # new thread's is device 0: a model on cuda:1 had its CUDA graphs, streams and syncs on cuda:0)
    steps_thread = ThreadPoolExecutor(1, thread_name_prefix="vitbench-steps",
                                      initializer=be.use_device_in_this_thread)

    def on(fn, *args):
        """fn(*args) on the steps' thread: its result."""
        return steps_thread.submit(fn, *args).result()

    try:
        for size in sizes:
            t0 = time.perf_counter()
            work = works[size] = be.prepare(replace(step, batch_size=size))
            build_s = time.perf_counter() - t0
            # compilation (JAX ahead of time, torch.compile lazily) and allocator warm-up
            first_s = on(timed_s, lambda w=work: w.sync(w.step()))
            batch = np.resize(images, (size, *images.shape[1:]))  # the QSL's first images, repeated if few
            if host_input:
                try:
                    on(work.infer_host, batch)  # the host path's own first call (a transfer, a cast) timed apart
                except NotImplementedError:
                    host_input = False
            if not host_input and real_images:
                raise ConfigError(f"backend {be.name!r} runs inference on its own input only (its workload has no "
                                  "infer_host): serve it `dataset: synthetic`")
            fn = (lambda b, w=work: w.infer_host(b)) if host_input else (lambda b, w=work: w.sync(w.step()))
            warm = [on(timed_s, fn, batch) for _ in range(warmup_steps)]
            run_steps[size] = fn
            # torch.compile compiles in the first step (no compile_s of its own): the first less a warm-up step
            prep[size] = {"build_s": build_s, "first_step_s": first_s, "warmup_s": warm,
                          "compile_s": compile_seconds(work.compile_s, step.compile, first_s,
                                                       statistics.median(warm) if warm else first_s)}
        step_s = {s: statistics.median(p["warmup_s"]) if p["warmup_s"] else p["first_step_s"]
                  for s, p in prep.items()}
        # samples/s of back-to-back largest batches at warm-up; a Server search replaces it by the throughput
        # mode's (below); the row's raw capacity_from says which (capacity_samples_per_s: vitbench.tasks.serve)
        capacity = sizes[-1] / step_s[sizes[-1]]
        # LoadGen's hint for how many stream queries to make: a run that runs out of queries before its minimum
        # duration is INVALID, so a tenth of the fastest warm-up step and at most HINT_S (a warm-up on a busy host
        # can be 10x slower than the run: a JAX SingleStream test ran out so), but no more than MAX_QUERIES
        # queries in the minimum duration (each query is memory LoadGen holds)
        fastest = min(min(p["warmup_s"] or [p["first_step_s"]]) for p in prep.values())
        hint_s = max(min(fastest / 10, HINT_S), settings.min_duration_s / MAX_QUERIES)
        settings = replace(settings, expected_latency_ms=1000 * hint_s)

        def one(s: loadgen.Settings) -> loadgen.Served:
            return loadgen.run(images, run_steps, s, step.batch_size, max_wait_ms, host_input, steps_thread)

        with LoadMeter() as load:
            extra: dict = {}
            if settings.scenario == "Server" and not given_qps:
                # the search's ceiling: the throughput mode's rate at the max batch (a warm-up of a few steps can
                # be several times too fast on a busy host); no server completes more samples than that
                extra["capacity"] = on(throughput, be, works[sizes[-1]], min(settings.min_duration_s, 2.0))
                capacity = extra["capacity"]["img_per_s"]
                runs, best, over = search_qps(one, settings, capacity, search)
            else:
                long_s = probe_s(settings, settings.target_qps) if settings.scenario == "Server" else 0.0
                if long_s > max(settings.min_duration_s, MAX_PROBE_S):  # the user's rate: said, not changed
                    warnings.warn(f"LoadGen's schedule at {settings.target_qps:g} QPS lasts {long_s:.4g} s, not "
                                  f"the minimum duration's {settings.min_duration_s:g} s: its minimum query count "
                                  f"({settings.min_query_count}) arrives only then; lower min_query_count for a "
                                  "shorter run", VitbenchWarning, stacklevel=2)
                if settings.scenario == "Offline":
                    extra["before"] = on(throughput, be, works[sizes[-1]], settings.min_duration_s)
                    if not given_qps:
                        # LoadGen makes 1.1 x expected rate x min duration samples: OFFLINE_MARGIN x the throughput
                        # mode's fastest window just measured, so that a run up to that much faster still lasts
                        # its minimum duration (a warm-up rate, measured in a few steps, can be several times too
                        # high; the median of windows measured under load, too low: a full-suite run at -n 2 ran
                        # more than 3x the median and out of samples before its 0.3 s)
                        fastest = max(extra["before"]["img_per_s_windows"])
                        settings = replace(settings, target_qps=OFFLINE_MARGIN * fastest)
                runs = [one(settings)]
                best = runs[0] if runs[0].result.valid else None
                if settings.scenario == "Offline":
                    extra["after"] = on(throughput, be, works[sizes[-1]], settings.min_duration_s)
    finally:  # the steps' thread first: a step still running (an interrupt) ends before its workload is closed
        steps_thread.shutdown(cancel_futures=True)
        for w in works.values():
            w.close()
    # LoadGen's latencies are not step samples: of the noise checks only other processes' load applies
    noise = [n for n in assess([], be.timer, load.other_cores) if n.flag is NoiseFlag.OTHER_LOAD]
    shown = best or runs[-1]
    res = shown.result
    metrics = {
        "loadgen_valid": best is not None,
        "loadgen_invalid_reason": None if best is not None else res.reason,
        "samples_per_s": (best.settings.target_qps if settings.scenario == "Server" else res.samples_per_s)
        if best is not None else None,
        "completed_samples_per_s": res.samples_per_s,
        **{f"latency_ms_{k}": res.latency_ms.get(k) for k in (*(f"p{q:g}" for q in loadgen.REPORTED_PERCENTILES),
                                                              "mean", "max")},
        "latency_ms_judged": res.latency_ms.get(f"p{settings.percentile:g}"),  # LoadGen's, at the one below
        "latency_percentile_judged": settings.percentile,  # the config's, or the scenario's MLPerf default
        "latency_per": res.latency_per,  # what the latencies time: 'sample', or 'query' (MultiStream)
        "mean_batch": (sum(n * c for n, c in shown.batches.items()) / sum(shown.batches.values())
                       if shown.batches else None),
        "padded_samples": shown.padded,
        "host_input": host_input,
        "qsl_images_loaded": len(images),
        "probes": len(runs),
        "capacity_samples_per_s": capacity,
        "compile_s": sum(p["compile_s"] or 0.0 for p in prep.values()) if any(
            p["compile_s"] is not None for p in prep.values()) else None,
        "first_step_s": sum(p["first_step_s"] for p in prep.values()),
        "timer": be.timer.value,
        OTHER_LOAD: load.other_cores,
        UNSTABLE: bool(noise),
        "noise": summary(noise),
    }
    if settings.scenario == "Server" and not given_qps:
        metrics["qps_search_bracket"] = _bracket(runs, over)
    if "before" in extra:
        metrics.update(offline_beside_throughput(res.samples_per_s, extra["before"], extra["after"]))
    raw = {"runs": [r.raw() for r in runs], "prepare": {str(k): v for k, v in prep.items()},
           "throughput": extra, "seeds": settings.seeds,
           "capacity_from": "throughput mode" if "capacity" in extra else "median warm-up step"}
    if best is None:
        what = ("no target QPS probed was VALID" if settings.scenario == "Server" and not given_qps
                else "LoadGen judged the run INVALID")
        return Record.measured(KIND, config, metrics=metrics, raw=raw, env=env, started_at=started,
                               status=Status.ERROR, error=ErrorInfo("LoadGenInvalid", f"{what}: {res.reason}"))
    return Record.measured(KIND, config, metrics=metrics, raw=raw, env=env, started_at=started)


def search_qps(one, settings: loadgen.Settings, capacity: float, search: Search
               ) -> tuple[list[loadgen.Served], loadgen.Served | None, float | None]:
    """Probes of the Server search (see the module docstring): every run made, the VALID one at the highest
    target QPS (None: none was VALID), and the lowest rate left unprobed because LoadGen's schedule at it would
    pass the memory budget (loadgen.check_schedule_fits; None: none was). Such a rate bounds the search from
    above as an INVALID probe does (a probe of it made the whole trial out of memory, its VALID probes lost);
    where no rate fits before a probe would last MAX_PROBE_S, the search is out of memory (MemoryError)."""
    runs: list[loadgen.Served] = []
    best: loadgen.Served | None = None
    over: float | None = None
    lo, hi = 0.0, capacity  # highest VALID so far, lowest INVALID so far (capacity: assumed, never probed)
    qps = capacity / 2
    while len(runs) < search.max_probes:
        if (runs or over) and probe_s(settings, qps) > MAX_PROBE_S:  # halving further: each probe twice as long
            break
        if not _fits(replace(settings, target_qps=qps)):
            over = hi = qps
        else:
            r = one(replace(settings, target_qps=qps))
            runs.append(r)
            if r.result.valid:
                best, lo = r, qps
            else:
                hi = qps
        if best is not None and hi - lo <= search.tolerance * lo:
            break
        qps = (lo + hi) / 2 if best is not None else qps / 2
    if not runs and over is not None:
        loadgen.check_schedule_fits(replace(settings, target_qps=over))  # raises: no rate probed fits
    return runs, best, over


def _fits(settings: loadgen.Settings) -> bool:
    try:
        loadgen.check_schedule_fits(settings)
    except MemoryError:
        return False
    return True


def probe_s(settings: loadgen.Settings, qps: float) -> float:
    """How long LoadGen's schedule of a Server run at `qps` lasts: until both its minimum duration and its
    minimum query count are reached."""
    return max(settings.min_duration_s, settings.min_query_count / qps)


def _bracket(runs: list[loadgen.Served], over: float | None = None) -> str:
    """'VALID up to A QPS, INVALID from B QPS': the search's final bracket in words (the unit beside each rate:
    after the words of a search that found no INVALID rate it read '... (capacity not probed) QPS'); `over`: the
    lowest rate not probed for the memory budget (search_qps)."""
    valid = [r.settings.target_qps for r in runs if r.result.valid]
    invalid = [r.settings.target_qps for r in runs if not r.result.valid]
    a = f"VALID up to {max(valid):.4g} QPS" if valid else "none VALID"
    b = f"INVALID from {min(invalid):.4g} QPS" if invalid else "no INVALID probe (capacity not probed)"
    stop = ""
    if not valid and invalid and probe_s(runs[-1].settings, min(invalid) / 2) > MAX_PROBE_S:
        stop = f" (stopped: a probe at {min(invalid) / 2:.4g} QPS would last over {MAX_PROBE_S:g} s)"
    if over is not None:
        stop += f" (not probed from {over:.4g} QPS: its schedule would pass the memory budget)"
    return f"{a}, {b}{stop}"


def throughput(be, work, seconds: float) -> dict:
    """vitbench's throughput mode on `work` (as `bench --timing throughput`): windows of queued steps, at least
    MIN_WINDOWS of them and `seconds` long; raw window times and img/s per window."""
    t0 = time.perf_counter()
    work.sync(work.step())
    one = max(time.perf_counter() - t0, 1e-9)
    per = window_steps_for(one, MIN_WINDOWS, seconds, max(60.0, 4 * seconds))
    windows = be.time_windows(work, per, StopRule(min_steps=MIN_WINDOWS, min_seconds=seconds,
                                                  max_seconds=max(60.0, 4 * seconds), min_windows=MIN_WINDOWS))
    stats = summarize_windows(windows, per)
    rates = [work.batch_size * per / w for w in windows]
    return {"img_per_s": work.batch_size / (stats["step_ms_median"] / 1000), "window_steps": per,
            "window_s": windows, "img_per_s_windows": rates}


def offline_beside_throughput(offline: float | None, before: dict, after: dict) -> dict:
    """Offline samples/s beside the throughput mode's img/s (median over both brackets' windows) and the
    windows' range: whether LoadGen's figure lies within the throughput mode's own spread."""
    rates = sorted(before["img_per_s_windows"] + after["img_per_s_windows"])
    # the median in time space (seconds per image), as every vitbench speed is work / the median time: with an
    # even count of windows the median of the rates averaged the two middle rates instead (104.73 for 104.70)
    median = 1 / statistics.median(1 / r for r in rates)
    out = {"throughput_img_per_s": median, "throughput_img_per_s_min": rates[0],
           "throughput_img_per_s_max": rates[-1]}
    if offline is not None:
        out["offline_over_throughput"] = offline / median
        out["offline_within_throughput_spread"] = rates[0] <= offline <= rates[-1]
    return out
