"""The signals that stop a sweep, a worker or a trial from outside (a scheduler's cancel, requeue or preemption,
Ctrl-C, a closed terminal), and `stopped_by`, which turns them into `Stopped` where the code was waiting."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterable, Iterator


# The warning a scheduler sends before it preempts a job or ends it at its time limit: SLURM's `--signal=USR2@N`
# (`B:USR2@N` for the batch shell only); submitit asks for it on every job (its SUBMITIT_PREEMPT_SIGNAL default).
PREEMPT_SIGNAL = signal.SIGUSR2
# Signals by which a trial, a worker or a sweep is stopped from outside, not by its own fault: a cancelled, requeued
# or preempted job (SLURM sends SIGTERM to every process of the job), Ctrl-C, a closed terminal, the preemption
# warning. A trial stopped by one is 'interrupted' and runs again next time (on every executor).
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, PREEMPT_SIGNAL)


class Stopped(KeyboardInterrupt):
    """A stop signal (STOP_SIGNALS) received by a sweep or a worker, raised where it was waiting as Ctrl-C raises
    KeyboardInterrupt: the executor loop cancels what runs and records it as interrupted."""

    def __init__(self, sig: signal.Signals):
        super().__init__(sig.name)
        self.signal = sig


def _raise_stopped(signum, frame):
    raise Stopped(signal.Signals(signum))


@contextlib.contextmanager
def _handled(signals: Iterable[signal.Signals], handler) -> Iterator[None]:
    """`handler` for each of `signals` while inside, the previous handlers after (only the main thread can take
    signals: elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)


@contextlib.contextmanager
def stopped_by(signals: Iterable[signal.Signals]) -> Iterator[None]:
    """While inside, each of `signals` raises Stopped (main thread only); the previous handlers come back after."""
    with _handled(signals, _raise_stopped):
        yield


@contextlib.contextmanager
def deferred(signals: Iterable[signal.Signals]) -> Iterator[list[int]]:
    """While inside, each of `signals` is noted (the list yielded), not acted on: the few seconds in which an
    interrupted sweep records its running trials as interrupted are not cut short by a second Ctrl-C (which left
    no row while the sweep said it had written one). Main thread only."""
    got: list[int] = []
    with _handled(signals, lambda signum, frame: got.append(signum)):
        yield got
