"""A group of rank processes on this host, one per device: launched by a trial, its ranks' results collected.

A backend whose spec says `process_per_device` runs an N-device step as N processes (ranks). The trial process
launches them itself (no torchrun needed): `run_group(target, kwargs, devices)` starts N children of this module,
each with the environment of the `env://` rendezvous that torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port; see torch.distributed's "Environment variable initialization")
plus VITBENCH_RANK_RESULT, the file its result goes to. Each child calls `target(**kwargs)` and writes what it
returns (JSON) there.

Failure: the first rank that exits non-zero (or is killed) ends the group. The others, which would wait in a
collective for it, are killed with their whole process group, and `RankFailed` names the rank, its exit status
and what failed: the exception a rank raised, in one line (its traceback stays in the rank's stderr, not in the
message), else the rank's last stderr lines (a crash, a signal): the trial's `error` row says which rank died. A
group past `timeout_s` is killed the same way. A rank dies with the trial process (PR_SET_PDEATHSIG), so a killed
trial leaves no rank behind.

Exit code (`RankFailed.exit_code`): 1, a failure of a valid run (a rank killed, crashed or out of time), unless
the rank refused bad input (a VitbenchError of exit code 2, such as a ConfigError), which stays 2.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vitbench.errors import VitbenchError

RESULT_ENV = "VITBENCH_RANK_RESULT"
# Test-only fault injection: the rank with this index exits with status 3 as soon as it starts (tests of the
# rank-death path; a row measured with it cannot exist, the group fails).
DIE_ENV = "VITBENCH_TEST_KILL_RANK"
GROUP_TIMEOUT_S = 1800.0  # a whole group (start-up, compile, warm-up, timed steps) at most this long by default
_POLL_S = 0.05


EXIT_FAILED = 1  # a rank that crashed, was killed or ran past its time: the run failed, its input was not bad
ERROR_SUFFIX = ".error"  # beside a rank's result file: what it raised, as JSON {type, message, exit_code}


class RankFailed(VitbenchError):
    """A rank of a group exited non-zero, was killed, or the group ran past its time (exit code: module docstring).
    """

    exit_code = EXIT_FAILED

    def __init__(self, rank: int | None, message: str, exit_code: int = EXIT_FAILED, code: int | None = None):
        super().__init__(message)
        # code: how the rank ended (its exit status, or minus the signal that killed it; None: no rank ended)
        self.rank, self.exit_code, self.code = rank, exit_code, code


def in_group() -> bool:
    """Is this process a rank of a group that `run_group` launched?"""
    return RESULT_ENV in os.environ


def group_processes() -> list:
    """This rank and its peers (the processes its parent launched with the same rendezvous): what a rank's
    LoadMeter counts as its own, not as other load. Outside a group: this process."""
    import psutil

    me = psutil.Process()
    parent = me.parent() if in_group() else None
    if parent is None:
        return [me]
    key = (os.environ.get("MASTER_PORT"), os.environ.get("WORLD_SIZE"))
    peers = []
    for p in parent.children():
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if p.pid != me.pid and (env.get("MASTER_PORT"), env.get("WORLD_SIZE")) == key and RESULT_ENV in env:
            peers.append(p)
    return [me, *peers]


def rank() -> int:
    """This process's rank (0 outside a group)."""
    return int(os.environ.get("RANK", "0")) if in_group() else 0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the rendezvous port of a group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").rstrip().splitlines()[-lines:])
    except OSError:
        return ""


def _kill(procs: list[subprocess.Popen]) -> None:
    """SIGKILL every live rank and everything it started (each rank leads its own process group)."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
    for p in procs:
        p.wait()


def _describe(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def run_group(target: str, kwargs: dict[str, Any], devices: int, timeout_s: float = GROUP_TIMEOUT_S,
              env: dict[str, str] | None = None) -> list[Any]:
    """Run `target` ("module:function") in `devices` rank processes; return each rank's result, rank order.

    Raises RankFailed naming the first rank that failed (the others killed), or the timeout."""
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    port = free_port()
    payload = json.dumps({"target": target, "kwargs": kwargs})
    with tempfile.TemporaryDirectory(prefix="vitbench-ranks-") as tmp:
        d = Path(tmp)
        procs: list[subprocess.Popen] = []
        try:
            for r in range(devices):
                renv = {**os.environ, **(env or {}), "RANK": str(r), "LOCAL_RANK": str(r),
                        "WORLD_SIZE": str(devices), "LOCAL_WORLD_SIZE": str(devices), "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port), RESULT_ENV: str(d / f"rank{r}.json"), "PYTHONUNBUFFERED": "1"}
                with open(d / f"rank{r}.out", "w") as out, open(d / f"rank{r}.err", "w") as err:
                    procs.append(subprocess.Popen([sys.executable, "-m", "vitbench.measure.ranks", payload],
                                                  stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=renv,
                                                  start_new_session=True))
            t0 = time.monotonic()
            while True:
                codes = [p.poll() for p in procs]
                failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    r, c = min(failed, key=lambda rc: _order(d, rc[0]))
                    _kill(procs)
                    raise _failure(d, r, c, devices)
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() - t0 > timeout_s:
                    _kill(procs)
                    raise RankFailed(None, f"the group of {devices} ranks ran past {timeout_s:.0f} s and was "
                                           "stopped")
                time.sleep(_POLL_S)
        finally:
            _kill(procs)  # a Ctrl-C or an error of the parent: no rank survives it
        results = []
        for r in range(devices):
            path = d / f"rank{r}.json"
            if not path.exists():
                raise RankFailed(r, f"rank {r} of {devices} exited without a result:\n{_tail(d / f'rank{r}.err')}")
            results.append(json.loads(path.read_text()))
        return results


def _failure(d: Path, r: int, code: int, devices: int) -> RankFailed:
    """RankFailed for rank `r`, ended with `code`: what it raised (its error file), else its stderr's tail."""
    head = f"rank {r} of {devices} failed ({_describe(code)}); the other ranks were stopped"
    try:
        err = json.loads((d / f"rank{r}.json{ERROR_SUFFIX}").read_text())
        return RankFailed(r, f"{head}: {err['type']}: {err['message']}", int(err["exit_code"]), code)
    except (OSError, ValueError, KeyError, TypeError):  # no error file: killed, crashed, os._exit
        tail = _tail(d / f"rank{r}.err")
        return RankFailed(r, head + (f":\n{tail}" if tail else ""), code=code)


def _order(d: Path, r: int) -> float:
    """When several ranks have failed by the time they are seen: the one whose stderr was written first (the
    others typically failed because it did: a broken collective)."""
    try:
        return (d / f"rank{r}.err").stat().st_mtime
    except OSError:
        return float("inf")


def _main() -> int:
    from vitbench.procmem import die_with_parent

    die_with_parent()  # a killed trial takes its ranks with it
    req = json.loads(sys.argv[1])
    if os.environ.get(DIE_ENV) == os.environ.get("RANK"):
        print(f"rank {os.environ.get('RANK')}: dying on purpose (${DIE_ENV})", file=sys.stderr, flush=True)
        os._exit(3)
    module, _, name = req["target"].partition(":")
    try:
        result = getattr(importlib.import_module(module), name)(**req["kwargs"])
    except Exception as e:  # noqa: BLE001 - said to the group's launcher in one line, the traceback kept in stderr
        import traceback

        traceback.print_exc()
        code = e.exit_code if isinstance(e, VitbenchError) else EXIT_FAILED
        first = (str(e).strip().splitlines() or [""])[0]
        Path(os.environ[RESULT_ENV] + ERROR_SUFFIX).write_text(json.dumps(
            {"type": type(e).__name__, "message": first[:1000], "exit_code": code}))
        # out now, without the exit hooks: tearing down a process group (NCCL) while a peer still waits in a
        # collective can block, and the launcher stops the peers only once this rank has exited
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
    tmp = Path(os.environ[RESULT_ENV] + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(os.environ[RESULT_ENV])  # whole or absent
    return 0


if __name__ == "__main__":
    sys.exit(_main())
