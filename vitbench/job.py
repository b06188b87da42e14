"""A job: one trial (or a run's calibration) to run, plain data that an executor hands to a worker and the worker
to `vitbench.trial.run_trial`. Below both: the executors (vitbench.executors, which re-exports it) make jobs and
trial.py runs them, so neither reaches the other's layer for the type."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    TRIAL = "trial"
    CALIBRATION = "calibration"  # a per-run measurement of the device: never skipped as done, no trial key


@dataclass(frozen=True)
class Job:
    """One trial (or a run's calibration) to run; plain data, picklable to any worker."""

    key: str
    config: dict
    repeat: int
    study: str
    study_sha: str
    run_id: str
    timeout_s: float
    task_module: str  # the module that registered the task (imported by the worker if it is a plug-in)
    role: Role = Role.TRIAL

    @property
    def task(self) -> str:
        return self.config["task"]

    @property
    def row_key(self) -> str | None:
        """The key its row carries: the trial's, or none for a calibration (a per-run row, never 'done')."""
        return None if self.role is Role.CALIBRATION else self.key

    def label(self) -> str:
        c = self.config
        return " ".join(str(x) for x in (c.get("model", ""), c.get("backend", ""), c["task"], self.key) if x)
