"""Executors behind one interface: slurm (submitit's local cluster here) and ray (a local Ray instance).

Checks the contract (vitbench.executors): one record per trial reaches the store exactly once (written by the
worker into its host's shard, or by the driver when the worker cannot see the store), resume skips what is done,
a job that dies without a record becomes a row, Ctrl-C cancels what runs and records it as interrupted, and the
worker's duplicate guard (a trial another job is running or has just stored is not measured twice).
Trials use the test-only `sleep` task (tests/vitbench_testtasks.py), so each takes a fraction of a second.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import json
import os
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import vitbench_testtasks  # noqa: F401 - registers `sleep` here (the study is validated in this process)
from cluster_fixtures import ray_session, worker_env  # noqa: F401 - fixtures
from records import record

from vitbench.errors import BackendUnavailable, ConfigError
from vitbench.executors import Job, Stored, get_executor
from vitbench.executors.remote import host_shard, run_on_worker, since_now
from vitbench.record import now
from vitbench.runner import SweepHooks, run_study
from vitbench.store import Store, read_records
from vitbench.tidy import load
from vitbench.study import parse_study

pytestmark = pytest.mark.cluster
SLURM_LOCAL = {"cluster": "local", "poll_s": 0.2}


def study(body: str, name: str = "exe"):
    return parse_study(f"name: {name}\ncalibration: false\n" + textwrap.dedent(body), f"{name}.yaml")


def keys_in(path: Path) -> list[str]:
    return [r.key for r in read_records(path) if r.key]


# ----------------------------------------------------------------------------------------------------------
# Options: validated before anything runs, without importing submitit or ray
# ----------------------------------------------------------------------------------------------------------
def test_options_are_validated_and_name_the_allowed_ones():
    from vitbench.executors.local import LocalExecutor
    from vitbench.executors.ray import RayExecutor
    from vitbench.executors.slurm import SlurmExecutor

    with pytest.raises(ConfigError, match=r"partition.*valid string.*allowed options: .*time_limit_min"):
        SlurmExecutor.check_options({"partition": 3})
    with pytest.raises(ConfigError, match=r"gpus.*greater than or equal to 0"):
        SlurmExecutor.check_options({"gpus": -1})
    with pytest.raises(ConfigError, match=r"num_gpu\b.*Extra inputs are not permitted.*num_gpus"):
        RayExecutor.check_options({"num_gpu": 1})
    with pytest.raises(ConfigError, match=r"bogus.*allowed options: start_method"):
        LocalExecutor.check_options({"bogus": 1})
    SlurmExecutor.check_options({"partition": "gpu", "gpus": 1, "time_limit_min": 30, "setup": ["module load x"]})
    with pytest.raises(ConfigError, match="unknown executor 'kube'; allowed: local, slurm, ray"):
        get_executor("kube")


def test_a_preload_that_would_preload_nothing_is_refused():
    """The fork server skips a preload module it cannot import in silence, and spawn preloads nothing: both
    were accepted, and `-o preload=[nmupy]` ran every trial without what it named."""
    from vitbench.executors.local import LocalExecutor

    with pytest.raises(ConfigError, match=r"preload: .*'nmupy' cannot be imported here"):
        LocalExecutor.check_options({"preload": ["json", "nmupy"]})
    with pytest.raises(ConfigError, match=r"with start_method spawn .* nothing is preloaded"):
        LocalExecutor.check_options({"preload": ["json"], "start_method": "spawn"})
    LocalExecutor.check_options({"preload": ["json", "os.path"]})
    LocalExecutor.check_options({"preload": [], "start_method": "spawn"})


def test_infinite_or_nan_executor_options_are_refused_at_parse_time(tmp_path, cli):

    """inf passed every PositiveFloat (time_limit_min=inf, poll_s=inf: a wait that never ends, a job limit submitit
    cannot write) and a custom Ray resource took NaN or a negative amount; `--dry-run` said nothing of it."""
    from vitbench.executors.local import LocalExecutor
    from vitbench.executors.ray import RayExecutor
    from vitbench.executors.slurm import SlurmExecutor

    for ex, opts in ((SlurmExecutor, {"time_limit_min": float("inf")}), (SlurmExecutor, {"poll_s": "inf"}),
                     (RayExecutor, {"head_lost_s": float("inf")}), (RayExecutor, {"num_gpus": "inf"}),
                     (LocalExecutor, {"grace_s": float("nan")})):
        with pytest.raises(ConfigError, match=f"{next(iter(opts))}: Input should be a finite number"):
            ex.check_options(opts)
    with pytest.raises(ConfigError, match=r"resources.TPU: Input should be a finite number"):
        RayExecutor.check_options({"resources": {"TPU": float("nan")}})
    with pytest.raises(ConfigError, match=r"resources.TPU: Input should be greater than or equal to 0"):
        RayExecutor.check_options({"resources": {"TPU": -1}})
    s = tmp_path / "s.yaml"
    s.write_text("name: x\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [sleep]}\n")
    r = cli("sweep", s, "--dry-run", "--results", tmp_path / "res", "--executor", "slurm", "-o", "vanish_s=1e400")
    assert r.exit_code == 2 and "vanish_s: Input should be a finite number" in r.output, r.output


@pytest.mark.skipif(bool(__import__("shutil").which("sbatch")), reason="a real SLURM is here")
def test_slurm_without_sbatch_is_a_clear_error_and_writes_nothing(tmp_path, cli):
    pytest.importorskip("submitit")
    s = tmp_path / "s.yaml"
    s.write_text("name: x\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [sleep]}\n")
    r = cli("sweep", s, "--results", tmp_path / "res", "--executor", "slurm")
    assert r.exit_code == 2 and "no `sbatch`" in r.output and "cluster=local" in r.output, r.output
    assert not (tmp_path / "res").exists()
    with pytest.raises(BackendUnavailable):
        run_study(study("axes: {model: [ViT-Nano/4], task: [sleep]}\n"), tmp_path / "res2", executor="slurm")
    assert not (tmp_path / "res2").exists()


def _fake_sbatch(tmp_path: Path, monkeypatch, script: str, srun: bool = True) -> None:
    """An `sbatch` first on PATH (a login node where SLURM is installed but refuses, whatever this machine has),
    and an `srun` beside it (a login node has both: submitit refuses to start without srun)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "sbatch").write_text("#!/bin/sh\n" + textwrap.dedent(script))
    (bin_dir / "sbatch").chmod(0o755)
    if srun:
        (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.mark.skipif(bool(__import__("shutil").which("srun")), reason="a real SLURM is here")
def test_slurm_with_sbatch_but_no_srun_is_a_clear_error_and_writes_nothing(tmp_path, cli, monkeypatch):
    """submitit launches each job with srun and refuses to start without it: a machine with sbatch alone got its
    RuntimeError, exit 1 (a fresh machine without SLURM's client tools, where this suite's fake sbatch stood
    alone). It is said like a missing sbatch: exit 2, nothing written."""
    pytest.importorskip("submitit")
    s = tmp_path / "s.yaml"
    s.write_text("name: x\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [flops]}\n")
    _fake_sbatch(tmp_path, monkeypatch, "exit 0\n", srun=False)
    r = cli("sweep", s, "--results", tmp_path / "res", "--executor", "slurm")
    assert r.exit_code == 2 and "no `srun`" in r.output and "cluster=local" in r.output, r.output
    assert not (tmp_path / "res").exists()


def _not_locked(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: fails while the sweep still holds it
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _one_slurm_error(cli, study, res):
    """A sweep of `study` on SLURM that must end in one `error:` line, exit 2, no traceback: (result, the line)."""
    r = cli("sweep", study, "--results", res, "--executor", "slurm", "-o", "partition=gpu")
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output, r.output
    return r, errors[0]


@pytest.mark.timeout(60)
def test_slurm_with_an_sbatch_that_fails_is_a_clear_error_and_leaves_no_claims_or_job_files(tmp_path, cli,
                                                                                            monkeypatch):
    """sbatch installed but SLURM not configured here: one `error:` line naming sbatch, its exit status, its
    message and the way out; exit 2, no traceback, no trial claimed and no job pickled. An sbatch that answers
    but refuses the submission itself (a bad partition) says so the same way, its message clipped, and leaves no
    job files and no claim held."""
    pytest.importorskip("submitit")
    s = tmp_path / "s.yaml"
    s.write_text("name: x\ncalibration: false\naxes: {model: [ViT-Nano/4, ViT-Micro/4], task: [flops]}\n")
    _fake_sbatch(tmp_path, monkeypatch, """\
        echo "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2
        echo "sbatch: fatal: Could not establish a configuration source" >&2
        exit 1
        """)
    res = tmp_path / "res"
    r, error = _one_slurm_error(cli, s, res)
    for part in ("executor 'slurm'", "sbatch", "exit status 1", "Could not establish a configuration source",
                 "sinfo", "local"):
        assert part in error, (part, r.output)
    assert not list(res.glob("claims/*.lock")) and not list(res.glob("slurm/*.pkl")), list(res.rglob("*"))

    # `sbatch --version` answers; the submission is refused, with a 50 KB line among its stderr
    _fake_sbatch(tmp_path / "2", monkeypatch, f"""\
        [ "$1" = --version ] && {{ echo "slurm 23.02.7"; exit 0; }}
        echo "sbatch: error: invalid partition specified: gpu" >&2
        echo "sbatch: error: {'x' * 50_000}" >&2
        echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
        exit 1
        """)
    res = tmp_path / "res2"
    r, error = _one_slurm_error(cli, s, res)
    assert "exit status 1" in error and "invalid partition specified: gpu" in error, r.output
    assert len(r.output) < 3000 and r.output.count("invalid partition") == 1, r.output  # clipped, said once
    assert not list(res.glob("slurm/*.pkl")) and not list(res.glob("slurm/.submission_file_*")), \
        list(res.rglob("*"))
    locks = list(res.glob("claims/*.lock"))
    assert locks and all(_not_locked(p) for p in locks)  # released: a later sweep can take them


# ----------------------------------------------------------------------------------------------------------
# slurm via submitit's local cluster
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_slurm_each_trial_is_a_job_and_its_row_lands_once_in_the_host_shard(tmp_path, cli, worker_env):
    pytest.importorskip("submitit")
    s = tmp_path / "s.yaml"
    s.write_text("name: sl\ncalibration: false\ntimeout_s: 60\n"
                 "axes: {model: [ViT-Nano/4, R-Nano, ViT-Micro/4], task: [sleep]}\n")
    res = tmp_path / "res"
    r = cli("sweep", s, "--results", res, "--executor", "slurm", "-o", "cluster=local", "-o", "poll_s=0.2",
            "-o", "max_parallel=2")
    assert r.exit_code == 0, r.output
    assert "ran 3 trial" in " ".join(r.output.split())
    shard = res / f"results.{host_shard()}.jsonl"
    assert shard.exists() and not (res / "results.jsonl").exists()  # the workers wrote; the driver did not
    df = load(res)
    assert len(df) == 3 and set(df["status"]) == {"ok"} and len(keys_in(res)) == 3
    assert set(df["runner.executor"]) == {"slurm"} and df["runner.job_id"].nunique() == 3
    # each trial ran in its own child of its own job process
    assert df["pid"].nunique() == 3 and not set(df["pid"]) & set(df["runner.worker_pid"])
    assert not list((res / "slurm").glob("*_result.pkl"))  # job files of successful trials are cleaned up
    again = cli("sweep", s, "--results", res, "--executor", "slurm", "-o", "cluster=local")
    assert again.exit_code == 0 and "ran 0 trial" in " ".join(again.output.split())
    assert len(keys_in(res)) == 3


@pytest.mark.timeout(120)
def test_slurm_time_limit_kills_the_job_and_leaves_a_timeout_row(tmp_path, worker_env):
    pytest.importorskip("submitit")
    # the per-trial timeout (60 s) is not reached: SLURM's limit (15 s here) is the backstop that fires. 3 s
    # killed the `ok` job too at load ~9 (its python and imports alone took longer on 2 busy cores).
    s = study("timeout_s: 60\naxes: {model: [ViT-Nano/4], task: [sleep], behaviour: [hang, ok]}\n")
    summary = run_study(s, tmp_path, executor="slurm",
                        executor_options={**SLURM_LOCAL, "time_limit_min": 0.25})
    assert summary.statuses == {"timeout": 1, "ok": 1}
    df = load(tmp_path).set_index("behaviour")
    assert df.loc["hang", "error_type"].startswith("SlurmJob") and "time limit" in df.loc["hang", "error_message"]
    assert df.loc["ok", "status"] == "ok"
    assert list((tmp_path / "slurm").glob("*_log.err"))  # the failed job's logs are kept


# ----------------------------------------------------------------------------------------------------------
# ray
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_ray_each_trial_is_a_task_in_a_fresh_child(tmp_path, cli, ray_session):
    s = tmp_path / "s.yaml"
    s.write_text("name: ry\ncalibration: false\ntimeout_s: 60\n"
                 "executor: {name: ray, options: {num_cpus: 1, poll_s: 0.2}}\n"
                 "axes: {model: [ViT-Nano/4, R-Nano, ViT-Micro/4], task: [sleep]}\n")
    res = tmp_path / "res"
    r = cli("sweep", s, "--results", res)  # the executor comes from the study
    assert r.exit_code == 0, r.output
    assert (res / f"results.{host_shard()}.jsonl").exists() and not (res / "results.jsonl").exists()
    df = load(res)
    assert len(df) == 3 and set(df["status"]) == {"ok"} and set(df["runner.executor"]) == {"ray"}
    # Ray reuses worker processes, the trial never runs in one: a fresh child each time
    assert df["pid"].nunique() == 3 and not set(df["pid"]) & set(df["runner.worker_pid"])
    assert ray_session.is_initialized()  # a session the caller opened is left open
    again = cli("sweep", s, "--results", res)
    assert again.exit_code == 0 and "ran 0 trial" in " ".join(again.output.split())


@pytest.mark.timeout(120)
def test_ray_without_a_visible_store_the_driver_writes_the_rows(tmp_path, ray_session):
    from vitbench.executors.ray import RayExecutor

    s = study("axes: {model: [ViT-Nano/4, R-Nano], task: [sleep], behaviour: [ok, crash]}\n")
    ex = RayExecutor(poll_s=0.2)  # no results_dir: as on a cluster without a shared file system
    summary = run_study(s, tmp_path, executor=ex)
    assert summary.statuses == {"ok": 2, "error": 2}
    assert not list(tmp_path.glob("results.w-*.jsonl"))
    assert sorted(keys_in(tmp_path)) == sorted(t.key for t in s.trials)  # each once, in results.jsonl
    df = load(tmp_path).set_index("behaviour")
    assert (df.loc["crash", "error_type"] == "RuntimeError").all()


# ----------------------------------------------------------------------------------------------------------
# Ctrl-C: what runs is cancelled and recorded as interrupted; the next sweep runs it
# ----------------------------------------------------------------------------------------------------------
class _InterruptOnSecondStart(SweepHooks):
    def __init__(self):
        self.n = 0

    def started(self, trial, job):
        self.n += 1
        if self.n == 2:
            raise KeyboardInterrupt


@pytest.mark.timeout(180)
@pytest.mark.parametrize("executor", ["slurm", "ray"])
def test_ctrl_c_cancels_running_trials_records_them_interrupted_and_resume_runs_them(
        executor, tmp_path, request, worker_env):
    opts = {**(SLURM_LOCAL if executor == "slurm" else {"poll_s": 0.2}), "max_parallel": 2}
    if executor == "slurm":
        pytest.importorskip("submitit")
    else:
        request.getfixturevalue("ray_session")
    gate = tmp_path / "gate"  # the trials run until this file exists: surely running when cancelled
    s = study(f"timeout_s: 60\ndefaults: {{seconds: 0.1, behaviour: gate, gate: {str(gate)!r}}}\n"
              "axes: {model: [ViT-Nano/4, R-Nano, R-Micro], task: [sleep]}\n")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(KeyboardInterrupt):
        run_study(s, tmp_path, executor=executor, hooks=_InterruptOnSecondStart(), executor_options=opts)
    rows = read_records(tmp_path)
    assert [r.status for r in rows] == ["interrupted", "interrupted"]  # both submitted jobs, nothing else
    if executor == "slurm":  # the cancelled jobs' processes are gone (nothing keeps measuring)
        new = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        _, alive = psutil.wait_procs(new, timeout=20)
        assert not alive, [p.cmdline() for p in alive]
    gate.touch()
    resumed = run_study(s, tmp_path, executor=executor, executor_options=opts)
    # (a resumed trial once came back 'skipped' under three test workers on two cores: the rows say why)
    assert resumed.statuses == {"ok": 3}, [(r.status.value, r.error and r.error.message, r.runner)
                                           for r in read_records(tmp_path)]
    df = load(tmp_path)
    assert len(df) == 3 and set(df["status"]) == {"ok"}
    ok_keys = [r.key for r in read_records(tmp_path) if r.status == "ok"]
    assert sorted(ok_keys) == sorted(t.key for t in s.trials)  # each trial measured exactly once


def test_ctrl_c_just_as_a_trial_finished_keeps_its_record(tmp_path):
    """The executor's contract: a cancelled trial's outcome is its row if it wrote one just before. The local
    executor discarded a record already whole in its place and stored 'interrupted' (the trial ran again)."""
    from vitbench.executors.local import LocalExecutor

    job = _job(_store_with_study(tmp_path / "res"))
    ex = LocalExecutor(tmp_path / "res", start_method="spawn")
    try:
        h = ex.submit_one(job)
        h.proc.join(60)  # finished: its record is whole, the sweep has not collected it yet
        assert h.result.exists()
        (out,) = ex.cancel([(job, h)])  # Ctrl-C now
    finally:
        ex.close()
    assert out.record.status.value == "ok" and out.record.key == job.key, out.record.error


# ----------------------------------------------------------------------------------------------------------
# The worker's duplicate guard and the shards (vitbench.executors.remote), without a cluster
# ----------------------------------------------------------------------------------------------------------
def _store_with_study(root: Path, text: str = "name: g\n") -> str:
    root.mkdir(parents=True, exist_ok=True)
    Store(root).save_study(text)
    return hashlib.sha256(text.encode()).hexdigest()


def _job(sha: str, key: str = "k1", run_id: str = "run-new", **cfg) -> Job:
    config = {"model": "ViT-Nano/4", "backend": "torch", "task": "sleep", "device": "cpu", "resolution": 32,
              "batch_size": 2, "seed": 0, "seconds": 0.01, "behaviour": "ok", **cfg}
    return Job(key=key, config=config, repeat=0, study="g", study_sha=sha, run_id=run_id, timeout_s=60,
               task_module="vitbench_testtasks")


def _row(key: str, run_id: str, stored_at: str):
    return record("bench", {"model": "ViT-Nano/4"}, metrics={"img_per_s": 1.0}, key=key, run_id=run_id, study="g",
                  runner={"stored_at": stored_at})


def test_worker_skips_a_trial_another_job_is_running(tmp_path):
    sha = _store_with_study(tmp_path)
    (tmp_path / "claims").mkdir()
    fd = os.open(tmp_path / "claims" / "k1.worker.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # an orphaned job of a killed sweep is measuring k1
    t0 = time.monotonic()
    try:
        out = run_on_worker(_job(sha), str(tmp_path), since=since_now(), lock_wait_s=0.6)
    finally:
        os.close(fd)
    assert time.monotonic() - t0 >= 0.6  # it gave the holder time to finish (or die) first
    assert out.record.status == "skipped" and out.stored is Stored.ELSEWHERE
    assert "another job is running" in out.record.error.message
    assert read_records(tmp_path) == []  # nothing measured, nothing written


def test_the_worker_lock_is_never_taken_through_a_link(tmp_path):
    """A link in claims/ made after the driver's check (a requeued job runs long after it) had its target
    truncated by the worker's lock (found by a review): refused naming it, the target untouched."""
    from vitbench.executors.remote import _lock
    from vitbench.paths import PathError

    precious = tmp_path / "precious.txt"
    precious.write_text("the user's notes\n")
    (tmp_path / "store" / "claims").mkdir(parents=True)
    (tmp_path / "store" / "claims" / "k1.worker.lock").symlink_to(precious)
    with pytest.raises(PathError, match="worker lock"):
        _lock(tmp_path / "store", "k1", 0.1)
    assert precious.read_text() == "the user's notes\n"


def test_worker_waits_for_a_dying_holder_then_measures(tmp_path):
    import threading

    sha = _store_with_study(tmp_path)
    (tmp_path / "claims").mkdir()
    fd = os.open(tmp_path / "claims" / "k1.worker.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a cancelled job of an interrupted sweep, about to die without a row
    threading.Timer(0.5, os.close, args=(fd,)).start()
    out = run_on_worker(_job(sha), str(tmp_path), since=since_now(), lock_wait_s=20)
    assert out.record.status == "ok" and [r.key for r in read_records(tmp_path)] == ["k1"]


def test_worker_skips_a_trial_another_sweep_stored_after_the_draw_but_not_an_older_row(tmp_path):
    sha = _store_with_study(tmp_path)
    with Store(tmp_path, shard="w-elsewhere") as st:
        st.append(_row("k1", "run-orphan", now()))  # an orphan finished k1 while our job sat in the queue
        st.append(_row("k2", "run-old", "2000-01-01T00:00:00.000+00:00"))  # an old row (a --force re-run)
    since = since_now()
    dup = run_on_worker(_job(sha, "k1"), str(tmp_path), since=since)
    assert dup.record.status == "skipped" and "run-orphan" in dup.record.error.message
    fresh = run_on_worker(_job(sha, "k2"), str(tmp_path), since=since)
    assert fresh.record.status == "ok" and fresh.stored is Stored.WORKER
    mine = [r for r in read_records(tmp_path) if r.run_id == "run-new"]
    assert [r.key for r in mine] == ["k2"] and mine[0].runner["stored_at"] >= since
    assert mine[0].source == str((tmp_path).resolve()) and (tmp_path / f"results.{host_shard()}.jsonl").exists()


def test_worker_that_cannot_see_the_store_returns_the_row_for_the_driver(tmp_path):
    sha = _store_with_study(tmp_path, "name: g\n")
    job = _job("0" * 64)  # a different study file: not this study's store (no shared file system)
    out = run_on_worker(job, str(tmp_path), since=since_now())
    assert out.record.status == "ok" and out.stored is Stored.DRIVER and read_records(tmp_path) == []
    assert sha != job.study_sha


def test_latest_row_across_shards_is_the_last_finished(tmp_path):
    def r(status, finished_at, shard):
        with Store(tmp_path, shard=shard) as st:
            st.append(record("bench", {"model": "m"}, status=status, key="k", finished_at=finished_at,
                             metrics={"img_per_s": 1.0} if status == "ok" else {}))  # an ok row has its measure

    r("ok", "2026-01-02T00:00:00.000+00:00", None)  # results.jsonl, newest
    r("error", "2026-01-01T00:00:00.000+00:00", "w-a")  # an older shard row, later in file order
    assert load(tmp_path)["status"].tolist() == ["ok"]
    r("timeout", "2026-01-03T00:00:00.000+00:00", "w-b")
    assert load(tmp_path)["status"].tolist() == ["timeout"]
    assert collections.Counter(keys_in(tmp_path)) == {"k": 3}
    assert json.loads((tmp_path / "results.w-a.jsonl").read_text())["status"] == "error"


@pytest.mark.timeout(300)
def test_a_real_tiny_trial_and_the_calibration_run_as_slurm_jobs(tmp_path):
    pytest.importorskip("submitit")
    s = parse_study(textwrap.dedent("""
        name: real
        timeout_s: 240
        defaults: {batch_size: 4, warmup_steps: 1, min_steps: 3, min_seconds: 0.05, max_seconds: 2}
        axes:
          model: [ViT-Nano/4]
          task: [infer]
    """), "real.yaml")
    summary = run_study(s, tmp_path, executor="slurm", executor_options=SLURM_LOCAL)
    assert summary.statuses == {"ok": 1} and summary.calibrations == 1
    df = load(tmp_path).set_index("task")
    assert df.loc["infer", "img_per_s"] > 0 and len(df.loc["infer", "raw"]["step_s"]) >= 3
    assert df.loc["infer", "runner.executor"] == "slurm" and df.loc["infer", "status"] == "ok"
    cal = load(tmp_path, kinds=("calibration",))  # written by the driver, as a per-run row without a key
    assert len(cal) == 1 and cal.loc[0, "matmul_tflops_per_s"] > 0 and cal.loc[0, "key"] is None
    assert cal.loc[0, "run_id"] == df.loc["infer", "run_id"]


def test_slurm_options_reach_the_sbatch_script(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    import shutil

    from vitbench.executors.slurm import SlurmExecutor

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")  # as on a login node
    ex = SlurmExecutor(tmp_path, partition="gpu", account="proj", qos="high", cpus_per_task=8, mem_gb=64,
                       exclusive=True, additional={"gres": "gpu:a100:1"}, setup=["module load cuda/12.4"],
                       max_parallel=4)
    job = Job(key="k", config={"device": "cuda", "task": "infer"}, repeat=0, study="s", study_sha="x", run_id="r",
              timeout_s=1500, task_module="vitbench.tasks.bench")
    sub = ex._executor(tmp_path / "slurm", ex._exclusive(job))
    sub.update_parameters(**ex._job_params(1, ex._time_limit_min(job)))
    text = sub._executor._make_submission_file_text("python -m x", "uid")
    for line in ("--partition=gpu", "--account=proj", "--qos=high", "--cpus-per-task=8", "--mem=64GB",
                 "--exclusive", "--gres=gpu:a100:1", "--gpus-per-node=1", "--time=30", "module load cuda/12.4"):
        assert line in text, (line, text)
    # default time limit: the trial timeout (25 min) + 5 min margin; a flops trial on a cuda study gets no GPU
    assert ex._time_limit_min(job) == 30
    from vitbench.executors.slurm import _gpus

    flops_job = Job(key="k", config={"task": "flops"}, repeat=0, study="s", study_sha="x", run_id="r",
                    timeout_s=60, task_module="vitbench.tasks.flops")
    assert _gpus(None, job) == 1 and _gpus(None, flops_job) == 0 and _gpus(2, job) == 2


@pytest.mark.parametrize("device,gpu", [("cuda", True), ("cuda:1", True), ("gpu", True), ("gpu:3", True),
                                        ("cpu", False), ("tpu", False), ("tpu:0", False)])
def test_a_gpu_is_asked_for_in_every_backends_spelling(device, gpu):
    # the backends' own device names (BackendSpec.device_names) decide, not a list of prefixes in the executor:
    # JAX's "gpu" and torch's "cuda:N" alike; a TPU is no GPU
    from vitbench.executors import wants_gpu
    from vitbench.executors.ray import _gpus as ray_gpus
    from vitbench.executors.slurm import _gpus as slurm_gpus

    job = Job(key="k", config={"task": "infer", "device": device}, repeat=0, study="s", study_sha="x", run_id="r",
              timeout_s=60, task_module="vitbench.tasks.bench")
    assert wants_gpu(job) is gpu
    # a scheduler numbers the GPUs it gives from 0: cuda:1 needs two of them (gpu:3, four)
    want = int(device.partition(":")[2] or 0) + 1 if gpu else 0
    assert slurm_gpus(None, job) == want and ray_gpus(None, job) == float(want)


@pytest.mark.parametrize("devices", [1, 2, 4])
def test_a_trial_over_several_gpus_asks_the_scheduler_for_each(devices):
    """A `devices: 4` GPU trial asked SLURM and Ray for 1 GPU, so its 4 ranks (or JAX's mesh) could not start:
    it asks for its devices; a told count (-o gpus / num_gpus) still wins."""
    from vitbench.executors.ray import _gpus as ray_gpus
    from vitbench.executors.slurm import _gpus as slurm_gpus

    job = Job(key="k", config={"task": "infer", "device": "cuda", "devices": devices}, repeat=0, study="s",
              study_sha="x", run_id="r", timeout_s=60, task_module="vitbench.tasks.bench")
    assert slurm_gpus(None, job) == devices and ray_gpus(None, job) == float(devices)
    assert slurm_gpus(1, job) == 1 and ray_gpus(0.5, job) == 0.5
