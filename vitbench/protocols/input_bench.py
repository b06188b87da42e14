"""Training throughput with real input, beside the synthetic-input figure of `vitbench bench --task train`, timed
the same way.

The synthetic benchmark times the model alone (timm's benchmark.py convention); a real training run also waits
for its batches to be decoded and preprocessed. This runs the transfer training loop (the backend's `train`, the
loop `vitbench pretrain` uses: Adam, one host batch per step) on a real dataset with the synthetic benchmark's
method (vitbench.measure.throughput): the first step (compilation) and `warmup_steps` apart, then throughput
windows of steps (one `train` call each, timed from its first batch request, so its set-up is left out), each
ended by a device sync (the loop's losses read back), sized by `window_steps_for` from the
warm-up's median step and run until the shared stopping rule (`StopRule`: min_steps, min_seconds, MIN_WINDOWS,
max_seconds) would stop at that step time; summarised by `summarize_windows` (median and spread of the windows'
per-step times), raw window times kept. One input stream feeds every window, its loader started and its first
batch ready before the clock starts, so a window never pays the loader's start-up. It reports images/s, the input
pipeline's own images/s and the share of the timed windows spent waiting on input
(vitbench.transfer.loader.InputStats), so a user sees when the loader, not the model, is the limit.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import numpy as np

from vitbench.backends.base import TRANSFER_PRECISION
from vitbench.backends.workload import StopRule
from vitbench.backends.kinds import TimerKind
from vitbench.measure.load import LoadMeter
from vitbench.measure.noise import assess, summary
from vitbench.measure.timing import MIN_WINDOWS, summarize_windows, window_steps_for
from vitbench.transfer.data import ImageSet, Splits, batch_indices


class _Fed:
    """The training split as the backend's `train` sees it, its batches taken from one long stream (`feed`):
    each `train` call (a window) consumes the next `len(order)` batches, whatever order it drew itself."""

    def __init__(self, data: ImageSet, feed: Iterator):
        self._data, self._feed = data, feed
        self.started: float | None = None  # when the current `train` call asked for its first batch

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name):
        return getattr(self._data, name)

    def steps(self, order: np.ndarray, resolution: int):
        self.started = time.perf_counter()  # runs at the first request: the call's set-up is behind it
        for _ in range(len(order)):
            yield next(self._feed)

    def close(self) -> None:
        """End the stream: its loader stops and its input seconds are counted (InputStats, at the stream's end)."""
        self._feed.close()


def _primed(data: ImageSet, order: np.ndarray, resolution: int) -> Iterator:
    """`data.steps(order)` with its first batch already decoded (the loader started, its prefetch in flight)."""
    it = data.steps(order, resolution)
    first = next(it)

    def gen():
        yield first
        yield from it

    return gen()


def planned_windows(step_s: float, window_steps: int, min_steps: int, min_seconds: float, max_seconds: float
                    ) -> int:
    """How many windows the timers' stopping rule (`StopRule`) runs at a steady `step_s` per step: the count
    a loop that must know its length up front (a training loop over a fixed batch order) runs."""
    windows = 0
    stop = StopRule(min_steps, min_seconds, max_seconds, min_windows=MIN_WINDOWS)
    while not stop.done(windows, windows * window_steps, windows * window_steps * step_s):
        windows += 1
    return windows


def real_input_training(model: str, backend: str, splits: Splits, resolution: int, batch_size: int, *,
                        min_steps: int, min_seconds: float, max_seconds: float, warmup_steps: int,
                        device: str = "cpu", threads: int | None = None, seed: int = 0,
                        window_steps: int | None = None) -> tuple[dict, dict]:
    """(metrics, raw) of training `model` (random init) on `splits.train` (vitbench.transfer.data.load_splits:
    listed before any timing, so bad data exits first), timed as the module docstring says, in windows of
    `window_steps` steps (None: sized from the warm-up as bench's; windows whatever the row's `timing`). metrics:
    real_input_img_per_s (batch / median step), real_input_step_ms_median / _iqr / _cv, real_input_windows,
    real_input_window_steps, real_input_steps, input_img_per_s, input_bound_fraction, real_input_source,
    real_input_precision (what the real-input steps compute in: the transfer primitives' TRANSFER_PRECISION),
    skipped_files (corrupt files skipped under data.skip_corrupt; a run that reads no image exits 2 naming the
    split); raw:
    real_input_window_s, real_input_warmup_s (seconds per warm-up step)."""
    from vitbench.backends.base import transfer_backend
    from vitbench.models.specs import get_spec
    from vitbench.transfer.schedules import OptimConfig

    spec = get_spec(model)
    be = transfer_backend(backend)
    be.setup(device, threads)
    net = be.init_model(spec, resolution, splits.num_classes, seed)
    data = splits.train

    recipe = OptimConfig(steps=1, warmup_steps=0)  # the transfer loop's optimiser, whatever the row's `optimizer`

    def run(fed: _Fed, steps: int) -> float:
        """Seconds from the call's first batch request to its return (the losses read back: a device sync); the
        call's set-up before it (optimizer state, batch order) and any compile time left out."""
        nonlocal net
        c0 = be.compile_s
        net, _ = be.train(net, fed, resolution, recipe.model_copy(update={"steps": steps}), batch_size, seed)
        return time.perf_counter() - fed.started - (be.compile_s - c0)

    warm = _Fed(data, _primed(data, batch_indices(len(data), batch_size, 2 + warmup_steps, seed), resolution))
    run(warm, 1)  # the first step: build, compile
    warmup_s = [run(warm, 1) for _ in range(warmup_steps)]
    estimate = statistics.median(warmup_s) if warmup_s else run(warm, 1)
    warm.close()
    # the row's own window_steps where it gives one (it was replaced by the sizing's: found by a review)
    per_window = window_steps or window_steps_for(estimate, min_steps, min_seconds, max_seconds)
    windows = planned_windows(estimate, per_window, min_steps, min_seconds, max_seconds)
    timed = _Fed(data, _primed(data, batch_indices(len(data), batch_size, windows * per_window, seed + 1),
                               resolution))
    before = data.input.snapshot()
    # its own load reading and noise checks: the row's are of the synthetic steps, so real-image windows halved
    # by other processes (CV 0.64) went unflagged (found by a review)
    with LoadMeter() as load:
        window_s = [run(timed, per_window) for _ in range(windows)]
    timed.close()
    noise = assess(window_s, TimerKind.HOST_CLOCK, load.other_cores)  # run() reads the host clock
    stats = summarize_windows(window_s, per_window)
    got = data.input.metrics(before, sum(window_s))
    metrics = {"real_input_img_per_s": batch_size / (stats["step_ms_median"] / 1000),
               **{f"real_input_{k}": stats[k] for k in ("step_ms_median", "step_ms_iqr", "step_cv", "windows",
                                                        "window_steps", "steps")},
               "input_img_per_s": got["input_img_per_s"], "input_bound_fraction": got["input_bound_fraction"],
               "real_input_source": splits.source, "skipped_files": len(splits.skipped),
               # the transfer primitives' numerics, whatever the row's precision (its synthetic steps')
               "real_input_precision": TRANSFER_PRECISION, "real_input_optimizer": recipe.optimizer,
               "real_input_other_load_cores": load.other_cores, "real_input_noise": summary(noise)}
    splits.warn_skipped()
    return metrics, {"real_input_window_s": window_s, "real_input_warmup_s": warmup_s}
