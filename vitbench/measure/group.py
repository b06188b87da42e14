"""Steps over several local devices (`devices` > 1): what a measurement does differently, in one place.

- Launch: a backend whose spec says `process_per_device` runs one rank per device; the trial launches them
  (vitbench.measure.ranks) and each rank runs the same measurement (`bench`), rank 0's record is the row, with
  every rank's img/s beside it. A single-process backend (a sharded XLA step) runs the N-device step in the trial
  itself.
- Timing in ranks: ranks must run the same number of steps (a rank that stops early leaves the others waiting in a
  collective), and they cannot agree on a time-based stop without talking. So a rank times a fixed number of
  steps: `min_steps`, in windows of `window_steps` (default: ceil(min_steps / TARGET_WINDOWS), at least 2);
  min_seconds and max_seconds do not apply there. The group's step time is rank 0's (every step ends in a
  collective that waits for the slowest rank).
- Row fields: devices and parallelism (config), global and per-device batch, the collective library, img/s of the group and
  per device. Scaling efficiency needs the same study's 1-device row: the report computes it
  (vitbench.report.devices), never the task.
- MFU: the group's model FLOP/s over (the device's peak x devices) = per-device model FLOP/s over one device's
  peak (vitbench.measure.throughput.mfu_metrics is given the per-device rate).
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Any

from vitbench import memory_budget
from vitbench.backends.base import Step, StopRule, backend_spec
from vitbench.measure import ranks
from vitbench.measure.timing import TARGET_WINDOWS
from vitbench.record import Record


def launches_ranks(step: Step, backend: str) -> bool:
    """Must this process launch a group of ranks to run `step` (and not run it itself)?"""
    return step.devices > 1 and backend_spec(backend).process_per_device and not ranks.in_group()


def setup(be, device: str, threads: int | None, step: Step) -> dict:
    """`be.setup` for `step`: `devices` passed only when > 1, so a plug-in backend written before the field
    (whose setup takes device and threads) keeps running one-device steps. From here on the process runs a
    model's steps (what the memory budget's message says past it)."""
    memory_budget.note_model_steps()
    return be.setup(device, threads, devices=step.devices) if step.devices > 1 else be.setup(device, threads)


def agreed_timing(stop: StopRule, window_steps: int | None) -> tuple[int, StopRule]:
    """(window_steps, stop rule) of a rank: a fixed step count every rank reaches (see above)."""
    windows = window_steps or max(2, math.ceil(stop.min_steps / TARGET_WINDOWS))
    return windows, replace(stop, min_seconds=0.0, max_seconds=math.inf)


def group_metrics(step: Step, info: dict, img_per_s: float) -> dict[str, Any]:
    """The row's multi-device metrics (also on a 1-device row); `devices` and `parallelism` themselves are the
    config's (absent there at their defaults: one device, dp)."""
    return {"batch_size_global": step.batch_size,
            "batch_size_per_device": step.per_device_batch, "collective_backend": info.get("collective_backend"),
            "img_per_s_per_device": img_per_s / step.devices}


def bench_group(step: Step, backend: str, stop: StopRule, **kwargs) -> Record:
    """`bench` of an N-device `step` on a process-per-device backend: N ranks, the slowest rank's record, each
    rank's img/s in `metrics['rank_img_per_s']`. The group has run a global batch only when its slowest rank has:
    in training the gradients' collective makes the ranks alike, but a dp inference step has none, and rank 0's
    record (the row before) said 4433 img/s for a group whose rank 1 ran 1333. A failed rank raises RankFailed
    (the trial's error row names it)."""
    memory_budget.note_model_steps()  # the ranks' steps: this command's tree
    results = ranks.run_group("vitbench.measure.throughput:rank_bench",  # by name: no import cycle
                              {"step": step.to_dict(), "backend": backend, "stop": asdict(stop), **kwargs},
                              step.devices)
    speeds = [r.get("metrics", {}).get("img_per_s") for r in results]
    slowest = min(range(len(results)), key=lambda i: (speeds[i] is not None, speeds[i] or 0.0))  # an unmeasured
    rec = Record.from_dict(results[slowest])  # rank's row first: the row check then says what it lacks
    rec.metrics["rank_img_per_s"] = speeds
    return rec


def trained_weights(step: Step, backend: str, device: str = "cpu", threads: int | None = None,
                    steps: int = 3) -> dict[str, Any]:
    """The model's weights (float32 numpy, the framework's names) after `steps` training steps of `step`, on
    `step.devices` devices: the equivalence check of N devices against one (tests, docs/devices.md)."""
    import numpy as np

    if launches_ranks(step, backend):
        memory_budget.note_model_steps()
        results = ranks.run_group("vitbench.measure.group:_rank_weights",
                                  {"step": step.to_dict(), "backend": backend, "device": device,
                                   "threads": threads, "steps": steps}, step.devices)
        return {k: np.asarray(v, dtype=np.float32) for k, v in results[0].items()}
    from vitbench.backends.base import get_backend

    be = get_backend(backend)
    setup(be, device, threads, step)
    work = be.prepare(step)
    try:
        for _ in range(steps):
            work.sync(work.step())
        return work.weights_host()
    finally:
        work.close()


def _rank_weights(step: dict, steps: int, **kwargs) -> dict:
    """One rank of `trained_weights`: its weights as nested lists (JSON)."""
    return {k: v.tolist() for k, v in trained_weights(Step(**step), steps=steps, **kwargs).items()}
