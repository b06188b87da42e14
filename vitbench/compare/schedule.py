"""How the two rounds of an A/B pair share the machine (`vitbench ab --schedule`).

`together` runs both sides' sweeps at once, one single-threaded trial per core, so that whatever else the
machine runs lands on both sides at the same moments. That holds only while both run: the side whose round ends
first (its set-up was shorter) would leave the other's last trials alone on the machine, faster than any of its
other trials ran, and the gate would read that as the faster side's regression (measured: R-Micro train, the
study's last trial, at 0.82-0.86 for a change that shortened only set-up; the next study's last trial took the
"regression" over when a trial was appended; docs/compare.md, "Rounds and pairs"). So the core of a side that
has finished is kept busy by a *filler*: one single-threaded process of matrix products, the kind of work the
other side's timed steps do, until the other side ends too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Protocol

from vitbench.choices import Choice

# The filler's work: float32 products of 256 x 256 matrices (about 34 MFLOP each, a tiny model's matmul size) on
# one thread, until it is stopped. Its output goes nowhere; it holds no file.
FILLER_CODE = ("import numpy as np\n"
               "a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)\n"
               "b = a.copy()\n"
               "while True:\n"
               "    b = a @ b\n"
               "    b /= np.abs(b).max() + 1\n")
FILLER_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # numpy's BLAS: one thread
POLL_S = 0.05  # how often the rounds are looked at while both may run (a filler starts within this of a round's end)
FILLER_GRACE_S = 10.0  # a filler has no SIGTERM handler (Python's default: it dies at once); 10 s is a hung one


class Round(Protocol):
    """A side's round in progress (vitbench.compare.ab.Running)."""

    proc: subprocess.Popen

    def wait(self) -> None: ...

    def stop(self) -> None: ...


def start_filler() -> subprocess.Popen:
    """One filler process (single-threaded matrix products) until it is terminated."""
    env = {**os.environ, **{k: "1" for k in FILLER_THREADS}}
    return subprocess.Popen([sys.executable, "-c", FILLER_CODE], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_process(proc: subprocess.Popen, grace_s: float) -> None:
    """End `proc` if it still runs: SIGTERM, then SIGKILL if it has not exited `grace_s` seconds later; reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fill_until_done(rounds: Sequence[Round]) -> float:
    """Wait for every round; from the moment one ends while another still runs, a filler takes its core. The
    seconds filled, summed over the fillers (0.0 where the rounds ended together)."""
    fillers: dict[int, tuple[subprocess.Popen, float]] = {}
    try:
        while any(r.proc.poll() is None for r in rounds):
            for i, r in enumerate(rounds):
                if i not in fillers and r.proc.poll() is not None:
                    fillers[i] = (start_filler(), time.monotonic())
            time.sleep(POLL_S)
    finally:
        ended = time.monotonic()
        for proc, _ in fillers.values():
            stop_process(proc, FILLER_GRACE_S)
    return sum(ended - t0 for _, t0 in fillers.values())


class Schedule(Choice):
    """How the two rounds of one pair share the machine."""

    ALTERNATE = "alternate"  # one after the other, the first side alternating: A B, B A, ...
    TOGETHER = "together"  # both at once (each single-threaded trial on its own core): they see the same load

    def run(self, order: Sequence, paths: dict) -> float:
        """Both sides' rounds of one pair (`side.start_round(paths[side.name])`); on an interrupt or error no
        sweep nor filler is left running. The seconds a filler kept a finished side's core busy (together)."""
        running: list[Round] = []
        filled = 0.0
        try:
            for side in order:
                running.append(side.start_round(paths[side.name]))
                if self is Schedule.ALTERNATE:
                    running[-1].wait()
            if self is Schedule.TOGETHER:
                filled = fill_until_done(running)
            for r in running:
                r.wait()
        finally:
            for r in running:
                r.stop()
        return filled


DEFAULT_SCHEDULE = Schedule.TOGETHER  # twice the pairs in a budget, the same load on both sides (docs/compare.md)
