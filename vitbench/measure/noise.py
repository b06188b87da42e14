"""Is a measurement stable enough to trust? Flags that go into the row and onto the screen.

Thresholds follow pyperf (psf/pyperf, pyperf/_cli.py `format_checks`), which warns "the benchmark result may be
unstable" when the standard deviation is 10 % of the mean or more and when the shortest raw value is under 1 ms;
vitbench adds what it can see of the cause: other processes' CPU time during the timed steps, and the GPU's own
report of slowing down (NVML).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from vitbench.backends.base import TimerKind
from vitbench.choices import Choice
from vitbench.measure.load import BUSY_CORES

CV_LIMIT = 0.10  # pyperf: stdev >= 10 % of the mean
SHORT_SAMPLE_S = 1e-3  # pyperf: a raw value under 1 ms is dominated by timer resolution and overhead
MIN_SAMPLES = 3  # fewer samples have no spread to judge


class NoiseFlag(Choice):
    HIGH_CV = "high_cv"
    FEW_SAMPLES = "few_samples"
    SHORT_SAMPLES = "short_samples"
    OTHER_LOAD = "other_load"
    GPU_SLOWDOWN = "gpu_slowdown"
    OTHER_GPU_PROCESSES = "other_gpu_processes"


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


def summary(noise: list[Noise]) -> str | None:
    return "; ".join(n.detail for n in noise) or None
