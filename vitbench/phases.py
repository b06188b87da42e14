"""When a trial process reached its first measured step: marked by the measurement, read by the trial runner.

`first_step()` is called just before the first step of a measurement runs (vitbench.measure.throughput); the
trial (vitbench.trial) puts the time into its row's runner fields, and the local executor turns it into
`runner.to_first_step_s`: from the trial process's start to its first step (framework imports, device set-up,
model build and an ahead-of-time compile included): the trial's start-up as a user waits for it.
"""

from __future__ import annotations

import time

_marks: dict[str, float] = {}


def reset() -> None:
    _marks.clear()


def first_step() -> None:
    """Mark now (unix time) as the first step's start, unless a step was marked already."""
    _marks.setdefault("first_step", time.time())


def first_step_at() -> float | None:
    return _marks.get("first_step")
