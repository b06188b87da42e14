"""A study's trials: `Trial` (one measurement: its normalised config, repeat and key), `Study` (a validated study
and its ordered trials) and `trial_key` (the store's identity of a trial). Re-exported by vitbench.study."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from vitbench.record import METHOD_VERSION
from vitbench.study.schema import ExecutorSpec


@dataclass(frozen=True)
class Trial:
    """One measurement to run: its normalised config, repeat index and key (the store's identity)."""

    key: str
    config: dict
    repeat: int = 0
    origin: str = "axes"  # where the combination came from: 'axes', 'include[i]', or a run's 'calibration'

    @property
    def task(self) -> str:
        return self.config["task"]

    def label(self) -> str:
        c = self.config
        parts = [c.get("model", ""), c.get("backend", ""), c["task"]]
        if c.get("resolution"):
            parts.append(f"{c['resolution']}px")
        if "batch_size" in c:
            parts.append(f"b{c['batch_size']}")
        if "precision" in c and c["precision"] != "fp32":
            parts.append(c["precision"])
        if c.get("compile"):
            parts.append("compiled")
        if self.repeat:
            parts.append(f"rep{self.repeat}")
        return " ".join(str(p) for p in parts if p != "")


@dataclass
class Study:
    """A validated study: its source and the ordered trials (repeat index outermost: A B A B)."""

    name: str
    description: str
    path: Path | None
    text: str
    sha: str
    repeats: int
    timeout_s: float
    calibration: bool
    executor: ExecutorSpec
    trials: list[Trial]
    combinations: int = 0  # grid + include combinations before de-duplication (per repeat)
    missing_paths: str = ""  # the problems of paths that do not exist, when parsed with check_paths=False

    @property
    def unique_trials(self) -> int:
        return sum(1 for t in self.trials if t.repeat == 0)


def trial_key(config: dict, repeat: int = 0, task_version: int = 1) -> str:
    """Stable 16-hex-digit id: SHA-256 of canonical JSON of the normalised config + method versions + repeat."""
    canon = json.dumps({"config": config, "method_version": METHOD_VERSION, "task_version": task_version,
                        "repeat": repeat}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]
