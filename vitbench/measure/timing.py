"""Raw per-step times -> summary statistics. The raw list is always kept beside the summary."""

from __future__ import annotations

import statistics


def _quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default 'linear' method), q in [0, 1]."""
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(step_s: list[float]) -> dict[str, float]:
    """Median, mean, p10/p90/p99, IQR (ms) and coefficient of variation of step times given in seconds."""
    if not step_s:
        raise ValueError("no step times to summarise")
    xs = sorted(step_s)
    ms = 1000.0
    mean = statistics.fmean(xs)
    return {
        "steps": len(xs),
        "step_ms_median": _quantile(xs, 0.5) * ms,
        "step_ms_mean": mean * ms,
        "step_ms_min": xs[0] * ms,
        "step_ms_p10": _quantile(xs, 0.10) * ms,
        "step_ms_p90": _quantile(xs, 0.90) * ms,
        "step_ms_p99": _quantile(xs, 0.99) * ms,
        "step_ms_iqr": (_quantile(xs, 0.75) - _quantile(xs, 0.25)) * ms,
        "step_cv": (statistics.stdev(xs) / mean) if len(xs) > 1 and mean > 0 else 0.0,
        "timed_s": sum(xs),
    }
