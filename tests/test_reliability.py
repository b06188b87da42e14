"""Reliability: whatever happens — a kill, a trial that over-allocates, crashes or hangs, two sweeps at once, a
corrupt results file, a booby-trapped checkpoint — nothing measured is lost and nothing is recorded twice.

Extends tests/test_runner.py (one kill moment, local executor; crash/abort/simulated-OOM/hang rows; two local
sweeps at once) to seeded random kill moments, to the distributed executors (whose jobs outlive a killed
driver), to real allocation failures and SIGTERM-proof hangs on every executor, to a local and a slurm sweep
sharing one results directory, and to corrupt lines met by `vitbench report` and a resumed sweep.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import random
import signal
import subprocess
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import psutil
import pytest
import vitbench_hogtasks  # noqa: F401 - registers `hog` in this process
import vitbench_testtasks  # noqa: F401 - registers `sleep`
from cluster_fixtures import ray_session, run_sweep, subprocess_env, sweep_cmd, wait_for, worker_env, write_study  # noqa: F401
from records import record

from vitbench.errors import ConfigError, UnsafeFileError
from vitbench.runner import run_study
from vitbench.store import CorruptLineWarning, Store, read_records
from vitbench.tidy import load
from vitbench.study import parse_study

SLURM_LOCAL = ["--executor", "slurm", "-o", "cluster=local", "-o", "poll_s=0.1", "-o", "max_parallel=2"]


def records_quietly(path: Path) -> tuple[list[dict], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorruptLineWarning)
        recs = read_records(path)
    return recs, [str(w.message) for w in caught if issubclass(w.category, CorruptLineWarning)]


def _claimed_by(res: Path, pid: int) -> bool:
    """The sweep `pid` has claimed a trial (a claim file names its holder: '<host> <pid>')."""
    for f in (res / "claims").glob("*.lock") if (res / "claims").is_dir() else []:
        try:
            if f.read_text().split()[-1:] == [str(pid)]:
                return True
        except OSError:
            pass
    return False


def terminal_keys(recs: list) -> collections.Counter:
    return collections.Counter(r.key for r in recs if r.key and r.status.done)


# ----------------------------------------------------------------------------------------------------------
# kill -9 at random moments, then resume
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(240)
@pytest.mark.parametrize("executor,seed", [("local", 11), ("slurm", 12)])
def test_kill_9_at_random_moments_then_resume_records_every_trial_exactly_once(executor, seed, tmp_path):
    if executor == "slurm":
        pytest.importorskip("submitit")
    rng = random.Random(seed)
    study = write_study(tmp_path / "s.yaml", """
        timeout_s: 60
        defaults: {seconds: 0.4}
        axes:
          model: [ViT-Nano/4, ViT-Micro/4, R-Nano]
          task: [sleep]
          batch_size: [2, 4]
    """)
    keys = {t.key for t in parse_study(study.read_text(), "s.yaml").trials}
    res = tmp_path / "res"
    extra = SLURM_LOCAL if executor == "slurm" else []
    left_behind: list[psutil.Process] = []
    moments, kills = [], 0
    for _ in range(3):
        p = subprocess.Popen(sweep_cmd(study, res, *extra), env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        try:
            wait_for(lambda: _claimed_by(res, p.pid) or p.poll() is not None, what="the sweep's first claim")
            moments.append(rng.uniform(0.0, 2.5))
            time.sleep(moments[-1])
            if p.poll() is not None:  # it finished before this moment
                assert p.returncode == 0, p.stderr.read().decode()[-2000:]
                break
            left_behind += psutil.Process(p.pid).children(recursive=True)
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
            kills += 1
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert kills >= 1, moments  # the sweep really was killed mid-run
    r = run_sweep(study, res, *extra)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    # slurm: jobs outlive their killed driver (as on a cluster); they finish and write their rows themselves
    _, alive = psutil.wait_procs(left_behind, timeout=90)
    assert not alive
    recs, _ = records_quietly(res)  # a kill mid-append may have torn a line: skipped with a warning
    counts = terminal_keys(recs)
    assert set(counts) == keys, (moments, counts)
    assert all(n == 1 for n in counts.values()), (moments, counts)
    assert {r.status.value for r in recs if r.key in keys and r.status.done} == {"ok"}
    df = load(res)
    assert len(df) == len(keys) and set(df["status"]) == {"ok"}


# ----------------------------------------------------------------------------------------------------------
# over-allocation (MemoryError, or the OOM killer's SIGKILL), a segfault and a SIGTERM-proof hang, everywhere
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize("executor", ["local", "slurm", "ray"])
def test_overallocation_segfault_and_hang_become_rows_timeout_honoured_sweep_goes_on(
        executor, tmp_path, request, worker_env):
    # The timeout must outlast every trial that ends on its own, and the hang must outlast the timeout. The local
    # executor runs one trial at a time: 3 s. SLURM's local cluster and Ray run the five at once on two cores:
    # measured 1.2-2.1 s each at load average 3, and over 3 s at a higher load (all five timed out); at 8 s, four
    # of the five timed out on Ray with the full suite running beside two other jobs (load average 5): 16 s; at
    # 16 s, three of the five timed out on Ray in CI's two-worker suite beside a mutation run (2026-12-01): 30 s.
    # There the hang runs alone, in a second sweep (its own results directory) with 10 s: in one sweep it held the
    # test for the 30 s (the two tests' 38 s and 34 s in a profile of the suite). Not 3 s: a trial alone took up
    # to 3 s to start at load 5, and a SIGTERM before the task ignores it ends a hang that never began.
    behaviours = ["alloc", "segv", "killed", "stubborn_hang", "ok"]
    sweeps = [(3.0, behaviours)] if executor == "local" else \
        [(30.0, [b for b in behaviours if b != "stubborn_hang"]), (10.0, ["stubborn_hang"])]
    grace = 1.0
    opts = {"local": {"start_method": "spawn"}, "slurm": {"cluster": "local", "poll_s": 0.2},
            "ray": {"poll_s": 0.2}}[executor]
    if executor == "slurm":
        pytest.importorskip("submitit")
    if executor == "ray":
        request.getfixturevalue("ray_session")
    statuses: collections.Counter = collections.Counter()
    for n, (timeout, run) in enumerate(sweeps):
        s = parse_study(textwrap.dedent(f"""
            name: hog
            calibration: false
            timeout_s: {timeout}
            defaults: {{budget_mib: 64}}
            axes:
              model: [ViT-Nano/4]
              task: [hog]
              behaviour: {json.dumps(run)}
        """), "hog.yaml")
        statuses.update(run_study(s, tmp_path / f"sweep{n}", executor=executor,
                                  executor_options={**opts, "grace_s": grace}).statuses)
    assert statuses == {"oom": 1, "error": 2, "timeout": 1, "ok": 1}, statuses
    df = load(tmp_path).set_index("behaviour")
    assert df.loc["alloc", "status"] == "oom" and df.loc["alloc", "error_type"] == "MemoryError"
    assert df.loc["segv", "error_type"] == "TrialCrashed" and "SIGSEGV" in df.loc["segv", "error_message"]
    assert "behaviour=segv" in df.loc["segv", "error_tail"]  # the dead child's own last words, from its log
    assert "SIGKILL" in df.loc["killed", "error_message"] and "OOM killer" in df.loc["killed", "error_message"]
    # SIGTERM was ignored: the executor waited the grace period, then SIGKILLed; the timeout still held
    wall, timeout = df.loc["stubborn_hang", "runner.wall_s"], sweeps[-1][0]
    assert timeout + grace <= wall < timeout + grace + 6, wall
    assert df.loc["ok", "status"] == "ok" and df.loc["ok", "img_per_s"] > 0
    assert len(read_records(tmp_path)) == 5  # one row each, nowhere twice (the sweeps' folders, read together)


# ----------------------------------------------------------------------------------------------------------
# two sweeps on one results directory at once: a local one and a slurm one
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(240)
def test_a_local_and_a_slurm_sweep_at_once_lose_and_duplicate_nothing(tmp_path):
    pytest.importorskip("submitit")
    study = write_study(tmp_path / "s.yaml", """
        timeout_s: 60
        defaults: {seconds: 0.3}
        axes:
          model: [ViT-Nano/4, ViT-Micro/4, R-Nano, R-Micro]
          task: [sleep]
          batch_size: [2, 4]
    """)
    keys = {t.key for t in parse_study(study.read_text(), "s.yaml").trials}
    res = tmp_path / "res"
    procs = [subprocess.Popen(sweep_cmd(study, res, *extra), env=subprocess_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for extra in ([], SLURM_LOCAL)]
    outs = [p.communicate(timeout=200) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode()[-3000:]
    recs = read_records(res)  # no warning: every line whole although two processes and several jobs wrote
    assert terminal_keys(recs) == collections.Counter({k: 1 for k in keys})
    assert len(recs) == len(keys) and {r.status.value for r in recs} == {"ok"}
    ran = [int(" ".join(out.decode().split()).split("ran ")[1].split()[0]) for out, _ in outs]
    assert sum(ran) == len(keys), ran


# ----------------------------------------------------------------------------------------------------------
# a torn or garbage line in a real sweep's results files
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_corrupt_lines_warn_keep_every_good_row_and_resume_reruns_only_the_lost_trial(tmp_path, cli):
    study = write_study(tmp_path / "s.yaml", """
        axes:
          model: [ViT-Nano/4, R-Nano]
          task: [sleep]
          batch_size: [2, 4]
    """)
    res = tmp_path / "res"
    s = parse_study(study.read_text(), str(study))
    run_study(s, res, executor_options={"start_method": "spawn"})
    main = res / "results.jsonl"
    lines = main.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4
    torn_key = json.loads(lines[3])["key"]
    # garbage between rows 2 and 3 (a foreign write), and the last row cut in half (a kill mid-write)
    main.write_bytes(lines[0] + lines[1] + b"\x00\xff{garbage\n" + lines[2] + lines[3][: len(lines[3]) // 2])
    extra = record("bench", {"model": "ViT-Mini/4", "task": "sleep"}, metrics={"img_per_s": 1.0},
                   key="from-a-worker", study="rel", run_id="w")
    with Store(res, shard="w-node7") as st:
        st.append(extra)
    with open(res / "results.w-node7.jsonl", "ab") as f:
        f.write(b'{"key": "half-writt')  # a worker killed mid-write on another node

    with pytest.warns(CorruptLineWarning) as caught:
        df = load(res)
    msgs = " | ".join(str(w.message) for w in caught)
    assert "results.jsonl:3: skipped unparseable line" in msgs
    assert "results.jsonl:5: skipped torn last line" in msgs and "results.w-node7.jsonl:2" in msgs
    assert len(caught) == 3
    assert sorted(df["key"]) == sorted([json.loads(x)["key"] for x in lines[:3]] + ["from-a-worker"])

    rep = cli("report", res, "--out", tmp_path / "rep", "--format", "csv", "--no-plots")
    assert rep.exit_code == 0, rep.output
    assert "results.jsonl:5:skippedtornlastline" in "".join(rep.output.split())  # (rich wraps lines)

    again = cli("sweep", study, "--results", res, "--start-method", "spawn")
    assert again.exit_code == 0, again.output
    # the resuming sweep reads past the bad lines, saying so once each, without Python's warning format
    said = [ln for ln in again.output.splitlines() if "skipped" in ln]
    assert len(said) == 2 and all(ln.startswith("warning: ") for ln in said), again.output
    assert "results.jsonl:3: skipped unparseable line" in said[0] and "results.jsonl:5: skipped" in said[1]
    assert "CorruptLineWarning" not in again.output
    assert "ran 1 trial" in " ".join(again.output.split())  # only the trial whose row was torn
    recs, warned = records_quietly(res)
    assert len(warned) == 3  # the same three bad lines, and no new one: the resumed writer ended the torn line
    counts = terminal_keys(recs)
    assert counts[torn_key] == 1 and set(counts) == {t.key for t in s.trials} | {"from-a-worker"}
    assert all(n == 1 for n in counts.values())


# ----------------------------------------------------------------------------------------------------------
# a checkpoint carrying a pickle payload is refused without running it
# ----------------------------------------------------------------------------------------------------------
class _Payload:
    """Pickles to `os.mkdir(marker)`: loading it with pickle would create the marker directory."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_the_payload_is_live_so_the_refusal_tests_mean_something(tmp_path):
    marker = tmp_path / "pwned-by-pickle"
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.is_dir()


@pytest.mark.parametrize("form", ["torch.pt", "torch-as.safetensors", "raw-pickle.ckpt", "raw-pickle.safetensors"])
def test_a_checkpoint_with_a_pickle_payload_is_refused_without_running_it(form, tmp_path):
    from vitbench.transfer.checkpoint import load_checkpoint

    marker = tmp_path / "pwned"
    path = tmp_path / f"evil.{form.split('.', 1)[1]}"
    if form.startswith("torch"):
        import torch

        torch.save({"state_dict": {"w": torch.zeros(2)}, "extra": _Payload(marker)}, path)
    else:
        path.write_bytes(pickle.dumps({"weights": _Payload(marker)}))
    with pytest.raises((UnsafeFileError, ConfigError)) as e:
        load_checkpoint(path)
    assert str(path) in str(e.value)
    if path.suffix != ".safetensors":
        assert e.type is UnsafeFileError and "pickle" in str(e.value)
    assert not marker.exists()


def test_an_npz_checkpoint_with_pickled_objects_is_refused_without_running_them(tmp_path):
    from vitbench.models.npz import load_npz

    marker = tmp_path / "pwned"
    obj = np.empty(1, dtype=object)
    obj[0] = _Payload(marker)
    path = tmp_path / "ViT-B_16.npz"
    np.savez(path, **{"Transformer/encoder_norm/scale": np.ones(4, np.float32), "trap": obj})
    with pytest.raises(UnsafeFileError, match="pickled objects"):
        load_npz(path)
    assert not marker.exists()


def test_an_npz_member_with_a_torn_header_is_unreadable_not_pickled(tmp_path):
    """A member whose .npy header is garbage was reported as "holds pickled objects": it is a file that cannot be
    read (found by a hostile-input review); an object array is still the pickle refusal above."""
    import zipfile

    from vitbench.models.npz import load_npz

    path = tmp_path / "torn.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a.npy", b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(ConfigError, match="is not a readable .npz file") as e:
        load_npz(path)
    assert "pickled" not in str(e.value) and not isinstance(e.value, UnsafeFileError)


def test_cli_refuses_a_pickle_checkpoint_exit_2_no_traceback(tmp_path, cli):
    marker = tmp_path / "pwned"
    path = tmp_path / "upstream.pt"
    path.write_bytes(pickle.dumps(_Payload(marker)))
    r = cli("fewshot", "--checkpoint", path, "--shots", "1", "--seeds", "1")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "pickle" in r.output and "upstream.pt" in r.output
    assert not marker.exists()
