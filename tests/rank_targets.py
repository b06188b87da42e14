"""Targets of test rank groups (vitbench.measure.ranks.run_group): tests put tests/ on the ranks' PYTHONPATH."""

from __future__ import annotations

import os
import time


def sleep(seconds: float) -> dict:
    """A rank that outlives the group's timeout (the timeout path)."""
    time.sleep(seconds)
    return {}


def whoami() -> dict:
    """Each rank's view of the rendezvous environment."""
    return {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}


def fail_on_rank_1() -> dict:
    """Rank 1 raises; rank 0 waits (as a rank blocked in a collective would)."""
    if os.environ["RANK"] == "1":
        raise RuntimeError("rank 1 broke on purpose")
    time.sleep(60)
    return {}
