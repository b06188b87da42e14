"""Timing modes and raw times -> summary statistics. The raw list is always kept beside the summary."""

from __future__ import annotations

import math
import statistics

from vitbench.choices import Choice
from vitbench.errors import ConfigError


class TimingMode(Choice):
    """How a step time is measured; the two answer different questions and never mix in one number.

    latency: one step at a time, the device synchronised after each (per-step p50/p90/p99): how long one batch
      takes when nothing else is queued, what a serving loop that waits for each answer sees.
    throughput: windows of steps queued back to back between two device-idle points (device events on CUDA): the
      host runs ahead, launch and sync gaps overlap the device's work, as in a training loop or timm's
      benchmark.py and TorchBench, which time many iterations between two synchronisations. img/s.
    """

    LATENCY = "latency"
    THROUGHPUT = "throughput"


# The default for a number called img/s: what timm's benchmark.py (a batch of iterations between two
# synchronisations) and TorchBench report, and what users' training and batch-inference loops see.
DEFAULT_TIMING = TimingMode.THROUGHPUT
MIN_WINDOWS = 5  # throughput windows at least: a median and a spread need several (a window is one sample)
# Windows the sizing aims for. Many short windows, not a few long ones: a window that the OS preempts (another
# process, an interrupt) is slow as a whole, and the median of many windows leaves such windows out as the median
# of per-step latencies leaves out a slow step; a handful of long windows would nearly all be hit on a busy CPU
# (measured here, 2 cores under a load of 3: ViT-Nano/4 rounds varied 2.6x with 5-20 windows of 9-25 steps, 1.06x
# with 35-50 windows of 3-4 steps, as stable as the per-step median). A window still holds >= 2 queued steps, and
# with the default 1-2 timed seconds it lasts 20-40 ms, far longer than a GPU's sync gap (tens of microseconds).
TARGET_WINDOWS = 50


def compile_seconds(aot_s: float | None, compiled: bool, first_step_s: float, steady_s: float) -> float | None:
    """A step's compile time: the backend's own where it compiles ahead of time (JAX: `aot_s`); for a lazy
    compiler (torch.compile: `compiled`) the first step less a steady one, which it compiled in; None for eager
    execution (nothing compiled)."""
    if aot_s is not None:
        return aot_s
    return max(0.0, first_step_s - steady_s) if compiled else None


def quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default 'linear' method), q in [0, 1]."""
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def _spread(xs: list[float]) -> dict[str, float]:
    ms = 1000.0
    mean = statistics.fmean(xs)
    return {
        "step_ms_median": quantile(xs, 0.5) * ms,
        "step_ms_min": xs[0] * ms,
        "step_ms_iqr": (quantile(xs, 0.75) - quantile(xs, 0.25)) * ms,
        "step_cv": (statistics.stdev(xs) / mean) if len(xs) > 1 and mean > 0 else 0.0,
    }


def summarize(step_s: list[float]) -> dict[str, float]:
    """Latency: median, mean, p10/p90/p99, IQR (ms) and coefficient of variation of step times in seconds."""
    if not step_s:
        raise ValueError("no step times to summarise")
    xs = sorted(step_s)
    ms = 1000.0
    return {
        "steps": len(xs),
        **_spread(xs),
        "step_ms_mean": statistics.fmean(xs) * ms,
        "step_ms_p10": quantile(xs, 0.10) * ms,
        "step_ms_p90": quantile(xs, 0.90) * ms,
        "step_ms_p99": quantile(xs, 0.99) * ms,
        "timed_s": sum(xs),
    }


def summarize_windows(window_s: list[float], window_steps: int) -> dict[str, float]:
    """Throughput: statistics of the mean step time of each window (a window is one sample; per-step
    percentiles do not exist when steps overlap). step_ms_mean = all windows' time / all their steps."""
    if not window_s or window_steps < 1:
        raise ValueError("no windows to summarise")
    per_step = sorted(w / window_steps for w in window_s)
    total = sum(window_s)
    return {
        "steps": len(window_s) * window_steps,
        "windows": len(window_s),
        "window_steps": window_steps,
        **_spread(per_step),
        "step_ms_mean": total / (len(window_s) * window_steps) * 1000.0,
        "timed_s": total,
    }


def check_window(window_steps: int, step_s: float, max_seconds: float) -> None:
    """ConfigError for a window asked for (`window_steps`) that one step of about `step_s` seconds makes longer
    than `max_seconds`: the timer stops only between windows, so max_seconds would not hold (one window of 3,000
    steps ran 4 s under max_seconds 0.01). The windows `window_steps_for` chooses are capped to fit already."""
    if window_steps * step_s > max_seconds:
        raise ConfigError(f"window_steps {window_steps}: one window takes about {window_steps * step_s:.3g} s "
                          f"here (a warm-up step: {step_s * 1e3:.3g} ms), past max_seconds {max_seconds:g}, and "
                          f"timing stops only between windows; give at most {max(1, int(max_seconds / step_s))} "
                          "steps a window, or a longer max_seconds")


def window_steps_for(step_s: float, min_steps: int, min_seconds: float, max_seconds: float,
                     windows: int = TARGET_WINDOWS) -> int:
    """Steps per throughput window for a step of about `step_s` seconds: `windows` windows cover both
    `min_steps` and `min_seconds` (so the measurement is as long as a latency one), capped so that MIN_WINDOWS
    of them fit in `max_seconds`; at least 2 (one step between two events is latency)."""
    step_s = max(step_s, 1e-9)
    want = max(math.ceil(min_steps / windows), math.ceil(min_seconds / windows / step_s))
    cap = max(2, int(max_seconds / MIN_WINDOWS / step_s))
    return max(2, min(want, cap))
