"""Every metric a bench row holds (tasks `infer` and `train`), declared once: name, unit, direction, what it is.

vitbench.measure.throughput.bench writes them (the timing statistics of vitbench.measure.timing, the memory and
energy read-outs, the multi-device figures of vitbench.measure.group, the peak of vitbench.measure.peak), and
`train`'s real-input run adds its own (vitbench.protocols.input_bench). Their readers take the unit and the
description from here: `row_check` (an ok row's numbers), `vitbench compare` (the comparable ones), tidy's column
names, `vitbench plugins`, and the table `vitbench bench` prints (TABLE, REAL_INPUT_TABLE: which of them, in what
order). A key bench writes that is no measurement is in UNDECLARED with the reason (tests/test_bench_metrics.py
checks that every key of a tiny run is one or the other).
"""

from __future__ import annotations

import math

from vitbench.backends.kinds import MemoryKind
from vitbench.record import Record, finite_number
from vitbench.tasks import (
    COMPILE_CACHED,
    FLAG,
    FRACTION,
    NOISE_REASONS,
    OTHER_LOAD_CORES,
    TEXT,
    TIMER,
    UNSTABLE_ROW,
    Metric,
)


def step_samples(rec: Record) -> list[float] | None:
    """Per-sample throughput (img/s): the achieved batch over each raw step time (latency timing: one per step;
    throughput timing: one per window, its mean step time). A step time that is not a number > 0 gives NaN, which
    the comparison refuses naming the row (vitbench.compare.calibrations.metric_samples), never drops. Their median is
    taken in time space there, as img_per_s's is (batch / median step time: vitbench.compare.decide._in_time)."""
    steps = rec.raw.get("step_s")
    batch = rec.metrics.get("batch_size_achieved") or rec.measured_config.get("batch_size")
    if not isinstance(steps, list) or not finite_number(batch):
        return None
    xs = [batch / s if finite_number(s) and s > 0 else math.nan
          for s in steps]
    return xs or None


CV = "stdev/mean"  # a coefficient of variation: no unit of its own, and not capped at 1 as a fraction is

# Only img_per_s, peak_mem_mib, compile_s and energy_j_per_img are comparable: the other speeds (mean, per device,
# model FLOP/s, MFU) and the step_ms_* statistics are the same timed samples again, and a decision on each would
# count one change several times; the rest describe how the row was measured. A number a row may lack (None:
# latency-only percentiles, energy without NVML, mfu without a peak) is no problem to row_check; one it holds
# must be finite and at least `minimum` (0), as vitbench always wrote them.
TIMING = (
    Metric("img_per_s", "img/s", True, "achieved batch / median step time, in the row's timing mode; decided on "
           "raw per-step (latency) or per-window (throughput) times", comparable=True, default_compare=True,
           speed=True, samples=step_samples, samples_from="step_s"),
    Metric("img_per_s_mean", "img/s", True, "all timed images / all timed time", speed=True),
    Metric("steps", "steps", True, "timed steps (throughput: windows x steps per window)"),
    Metric("windows", "windows", True, "throughput timing: windows of queued steps timed (each one sample)"),
    Metric("step_ms_median", "ms", False,
           "median step time (latency: per step; throughput: per step of a window)"),
    Metric("step_ms_min", "ms", False, "shortest step time (throughput: of a window's mean step)"),
    Metric("step_ms_mean", "ms", False, "mean step time (throughput: all windows' time / all their steps)"),
    Metric("step_ms_iqr", "ms", False, "interquartile range of the step times (throughput: of the windows' mean "
           "steps)"),
    Metric("step_cv", CV, False, "coefficient of variation of the samples' step times (stdev / mean; 0 for one "
           "sample)"),
    Metric("step_ms_p10", "ms", False, "10th percentile step latency (latency timing only)"),
    Metric("step_ms_p90", "ms", False, "90th percentile step latency (latency timing only)"),
    Metric("step_ms_p99", "ms", False, "99th percentile step latency (latency timing only)"),
    Metric("timed_s", "s", False, "seconds of the timed steps (throughput: windows), summed: not the time "
           "between them, which the stop rule's min_seconds counts (wall clock from the first timed step), so it "
           "can be less than min_seconds, most in latency timing"),
    TIMER,
    OTHER_LOAD_CORES,
    UNSTABLE_ROW,
    NOISE_REASONS,
)

SETUP = (
    Metric("batch_size_requested", "images", True, "the batch the row asked for (the config's batch_size)"),
    Metric("batch_size_achieved", "images", True, "the batch the step ran (img_per_s divides by it)"),
    Metric("build_s", "s", False, "model and step build time, before the first step (an ahead-of-time "
           "compile, JAX's and the runtimes', is inside it and its compile_s part of it; torch.compile compiles "
           "in the first step)"),
    Metric("first_step_s", "s", False, "the first step, timed apart (a lazy compile and allocator warm-up in it)"),
    Metric("compile_s", "s", False, "compile/jit time (single value per run; a cache hit's is the time to trace "
           "and load the executable)", comparable=True,
           bounded_by=("compile_cached",)),  # a cache hit beside a cold compile is no change of the code
    COMPILE_CACHED,
    Metric("matmul_precision", TEXT, True, "the matmul precision in force during the timed steps"),
    Metric("autocast", TEXT, True, "the autocast dtype (null: no autocast)"),
    Metric("matmul_settings", TEXT, True, "the framework's matmul settings as they were read"),
    Metric("attention_kernel", TEXT, True, "the attention kernel that ran, as the framework tells "
           "(docs/measurement.md; none for a model without attention)"),
)

MEMORY = (
    Metric("peak_mem_mib", "MiB", False, "peak memory of the steady steps, of the row's memory_kind "
           "(allocator peak on a GPU; the step's state + RSS growth on a CPU; resident + XLA's planned temp "
           "where the allocator cannot be reset; the reserved peak where CUDA graphs replay)",
           comparable=True, bounded_by=("memory_kind",)),  # numbers of different kinds do not compare
    Metric("memory_kind", TEXT, False, f"what peak_mem_mib measures ({', '.join(k.value for k in MemoryKind)})"),
    Metric("state_mib", "MiB", False, "the step's state: weights, grads, optimizer state, inputs"),
    Metric("compile_peak_mem_mib", "MiB", False, "peak memory from build through compilation and warm-up"),
    Metric("reserved_peak_mib", "MiB", False, "the allocator's reserved peak of the steady steps (CUDA)"),
    Metric("compile_reserved_peak_mib", "MiB", False, "the allocator's reserved peak, build through warm-up "
           "(CUDA)"),
    Metric("device_used_mib", "MiB", False, "device memory in use at the end (NVML: the whole device, other "
           "processes included)"),
    Metric("energy_j_per_img", "J/img", False, "device energy per image over the timed steps (NVML; a group's: "
           "one device's energy over its share of the images, the devices alike)",
           comparable=True),
    Metric("power_w_mean", "W", False, "mean device power over the timed steps (NVML)"),
    Metric("sm_clock_mhz_min", "MHz", True, "the lowest SM clock NVML read during the timed steps (every "
           "measure.nvml.SAMPLE_S; raw.nvml_samples holds them with the power)"),
    Metric("sm_clock_mhz_max", "MHz", True, "the highest SM clock NVML read during the timed steps"),
    Metric("nvml", TEXT, False, "why NVML read no energy (null: it did)"),
)

GROUP = (
    Metric("batch_size_global", "images", True, "the step's global batch (all devices)"),
    Metric("batch_size_per_device", "images", True, "each device's share of the global batch"),
    Metric("collective_backend", TEXT, True, "the collective library of a multi-device step (null: one device)"),
    Metric("img_per_s_per_device", "img/s", True, "img_per_s / devices", speed=True),
)

FLOPS = (
    Metric("gflops_per_img_fwd", "GFLOP/img", False, "analytic forward FLOPs per image (1 MAC = 2 FLOPs)"),
    Metric("model_tflops_per_s", "TFLOP/s", True, "analytic FLOPs of a step (x3 for a training step) / median "
           "step time"),
    Metric("peak_tflops", "TFLOP/s", True, "the device's peak for the precision that mfu divides by (null: none "
           "known)"),
    Metric("peak_source", TEXT, True, "where peak_tflops came from: datasheet or measured"),
    Metric("peak_basis", TEXT, True, "datasheet, measured_quiet, or measured_busy (provisional)"),
    Metric("peak_by", TEXT, True, "the datasheet row, or what measured the best matmul"),
    Metric("peak_measured_at", TEXT, True, "when the measured peak was read (ISO 8601, local "
           "time: not the UTC of ISO_TIME)"),
    Metric("peak_provisional", FLAG, False, "every reading of the peak was taken while the machine was busy"),
    Metric("mfu", FRACTION, True, "model FLOP/s / the device's peak for the precision (peak_source: datasheet "
           "or measured), at most 1"),  # capped since METHOD_VERSION 3 (0bb9b6f): an edited 7.5 was printed as
    # measured
    Metric("mfu_over_peak", "x", False, "model FLOP/s / the peak where that passed 1 (mfu capped at 1; null: it "
           "did not)"),
)

# `train` with real_input_dataset (vitbench.protocols.input_bench): the transfer training loop on real images
REAL_INPUT = (
    Metric("real_input_img_per_s", "img/s", True, "training on real images: batch / median step time",
           speed=True),
    Metric("real_input_step_ms_median", "ms", False, "real images: median step time (per step of a window)"),
    Metric("real_input_step_ms_iqr", "ms", False, "real images: interquartile range of the windows' steps"),
    Metric("real_input_step_cv", CV, False, "real images: coefficient of variation of the windows' steps"),
    Metric("real_input_windows", "windows", True, "real images: windows timed"),
    Metric("real_input_window_steps", "steps", True, "real images: steps per window (sized as bench's)"),
    Metric("input_img_per_s", "img/s", True, "images decoded and preprocessed per second of waiting on input"),
    Metric("input_bound_fraction", FRACTION, False, "share of the timed time spent waiting on input"),
    Metric("real_input_source", TEXT, True, "the images' source (format and path)"),
    Metric("skipped_files", "files", False, "corrupt files skipped (real_input_skip_corrupt)"),
    Metric("real_input_precision", TEXT, True, "the transfer loop's numerics (whatever the row's precision)"),
    Metric("real_input_optimizer", TEXT, True, "the transfer loop's optimiser (OptimConfig's default, whatever the "
           "row's optimizer)"),
    Metric("real_input_other_load_cores", "cores", False, "real images: average cores other processes kept busy "
           "while its windows were timed (vitbench.measure.load)"),
    Metric("real_input_noise", TEXT, False, "why the real-image windows are untrustworthy, one clause per flag "
           "(vitbench.measure.noise; null: stable); the row's `unstable` holds them too"),
)

METRICS = (*TIMING, *SETUP, *MEMORY, *GROUP, *FLOPS, *REAL_INPUT)

# Keys bench writes that are not declared, and why. A metric named like a config field takes the field's column
# in the tidy frame (vitbench.tidy._flatten: the field becomes 'config.<name>'); these echo a setting, so they stay
# 'metric.<name>' beside the field.
UNDECLARED = {
    "window_steps": "throughput: the steps per window the sizing chose (the config's window_steps, or its choice "
                    "where that is null): a setting, not a measurement",
    "compile_mode": "the compile mode the backend ran (a setting echoed from the backend's settings)",
    "real_input_steps": "real images: the steps timed (the config's real_input_steps is the least asked for); "
                        "real_input_windows x real_input_window_steps",
    "rank_img_per_s": "a group of ranks: every rank's img/s, a list (a declared metric is one value: row_check, "
                      "tidy's columns, compare); docs/devices.md",
}

# What `vitbench bench` prints, in this order (its unit and description read from the declarations above)
TABLE = ("img_per_s", "step_ms_median", "step_ms_p90", "step_ms_p99", "windows", "step_ms_iqr", "step_cv",
         "steps", "timer", "first_step_s", "compile_s", "peak_mem_mib", "compile_peak_mem_mib",
         "reserved_peak_mib", "device_used_mib", "energy_j_per_img", "power_w_mean", "matmul_precision",
         "attention_kernel", "model_tflops_per_s", "peak_tflops", "mfu")
REAL_INPUT_TABLE = ("real_input_img_per_s", "real_input_step_ms_median", "real_input_step_ms_iqr",
                    "real_input_step_cv", "input_img_per_s", "input_bound_fraction", "skipped_files")
DECLARED = {m.name: m for m in METRICS}
