"""Is a measurement stable enough to trust? Flags that go into the row and onto the screen.

Thresholds follow pyperf (psf/pyperf, pyperf/_cli.py `format_checks`), which warns "the benchmark result may be
unstable" when the standard deviation is 10 % of the mean or more and when the shortest raw value is under 1 ms;
vitbench adds what it can see of the cause: other processes' CPU time during the timed steps, the GPU's own
report of slowing down (NVML), and a drift: samples that move steadily while being timed (a device that has not
reached its steady state; found on an H200, docs/gpu.md), which a CV under 10 % can hide.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from vitbench.backends.base import TimerKind
from vitbench.choices import Choice
from vitbench.measure.load import BUSY_CORES

# A timed row's flag metric: some NoiseFlag was raised (its reasons: the row's `noise`, summary); the report and
# the history mark a speed that rests on such rows (vitbench.report.caveats)
UNSTABLE = "unstable"
CV_LIMIT = 0.10  # pyperf: stdev >= 10 % of the mean
SHORT_SAMPLE_S = 1e-3  # pyperf: a raw value under 1 ms is dominated by timer resolution and overhead
MIN_SAMPLES = 3  # fewer samples have no spread to judge
# Drift: every sample of the first third on one side of every sample of the last third. For samples in random
# order (no drift) that happens with probability 2 / C(2k, k) for k samples per third: 0.8 % at k=5, under 1e-5
# at k=10; fewer than DRIFT_MIN_THIRD per third are not judged (k=3: 10 %). The shift of the thirds' medians must
# also be at least DRIFT_MIN_SHIFT, half the CV limit: a smaller steady move is not worth a flag.
DRIFT_MIN_THIRD = 5
DRIFT_MIN_SHIFT = CV_LIMIT / 2


class NoiseFlag(Choice):
    HIGH_CV = "high_cv"
    FEW_SAMPLES = "few_samples"
    SHORT_SAMPLES = "short_samples"
    OTHER_LOAD = "other_load"
    GPU_SLOWDOWN = "gpu_slowdown"
    OTHER_GPU_PROCESSES = "other_gpu_processes"
    DRIFT = "drift"


@dataclass(frozen=True)
class Noise:
    flag: NoiseFlag
    detail: str


def assess(samples_s: list[float], timer: TimerKind, other_cores: float | None = None,
           gpu_slowdown: tuple[str, ...] = (), other_gpu_processes: int | None = None) -> list[Noise]:
    """What makes the samples (seconds: steps or windows) untrustworthy; empty when nothing does."""
    out: list[Noise] = []
    if len(samples_s) < MIN_SAMPLES:
        out.append(Noise(NoiseFlag.FEW_SAMPLES, f"only {len(samples_s)} timed sample(s)"))
    if len(samples_s) >= 2:
        mean = statistics.fmean(samples_s)
        cv = statistics.stdev(samples_s) / mean if mean > 0 else 0.0
        if cv >= CV_LIMIT:
            out.append(Noise(NoiseFlag.HIGH_CV, f"CV {cv:.2f} >= {CV_LIMIT:.2f} (stdev/mean of the samples)"))
    shift = drift(samples_s)
    if shift is not None:
        out.append(Noise(NoiseFlag.DRIFT, f"the samples drift: the last third's median is {shift:+.0%} off the "
                                          "first third's (a device not yet at its steady state: more warm-up or "
                                          "longer timing)"))
    if samples_s and timer is TimerKind.HOST_CLOCK and min(samples_s) < SHORT_SAMPLE_S:
        out.append(Noise(NoiseFlag.SHORT_SAMPLES, f"shortest sample {min(samples_s) * 1e3:.3f} ms < 1 ms on the "
                                                  "host clock: use a larger batch or throughput timing"))
    if other_cores is not None and other_cores >= BUSY_CORES:
        out.append(Noise(NoiseFlag.OTHER_LOAD, f"other processes used {other_cores:.1f} CPU cores meanwhile"))
    if gpu_slowdown:
        out.append(Noise(NoiseFlag.GPU_SLOWDOWN, f"the GPU reported {', '.join(gpu_slowdown)}"))
    if other_gpu_processes:
        out.append(Noise(NoiseFlag.OTHER_GPU_PROCESSES, f"{other_gpu_processes} other process(es) on the GPU"))
    return out


def drift(samples_s: list[float]) -> float | None:
    """The relative shift of the last third's median from the first third's when the two thirds do not overlap
    and it is at least DRIFT_MIN_SHIFT (samples in the order taken), else None."""
    k = len(samples_s) // 3
    if k < DRIFT_MIN_THIRD:
        return None
    first, last = samples_s[:k], samples_s[-k:]
    if not (max(first) < min(last) or max(last) < min(first)):
        return None
    m0 = statistics.median(first)
    shift = statistics.median(last) / m0 - 1 if m0 > 0 else 0.0
    return shift if abs(shift) >= DRIFT_MIN_SHIFT else None


def summary(noise: list[Noise]) -> str | None:
    return "; ".join(n.detail for n in noise) or None
