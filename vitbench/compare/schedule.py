"""How the two rounds of an A/B pair share the machine (`vitbench ab --schedule`).

`turns` (the default) runs both sides' sweeps on the same CPU, taking turns window by window (a referee,
vitbench.compare.turns, hands the turn; vitbench.turns takes it), one such leg on each half of the CPUs at once: a
CPU's slow spell lands on both sides alike and neither side ever runs beside the other.

`together` runs both sides' sweeps at once, one single-threaded trial per core, so that whatever else the
machine runs lands on both sides at the same moments. That holds only while both run: the side whose round ends
first (its set-up was shorter) would leave the other's last trials alone on the machine, faster than any of its
other trials ran, and the gate would read that as the faster side's regression (measured: R-Micro train, the
study's last trial, at 0.82-0.86 for a change that shortened only set-up; the next study's last trial took the
"regression" over when a trial was appended; docs/compare.md, "Rounds and pairs"). So the core of a side that
has finished is kept busy by a *filler*: one single-threaded process of matrix products, the kind of work the
other side's timed steps do, until the other side ends too.

Cores are not equally fast: on this project's 2-core VM, one single-threaded process ran matrix products 1.45x
slower on CPU 0 than on CPU 1, the same in three runs (docs/compare.md, "Cores that differ"), as much as the
slowdowns the gate must find. Left to the OS, which side got the slower core was chance, and the pair ratios
carried it. So under `together` a pair is two legs: each side pinned to its own half of the CPUs this process may
use, the halves swapped in the second leg; each side ran once on each half, at the same moments as the other, and
a side's value over the legs (vitbench.compare.ab) cancels a core's speed. Where fewer than two CPUs are usable,
or the OS cannot pin (not Linux), a pair is one unpinned leg, as before. `alternate` runs both sides on the same
CPUs (the lower half), one after the other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
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
    cpus: Collection[int] | None  # the CPUs it was pinned to (None: not pinned)

    def wait(self) -> None: ...

    def stop(self) -> None: ...


LEG = "leg"  # a pair's directory per side holds one results directory per leg: leg1, leg2


def core_halves() -> tuple[frozenset[int], frozenset[int]] | None:
    """The CPUs this process may use split in two (lower, upper), or None where fewer than two are usable or the
    OS cannot pin a process (sched_setaffinity is Linux's)."""
    if not (hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    half = len(cpus) // 2
    return (frozenset(cpus[:half]), frozenset(cpus[half:])) if half else None


def pinned_to(cpus: Collection[int] | None) -> Callable[[], None] | None:
    """A Popen preexec_fn that pins the child (and what it starts) to `cpus`; None for no pinning."""
    if cpus is None:
        return None
    mask = set(cpus)
    return lambda: os.sched_setaffinity(0, mask)


def legs_of(pair: Path) -> list[Path]:
    """The legs' results directories of one side's pair directory, in order; a directory without legs (an older
    `vitbench ab --results`, or one round given directly) is its own single leg."""
    legs = sorted(p for p in pair.iterdir() if p.is_dir() and p.name.startswith(LEG) and p.name[len(LEG):].isdigit())
    return legs or [pair]


def start_filler(cpus: Collection[int] | None = None) -> subprocess.Popen:
    """One filler process (single-threaded matrix products, pinned to `cpus` if given) until it is terminated."""
    env = {**os.environ, **{k: "1" for k in FILLER_THREADS}}
    return subprocess.Popen([sys.executable, "-c", FILLER_CODE], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pinned_to(cpus))


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
    """Wait for every round; from the moment one ends while another still runs, a filler takes its core (its CPUs,
    where it was pinned). The seconds filled, summed over the fillers (0.0 where the rounds ended together)."""
    fillers: dict[int, tuple[subprocess.Popen, float]] = {}
    try:
        while any(r.proc.poll() is None for r in rounds):
            for i, r in enumerate(rounds):
                if i not in fillers and r.proc.poll() is not None:
                    fillers[i] = (start_filler(r.cpus), time.monotonic())
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
    SHARED = "shared"  # both at once on the same CPU(s), time-sliced by the OS: the same CPU at the same moments
    TURNS = "turns"  # both on the same CPU(s), taking turns window by window (vitbench.turns); a leg per CPU half

    @property
    def own_load(self) -> float:
        """Cores the gate's own other side keeps busy while a trial runs (its single-threaded trial, or the filler
        that takes its core): part of every row's `other_load_cores`, a core under `together`, half of the one
        CPU under `shared`, none under `alternate`; under `turns` the other leg's side and the other side's turns
        on its own CPU."""
        if self is Schedule.TURNS:  # the other leg's running side (a core), and half its own CPU's time: the
            return 1.5 if core_halves() else 0.5  # other side's turns (one leg where there are no halves)
        return {Schedule.TOGETHER: 1.0, Schedule.SHARED: 0.5}.get(self, 0.0)

    def legs(self, halves: tuple[frozenset[int], frozenset[int]] | None) -> list[tuple]:
        """Per leg of a pair, the CPUs of the side started first and of the other (None: not pinned)."""
        if halves is None:
            return [(None, None)]
        if self is Schedule.ALTERNATE:
            return [(halves[0], halves[0])]
        if self in (Schedule.SHARED, Schedule.TURNS):
            return [(halves[0], halves[0]), (halves[1], halves[1])]
        return [halves, halves[::-1]]

    def for_sides(self, sides: Sequence) -> tuple[Schedule, str]:
        """The schedule these sides can run, and why it is not this one ('' where it is): a side whose code
        predates `turns` (no vitbench/turns.py: Side.takes_turns) runs `together` instead."""
        old = [s.name for s in sides if not s.takes_turns]
        if self is Schedule.TURNS and old:
            return Schedule.TOGETHER, (f"--schedule turns asked, but the {' and '.join(old)} side's code cannot "
                                       "take turns (it predates vitbench/turns.py): ran `together` instead")
        return self, ""

    def run(self, order: Sequence, paths: dict) -> float:
        """Both sides' rounds of one pair, each leg into `paths[side.name]`/legN (`side.start_round(path,
        cpus)`); on an interrupt or error no sweep nor filler is left running. The seconds a filler kept a
        finished side's core busy (together), summed over the legs."""
        if self is Schedule.TURNS:
            return self._run_turns(order, paths)
        filled = 0.0
        for n, cpus in enumerate(self.legs(core_halves()), 1):
            running: list[Round] = []
            try:
                for side, c in zip(order, cpus):
                    running.append(side.start_round(Path(paths[side.name]) / f"{LEG}{n}", c))
                    if self is Schedule.ALTERNATE:
                        running[-1].wait()
                if self is not Schedule.ALTERNATE:
                    filled += fill_until_done(running)
                for r in running:
                    r.wait()
            finally:
                for r in running:
                    r.stop()
        return filled

    def _run_turns(self, order: Sequence, paths: dict) -> float:
        """Every leg at once, each on its own CPU half with its own referee (vitbench.compare.turns): both sides'
        rounds of a leg take turns on its CPUs. No filler: a side alone on its CPU once the other has ended runs as
        it ran beside it, one at a time."""
        from vitbench.compare.turns import Referee

        referees: list[Referee] = []
        running: list[tuple[Referee, str, Round]] = []
        try:
            for n, cpus in enumerate(self.legs(core_halves()), 1):
                referees.append(Referee(tuple(side.name for side in order)))
                for side, c in zip(order, cpus):
                    r = side.start_round(Path(paths[side.name]) / f"{LEG}{n}", c, referees[-1].env(side.name))
                    running.append((referees[-1], side.name, r))
            pending = list(running)
            while pending:
                for item in [x for x in pending if x[2].proc.poll() is not None]:
                    item[0].finished(item[1])
                    pending.remove(item)
                time.sleep(POLL_S)
            for _, _, r in running:
                r.wait()
        finally:
            for _, _, r in running:
                r.stop()
            for ref in referees:
                ref.close()
        return 0.0

    def describe(self) -> str:
        """How a pair ran on this machine, for the verdict's context."""
        halves = core_halves()
        if halves is None:
            return f"{self.value}, not pinned (fewer than 2 usable CPUs, or no CPU affinity on this OS)"
        a, b = (",".join(map(str, sorted(h))) for h in halves)
        if self is Schedule.ALTERNATE:
            return f"{self.value}, both sides on CPU(s) {a}"
        if self is Schedule.TURNS:
            return (f"{self.value}, two legs a pair at once: both sides on CPU(s) {a} in one and both on {b} in the "
                    f"other, taking turns window by window; a side's value the geometric mean over its legs")
        if self is Schedule.SHARED:
            return (f"{self.value}, two legs a pair: both sides at once on CPU(s) {a}, then both on {b}; a side's "
                    f"value the geometric mean over its legs")
        return (f"{self.value}, two legs a pair: the side started first on CPU(s) {a} and the other on {b}, then "
                f"swapped; a side's value the geometric mean over its legs")


# Quiet, 12 pairs each, interleaved (docs/compare.md, "Which schedule on this host"): the sd of a trial's log pair
# ratio 0.093 under `turns` against 0.191 under `together` (median deviation 0.028 against 0.102), 28 s a pair
# against 32 s; a side whose code predates turns runs `together` (Schedule.for_sides)
DEFAULT_SCHEDULE = Schedule.TURNS
