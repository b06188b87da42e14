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


def hold(mib: int, seconds: float, pid_dir: str | None = None) -> dict:
    """A rank that touches `mib` MiB (zero-filled: resident) and holds it for `seconds` (a rank of a model too
    large for the host, as the memory budget sees it); its pid written to `pid_dir` first."""
    if pid_dir:
        with open(os.path.join(pid_dir, f"rank{os.environ['RANK']}.pid"), "w") as f:
            f.write(str(os.getpid()))
    held = bytearray(mib << 20)
    time.sleep(seconds)
    return {"held": len(held)}


def refuse() -> dict:
    """Rank 1 refuses its input (a ConfigError, exit code 2); rank 0 waits (as in a collective)."""
    from vitbench.errors import ConfigError

    if os.environ["RANK"] == "1":
        raise ConfigError("field 'x': refused on purpose")
    time.sleep(60)
    return {}
