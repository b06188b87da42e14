"""A known slowdown for testing speed gates: extra real work in every timed step, switched on by an environment
variable meant for that test only (the power measurement of `vitbench ab`, benchmarks/bench_gate_power.py).

With VITBENCH_TEST_EXTRA_WORK=0.10, every step of a throughput/latency measurement also runs a fixed amount of
pure-Python arithmetic sized, once before timing, to 10 % of the median of a few more (untimed) steps (their CPU
time where that is less than their wall time: a busy machine must not inflate the size): the same work each
step, so a busier machine slows it as it slows the model. A size S makes a step (1 + S) times as long, so img/s
falls to 1 / (1 + S) of what it was (0.952, 0.909, 0.833 for 5, 10, 20 %). It runs on the host after
the step is issued: on a synchronous device (CPU) it adds to the step time; on an accelerator it may overlap. A
record measured with it carries raw['test_extra_work'], so it can never pass for a normal measurement.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from typing import Any

from vitbench.backends.base import Workload
from vitbench.errors import ConfigError

ENV = "VITBENCH_TEST_EXTRA_WORK"
_UNIT = 2_000  # loop iterations per work unit (~0.06 ms on a 2020s CPU core): fine enough for 5 % of a 2 ms step
SIZING_STEPS, SIZING_S = 15, 0.3  # untimed steps that size the work: up to this many, within this many seconds


def _unit() -> int:
    acc = 0
    for i in range(_UNIT):
        acc += i * i
    return acc


def requested() -> float | None:
    """The fraction asked for in the environment (None when unset or 0); a bad value is a ConfigError."""
    v = os.environ.get(ENV, "").strip()
    if not v:
        return None
    try:
        f = float(v)
    except ValueError:
        f = math.nan
    if not (math.isfinite(f) and 0 <= f <= 10):
        raise ConfigError(f"${ENV}={v!r}: must be a fraction of the step time in [0, 10], e.g. 0.1 for 10 %")
    return f or None


class ExtraWork(Workload):
    """`inner`'s steps, each followed by `units` fixed work units on the host."""

    def __init__(self, inner: Workload, fraction: float):
        self.inner, self.fraction = inner, fraction
        self.batch_size, self.compile_s, self.settings = inner.batch_size, inner.compile_s, inner.settings
        times: list[tuple[float, float]] = []
        while len(times) < 3 or (len(times) < SIZING_STEPS and sum(w for w, _ in times) < SIZING_S):
            times.append(_timed(lambda: inner.sync(inner.step())))
        # Each cost is the lesser of wall and CPU time: CPU time for a single-threaded step on a busy machine (its
        # wall time counts the other processes' turns, the short unit's does not), wall time for a step that runs
        # on several threads (its CPU time adds them up).
        step_s = min(statistics.median(w for w, _ in times), statistics.median(c for _, c in times))
        unit_s = statistics.median(min(_timed(_unit)) for _ in range(9))
        self.units = max(1, round(fraction * step_s / unit_s))
        self.info = {"fraction": fraction, "units": self.units, "unit_s": unit_s, "sized_on_step_s": step_s}

    def step(self) -> Any:
        out = self.inner.step()
        for _ in range(self.units):
            _unit()
        return out

    def sync(self, out: Any) -> None:
        self.inner.sync(out)

    def sync_window(self, outs: list[Any]) -> None:
        self.inner.sync_window(outs)

    def state_bytes(self) -> int | None:
        return self.inner.state_bytes()

    def close(self) -> None:
        self.inner.close()


def _timed(fn) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0
