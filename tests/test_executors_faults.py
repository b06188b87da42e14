"""One meaning per fault on every executor, and the host registry of running trials, without real engines.

A trial stopped from outside (its job cancelled or preempted: SIGTERM) is 'interrupted', its own crash keeps
'error' and the start-up hint only when the trial never reached its start marker; a SLURM job that ended in the
queue without a result (accounting off or not answering, an array task cancelled while queued) becomes a row
after `vanish_s`; a Ray task lost with its node is 'interrupted'; timing trials ask for a whole node; every row
says which trials overlapped it on its host and the report flags those rows. The same faults against real
engines: tests/test_executors_real.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import vitbench_testtasks  # noqa: F401 - registers `sleep` here
from cluster_fixtures import wait_for, worker_env  # noqa: F401 - fixtures
from records import record

from vitbench.executors import Job, Role
from vitbench.executors.local import LocalExecutor
from vitbench.executors.overlap import CMD_CHARS, ENV, Presence
from vitbench.report import build_report
from vitbench.runner import run_study
from vitbench.store import Store, read_records
from vitbench.study import parse_study


def _job(key: str = "k1", study: str = "g", task: str = "sleep", **cfg) -> Job:
    config = {"model": "ViT-Nano/4", "backend": "torch", "task": task, "device": "cpu", "resolution": 32,
              "batch_size": 2, "seed": 0, "seconds": 0.01, "behaviour": "ok", **cfg}
    return Job(key=key, config=config, repeat=0, study=study, study_sha="x", run_id="r", timeout_s=60,
               task_module="vitbench_testtasks")


@pytest.fixture(autouse=True)
def registry(tmp_path, monkeypatch):
    """A private host registry (other sweeps on this machine must not show up in these rows)."""
    d = tmp_path / "registry"
    monkeypatch.setenv(ENV, str(d))
    return d


# ---- the host registry --------------------------------------------------------------------------------------
def test_presence_sees_live_trials_tells_them_and_ignores_dead_ones(registry):
    registry.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        other = {"id": "s/k1", "pid": live.pid, "run_id": "their-run", "launcher_pid": live.pid,
                 "cmd": "vitbench sweep s.yaml", "cwd": "/their/dir"}
        (registry / f"{live.pid}.trial").write_text(json.dumps(other) + "\n")
        (registry / f"{dead.pid}.trial").write_text(json.dumps({"id": "s/gone", "pid": dead.pid}) + "\n")
        with Presence("s/k1", run_id="my-run") as p:  # the same key as the other sweep's trial
            mine = registry / f"{os.getpid()}.trial"
            head = json.loads(mine.read_text().splitlines()[0])
            assert head["pid"] == os.getpid() and head["run_id"] == "my-run" and head["cwd"] == os.getcwd()
            # no multiprocessing helper: this process's own command line (pytest's, or an xdist worker's)
            own_cmd = " ".join(psutil.Process().cmdline())[:CMD_CHARS]
            assert head["launcher_pid"] == os.getpid() and head["cmd"] == own_cmd
            # a trial of this sweep that starts after us appends itself to our entry; so did an older vitbench's
            with open(mine, "a") as f:
                f.write(json.dumps({"id": "s/k2", "pid": 12345, "run_id": "my-run", "launcher_pid": 1,
                                    "cmd": "vitbench sweep s.yaml", "cwd": "/my/dir"}) + "\n")
                f.write(json.dumps({"id": "s/old"}) + "\n")
        assert [(o["trial"], o["own"]) for o in p.overlapped] == [("s/k2", True), ("s/k1", False), ("s/old", False)]
        theirs = p.overlapped[1]
        assert theirs == {"trial": "s/k1", "run_id": "their-run", "own": False, "pid": live.pid,
                          "launcher_pid": live.pid, "cmd": "vitbench sweep s.yaml", "cwd": "/their/dir"}
        assert not mine.exists() and not (registry / f"{dead.pid}.trial").exists()  # stale entry removed
        told = json.loads((registry / f"{live.pid}.trial").read_text().splitlines()[-1])
        assert (told["id"], told["pid"], told["run_id"]) == ("s/k1", os.getpid(), "my-run")  # the live one learns
    finally:
        live.kill()
        live.wait()


def test_an_entry_is_never_seen_empty_by_a_trial_that_looks_while_it_is_written(registry, monkeypatch):
    """A trial globbing the registry skips an entry it cannot read: one seen between its creation and its first
    write would hide that trial. Whatever the registry holds, at any write, is whole."""
    seen = []
    real_open = Path.open

    def spying_open(self, *a, **kw):
        f = real_open(self, *a, **kw)
        write = f.write

        def looking_write(data):  # what another trial's glob would see at this instant
            seen.extend(e.name for e in registry.glob("*.trial") if not e.read_text())
            return write(data)

        f.write = looking_write
        return f

    monkeypatch.setattr(Path, "open", spying_open)
    with Presence("s/k1", run_id="r"):
        monkeypatch.setattr(Path, "open", real_open)
        assert (registry / f"{os.getpid()}.trial").read_text()
    assert seen == [] and not list(registry.iterdir())


def test_the_registry_is_made_shared_only_where_it_was_made_never_through_a_link(tmp_path, monkeypatch):
    """A registry directory this process makes is sticky and writable by all (1777, like /tmp); one that was
    there, or a link to one ($VITBENCH_HOST_REGISTRY naming a directory of the user's), keeps its mode (before:
    chmod 1777 through the link made the user's 0700 directory world-writable; found by an audit)."""
    fresh = tmp_path / "fresh" / "reg"
    monkeypatch.setenv(ENV, str(fresh))
    with Presence("s/k1", run_id="r"):
        pass
    assert fresh.stat().st_mode & 0o7777 == 0o1777
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (tmp_path / "reglink").symlink_to(victim)
    for named in (victim, tmp_path / "reglink"):
        monkeypatch.setenv(ENV, str(named))
        with Presence("s/k1", run_id="r"):
            pass
        assert victim.stat().st_mode & 0o7777 == 0o700


def test_a_trial_started_by_a_fork_server_names_the_sweep_that_started_the_server(registry):
    """The local executor's trials are children of a fork server (itself a child of the sweep): the launcher is
    the first process up the tree that is not a multiprocessing helper."""
    import multiprocessing as mp

    from vitbench.executors.overlap import launcher

    ctx = mp.get_context("forkserver")
    with ctx.Pool(1) as pool:
        got = pool.apply(launcher)
    assert got["launcher_pid"] == os.getpid() and got["cwd"] == os.getcwd()


def test_alone_on_the_host_a_row_says_so(tmp_path):
    ex = LocalExecutor(tmp_path, start_method="spawn", preload=())
    out = []
    try:
        ex.run([_job()], lambda j: None, lambda j, o: out.append(o))
    finally:
        ex.close()
    assert out[0].record.status == "ok" and out[0].record.runner["overlapped"] == []


@pytest.mark.timeout(180)
def test_parallel_jobs_record_each_other_and_the_report_flags_them(tmp_path, worker_env, registry):
    pytest.importorskip("submitit")
    gate = tmp_path / "gate"
    s = parse_study(textwrap.dedent(f"""
        name: ov
        calibration: false
        timeout_s: 60
        defaults: {{seconds: 0.1, behaviour: gate, gate: {str(gate)!r}}}
        axes: {{model: [ViT-Nano/4, R-Nano], task: [sleep]}}
        """), "ov.yaml")
    def open_when_both_run():  # both in the registry: running at once (a fixed 8 s missed one at load ~12)
        deadline = time.monotonic() + 150
        while len(list(registry.glob("*.trial"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        gate.touch()

    threading.Thread(target=open_when_both_run, daemon=True).start()
    res = tmp_path / "res"
    summary = run_study(s, res, executor="slurm", executor_options={"cluster": "local", "poll_s": 0.2})
    assert summary.statuses == {"ok": 2}
    over = {r.key: r.runner["overlapped"] for r in read_records(res)}
    a, b = sorted(over)
    assert {k: [(o["trial"], o["own"]) for o in v] for k, v in over.items()} == {a: [(f"ov/{b}", True)],
                                                                                  b: [(f"ov/{a}", True)]}
    rep = build_report(res, tmp_path / "rep", formats=("md", "csv"), plots=False)
    assert len(rep.tables["shared_host"]) == 2 and any("same host" in w for w in rep.warnings)
    assert list(rep.tables["shared_host"]["own_sweep"]) == [1, 1]
    assert "Rows measured while other trials ran on the same host" in (tmp_path / "rep/report.md").read_text()


def test_the_report_flags_nothing_when_no_row_overlapped(tmp_path):
    cfg = {"backend": "torch", "task": "infer", "device": "cpu", "resolution": 32, "batch_size": 2, "repeat": 0}
    with Store(tmp_path) as st:
        st.append(record("bench", {"model": "m", **cfg}, metrics={"img_per_s": 1.0}, key="k",
                         runner={"overlapped": []}))
        st.append(record("bench", {"model": "m2", **cfg}, metrics={"img_per_s": 1.0}, key="k2"))
    rep = build_report(tmp_path, tmp_path / "rep", formats=("md",), plots=False)
    assert rep.tables["shared_host"].empty and not any("same host" in w for w in rep.warnings)
    assert list(rep.df["shared_host"]) == [0, 0]


# ---- one meaning per fault ---------------------------------------------------------------------------------
def _run_local(tmp_path, job: Job, during=None):
    ex = LocalExecutor(tmp_path, start_method="spawn", preload=())
    out = []
    try:
        if during is not None:
            threading.Thread(target=during, daemon=True).start()
        ex.run([job], lambda j: None, lambda j, o: out.append(o))
    finally:
        ex.close()
    return out[0].record


def _trial_pid(registry: Path) -> int:
    wait_for(lambda: list(registry.glob("*.trial")), 60, "the trial to start")
    return int(json.loads(next(registry.glob("*.trial")).read_text().splitlines()[0])["pid"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2])  # USR2: SLURM's preemption warning
def test_a_trial_stopped_from_outside_is_interrupted_not_an_error(tmp_path, registry, sig):
    gate = tmp_path / "gate"  # never created: the trial waits until it is stopped
    # a trial inherits an ignored signal across exec (a sweep under `nohup` ignores SIGHUP, and so do its trials,
    # as nohup asks): the sweep this test stands for ignores none
    old = signal.signal(sig, signal.SIG_DFL)
    try:
        rec = _run_local(tmp_path, _job(behaviour="gate", gate=str(gate)),
                         during=lambda: os.kill(_trial_pid(registry), sig))
    finally:
        signal.signal(sig, old)
    assert rec.status == "interrupted" and rec.error.type == "TrialCancelled"
    assert sig.name in rec.error.message and "before the trial started" not in rec.error.message


_WORKER = """
import sys
from vitbench.executors import Job
from vitbench.executors.remote import run_on_worker, since_now
job = Job(key="k1", config={{"model": "ViT-Nano/4", "backend": "torch", "task": "sleep", "device": "cpu",
          "resolution": 32, "batch_size": 2, "seed": 0, "seconds": 0.01, "behaviour": "gate", "gate": {gate!r}}},
          repeat=0, study="g", study_sha={sha!r}, run_id="r", timeout_s=60, task_module="vitbench_testtasks")
out = run_on_worker(job, {root!r}, since=since_now(), follow={follow!r})
print("OUTCOME", out.record.status, out.stored.name)
"""


def _worker_store(tmp_path: Path) -> tuple[Path, str]:
    """A results directory a worker sees as its driver's store (its study copy has the job's SHA-256)."""
    import hashlib

    root = tmp_path / "res"
    root.mkdir()
    Store(root).save_study("name: g\n")
    return root, hashlib.sha256(b"name: g\n").hexdigest()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("group", [False, True])  # the worker only (B:USR2 forwarded) / every process of the step
def test_a_preempted_worker_records_interrupted_and_its_requeue_measures_once(tmp_path, registry, worker_env, group):
    """What a SLURM job's worker does on the preemption warning (SIGUSR2), without SLURM: the trial stops, its row
    is 'interrupted' in the store, the worker exits without a result (status 128 + 12); the same job run again
    (a requeue) measures it; run once more (requeued after it measured) it returns the stored row."""
    root, sha = _worker_store(tmp_path)
    gate = tmp_path / "gate"
    code = _WORKER.format(gate=str(gate), sha=sha, root=str(root), follow=False)

    def worker() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)

    p = worker()
    trial = _trial_pid(registry)  # the trial runs (gated)
    os.killpg(p.pid, signal.SIGUSR2) if group else p.send_signal(signal.SIGUSR2)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGUSR2, out
    assert "OUTCOME" not in out  # no result for the driver: it follows the job
    (row,) = read_records(root)
    assert row.status == "interrupted" and "SIGUSR2" in row.error.message, row.error
    assert row.error.type == "Preempted" or group  # (signalled too, the trial may report its own end first)
    wait_for(lambda: not psutil.pid_exists(trial), 30, "the stopped trial to be gone")  # nothing keeps measuring
    assert not list(root.glob("**/*.tmp"))  # nothing half-written
    gate.touch()
    for _ in range(2):  # requeued: measures; requeued again after that: the stored row, nothing measured again
        p = worker()
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0 and "OUTCOME ok WORKER" in out, out
    assert [str(r.status) for r in read_records(root)] == ["interrupted", "ok"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("follow", [True, False])  # a SLURM job (followed through a requeue) / a Ray task
def test_a_trial_stopped_by_sigterm_in_a_followed_job_ends_the_worker_without_a_result(
        tmp_path, registry, worker_env, follow):
    """SLURM's SIGTERM to the processes of a job it cancels, preempts or requeues (`scontrol requeue` with no
    warning first), here to the trial only: the trial's row is 'interrupted' in the store either way. A SLURM
    worker (`follow`) then exits without a result (128 + SIGTERM), so its driver follows the job through a
    requeue, whose run measures the trial; a Ray worker (no requeue) returns the row."""
    root, sha = _worker_store(tmp_path)
    gate = tmp_path / "gate"
    p = subprocess.Popen([sys.executable, "-c", _WORKER.format(gate=str(gate), sha=sha, root=str(root),
                                                               follow=follow)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    os.kill(_trial_pid(registry), signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    (row,) = read_records(root)
    assert row.status == "interrupted" and row.error.type == "TrialCancelled" and "SIGTERM" in row.error.message
    if not follow:
        assert p.returncode == 0 and "OUTCOME interrupted WORKER" in out, out
        return
    assert p.returncode == 128 + signal.SIGTERM and "OUTCOME" not in out, out
    gate.touch()  # the requeued job's run
    p = subprocess.Popen([sys.executable, "-c", _WORKER.format(gate=str(gate), sha=sha, root=str(root),
                                                               follow=follow)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0 and "OUTCOME ok WORKER" in out, out
    assert [str(r.status) for r in read_records(root)] == ["interrupted", "ok"]


def test_a_silent_crash_after_the_start_is_an_error_without_the_start_up_hint(tmp_path):
    rec = _run_local(tmp_path, _job(behaviour="silent_abort"))
    assert rec.status == "error" and rec.error.type == "TrialCrashed" and "SIGABRT" in rec.error.message
    assert "before the trial started" not in rec.error.message and "__main__" not in rec.error.message


def test_a_crash_before_the_start_marker_keeps_the_start_up_hint(tmp_path, monkeypatch):
    import vitbench.executors.local as local

    proc = SimpleNamespace(exitcode=1, pid=0, join=lambda timeout=None: None)
    h = SimpleNamespace(result=tmp_path / "k.json", log=tmp_path / "k.log", over_budget_mib=None, timed_out=False,
                        started_at="", t0=0.0, proc=proc)
    rec = local.LocalExecutor(tmp_path, start_method="spawn", preload=()).collect(_job(), h).record
    assert rec.status == "error" and "before the trial started" in rec.error.message  # no marker: never started


# ---- SLURM: a job that ended in the queue without a result -------------------------------------------------
class _FakeSjob:
    def __init__(self, job_id: str, folder: Path):
        self.job_id = job_id
        self.paths = SimpleNamespace(result_pickle=folder / f"{job_id}_result.pkl", folder=folder)
        self.state = "UNKNOWN"  # accounting says nothing

    def done(self):
        return False  # submitit waits for sacct, forever

    def result(self):
        raise AssertionError("a lost job is never waited for")

    def stderr(self):
        return None

    stdout = stderr


@pytest.mark.parametrize("queue_state,etype", [("CANCELLED", "SlurmJobCancelled"), (None, "SlurmJobVanished")])
def test_slurm_job_gone_from_the_queue_becomes_an_interrupted_row_after_vanish_s(
        tmp_path, monkeypatch, queue_state, etype):
    pytest.importorskip("submitit")
    import vitbench.executors.slurm as slurm

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    ex = slurm.SlurmExecutor(tmp_path, vanish_s=0.3, poll_s=0.05)
    h = slurm._Submitted(_FakeSjob("7_1", tmp_path), 0.0)
    queue = {"7_1": "PENDING"}
    monkeypatch.setattr(slurm, "squeue_states", lambda: dict(queue))
    assert ex.poll([h]) == [] and h.queue_state == "PENDING"
    queue.clear()
    if queue_state:
        queue["7_1"] = queue_state
    assert ex.poll([h]) == []  # ended (or gone) just now: the result may still be on its way
    wait_for(lambda: ex.poll([h]) == [h], 10, "the deadline")
    rec = ex.collect(_job(), h).record
    assert rec.status == "interrupted" and rec.error.type == etype and rec.runner["job_id"] == "7_1"
    assert "runs again" in rec.error.message


class _DoneSjob(_FakeSjob):
    """A job accounting (sacct) already calls ended, without a result file."""

    def done(self):
        return True


@pytest.mark.parametrize("states", [["COMPLETING"], ["REQUEUED", "PENDING", "RUNNING"]])
def test_slurm_a_job_squeue_shows_active_is_followed_whatever_accounting_says(tmp_path, monkeypatch, states):
    """sacct calls a cancelled job CANCELLED while its worker still writes the row (squeue: COMPLETING), and a
    requeued job's earlier run ended (squeue: REQUEUED, PENDING, RUNNING again): the driver waits for the end
    squeue shows, then collects (the worker's row, else one made from the state)."""
    pytest.importorskip("submitit")
    import vitbench.executors.slurm as slurm

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    ex = slurm.SlurmExecutor(tmp_path, vanish_s=60, poll_s=0.01)
    h = slurm._Submitted(_DoneSjob("9", tmp_path), 0.0)
    queue: dict[str, str] = {}
    monkeypatch.setattr(slurm, "squeue_states", lambda: dict(queue))
    for state in states:
        queue["9"] = state
        assert ex.poll([h]) == [], state
    queue["9"] = "CANCELLED"
    assert ex.poll([h]) == [h]  # (no vanish_s wait: accounting has said how it ended)
    monkeypatch.setattr(slurm, "squeue_states", lambda: None)  # squeue not answering: accounting decides
    assert ex.poll([h]) == [h]


def test_slurm_squeue_not_answering_decides_nothing(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    import vitbench.executors.slurm as slurm

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    ex = slurm.SlurmExecutor(tmp_path, vanish_s=0.01, poll_s=0.01)
    h = slurm._Submitted(_FakeSjob("8", tmp_path), 0.0)
    monkeypatch.setattr(slurm, "squeue_states", lambda: None)
    assert ex.poll([h]) == [] and ex.poll([h]) == [] and h.gone_since is None


def test_timing_trials_get_a_whole_node_by_default(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    from vitbench.executors.slurm import SlurmExecutor

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    timing = _job(task="infer")
    cal = Job(**{**_job(task="calibration").__dict__, "role": Role.CALIBRATION})
    other = _job(task="sleep")
    ex = SlurmExecutor(tmp_path)
    assert ex._exclusive(timing) and ex._exclusive(cal) and not ex._exclusive(other)
    text = ex._executor(tmp_path, exclusive=True)._executor._make_submission_file_text("python -m x", "u")
    assert "--exclusive" in text
    text = ex._executor(tmp_path, exclusive=False)._executor._make_submission_file_text("python -m x", "u")
    assert "--exclusive" not in text
    assert not SlurmExecutor(tmp_path, exclusive=False)._exclusive(timing)


# ---- the paths a cluster's workers write, checked before anything runs --------------------------------------
@pytest.mark.parametrize("executor,entry", [("slurm", "claims/{key}.worker.lock"),
                                            ("ray", "claims/{key}.worker.lock"), ("ray", "logs/ray.log")])
@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_worker_path_not_of_its_kind_is_refused_before_anything_runs(tmp_path, executor, entry, kind):
    """A worker's trial lock or Ray's log that is a directory or a pipe would end a job (or lose the cluster's
    broadcasts) mid-sweep: refused up front naming it (PathError: exit 2), nothing written, nothing submitted."""
    pytest.importorskip({"slurm": "submitit", "ray": "ray"}[executor])
    from vitbench.paths import PathError

    s = parse_study("name: wp\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [sleep]}\n", "wp.yaml")
    res = tmp_path / "res"
    bad = res / entry.format(key=s.trials[0].key)
    bad.parent.mkdir(parents=True)
    bad.mkdir() if kind == "directory" else os.mkfifo(bad)
    opts = {"cluster": "local"} if executor == "slurm" else {}
    with pytest.raises(PathError, match=bad.name.replace(".", r"\.")):
        run_study(s, res, executor=executor, executor_options=opts)
    assert sorted(p.name for p in res.iterdir()) == [bad.parent.name]  # nothing else written


class _Ref:
    """A fake Ray ObjectRef: what the executor asks of one, its task id."""

    def __init__(self, tid: str):
        self.tid = tid

    def task_id(self):
        return SimpleNamespace(hex=lambda: self.tid)


# ---- Ray: a task lost with its node -----------------------------------------------------------------------
def test_ray_task_lost_with_its_node_is_interrupted_and_carries_its_task_id(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from vitbench.executors.ray import RayExecutor

    ex = RayExecutor(tmp_path)
    for err, status in [(ray.exceptions.NodeDiedError("node 1 died"), "interrupted"),
                        (ray.exceptions.WorkerCrashedError(), "interrupted"),
                        (RuntimeError("something else"), "error")]:
        def get(ref, err=err):
            raise err

        monkeypatch.setattr(ex, "_ray", lambda get=get: SimpleNamespace(get=get))
        rec = ex.collect(_job(), _Ref("abc123")).record
        assert rec.status == status and rec.runner["task_id"] == "abc123", (err, rec)


def test_ray_head_silent_for_head_lost_s_turns_every_trial_in_flight_into_a_row(tmp_path, monkeypatch):
    """The head (GCS) stops answering: nothing is decided before head_lost_s of silence (an answer starts the
    count again); after it, every task in flight and every job drawn later is an 'interrupted' row naming the
    head (the worker's own row where it wrote one), Ray is asked for nothing more, and its shutdown is not
    waited for."""
    pytest.importorskip("ray")
    from vitbench.errors import VitbenchWarning
    from vitbench.executors.ray import RayExecutor

    asked = []
    fake = SimpleNamespace(wait=lambda refs, num_returns, timeout: ([], refs),
                           cancel=lambda ref, force: asked.append(("cancel", ref.tid)),
                           get=lambda ref: asked.append("get"))
    ex = RayExecutor(tmp_path, head_lost_s=0.3, poll_s=0.01)
    monkeypatch.setattr(ex, "_ray", lambda: fake)
    monkeypatch.setattr(ex, "_head_address", lambda: "GCS at 127.0.0.1:6379")
    silence = ["RpcError: Timed out while waiting for GCS to become available."]
    monkeypatch.setattr(RayExecutor, "_head_silence", staticmethod(lambda: silence[0]))
    refs = [_Ref("t1"), _Ref("t2")]
    assert ex.poll(refs) == []
    silence[0] = None  # it answers again: the silence starts over
    wait_for(lambda: ex.poll(refs) == [] and ex._silent_since is None, 5, "the answer")
    silence[0] = "RpcError: Timed out while waiting for GCS to become available."
    with pytest.warns(VitbenchWarning, match="has not answered for 0.3 s"):
        wait_for(lambda: ex.poll(refs) == refs, 10, "head_lost_s")
    with Store(tmp_path) as st:  # one trial's worker wrote its row before the head went
        st.append(record("sleep", _job("k1").config, key="k1", run_id="r", runner={"executor": "ray"}))
    rows = [ex.collect(_job(k), ref).record for k, ref in zip(("k1", "k2"), refs)]
    assert rows[0].status == "ok"
    assert rows[1].status == "interrupted" and rows[1].error.type == "RayHeadLost"
    assert "GCS at 127.0.0.1:6379" in rows[1].error.message and "runs again" in rows[1].error.message
    assert rows[1].runner["task_id"] == "t2" and "get" not in asked
    later = ex.submit([_job("k3")])  # drawn after: never submitted
    assert ex.poll(later) == later
    rec = ex.collect(_job("k3"), later[0]).record
    assert rec.status == "interrupted" and rec.error.type == "RayHeadLost" and "task_id" not in rec.runner
    ex._started = True
    monkeypatch.setattr("ray.shutdown", lambda: asked.append("shutdown"))
    ex.close()
    assert "shutdown" not in asked


def test_ray_ctrl_c_cancels_again_until_every_task_has_ended(tmp_path, monkeypatch):
    """One force-cancel is not always enough: a task cancelled right after it was submitted ran on to its end (the
    Ctrl-C test, 2 runs of 13 on 2 cores) and wrote an `ok` row after its `interrupted` one. RayExecutor.cancel
    asks again each CANCEL_RETRY_S while a task has not ended: here t1 ignores the first cancel and ends at the
    second, t2 ends at the first; both jobs become `interrupted` rows."""
    pytest.importorskip("ray")
    from vitbench.executors import ray as ray_executor
    from vitbench.executors.ray import RayExecutor

    cancels: list[str] = []
    ends_after = {"t1": 2, "t2": 1}  # the cancel at which each task ends

    def wait(refs, num_returns, timeout):
        ended = [r for r in refs if cancels.count(r.tid) >= ends_after[r.tid]]
        return ended, [r for r in refs if r not in ended]

    fake = SimpleNamespace(wait=wait, cancel=lambda ref, force: cancels.append(ref.tid))
    monkeypatch.setattr(ray_executor, "CANCEL_RETRY_S", 0.01)
    ex = RayExecutor(tmp_path)
    monkeypatch.setattr(ex, "_ray", lambda: fake)
    outcomes = ex.cancel([(_job("k1"), _Ref("t1")), (_job("k2"), _Ref("t2"))])
    assert cancels == ["t1", "t2", "t1"]
    assert [o.record.status for o in outcomes] == ["interrupted", "interrupted"]
    assert [o.record.runner["task_id"] for o in outcomes] == ["t1", "t2"]
    assert not [o for o in outcomes if "may still be running" in o.record.error.message]


def test_ray_ctrl_c_says_which_cancelled_task_had_not_ended_by_the_deadline(tmp_path, monkeypatch):
    """A task that ignores every cancel until grace_s + 10 s have passed: a warning, and its row (not the other
    task's) says it may still be running."""
    pytest.importorskip("ray")
    from vitbench.errors import VitbenchWarning
    from vitbench.executors import ray as ray_executor
    from vitbench.executors.ray import RayExecutor

    def wait(refs, num_returns, timeout):
        ended = [r for r in refs if r.tid == "t2"]
        return ended, [r for r in refs if r not in ended]

    fake = SimpleNamespace(wait=wait, cancel=lambda ref, force: None)
    monkeypatch.setattr(ray_executor, "CANCEL_RETRY_S", 0.01)
    clock = iter(range(0, 10**6, 4))  # each look at the clock 4 s later: the deadline passes after a few asks
    monkeypatch.setattr(ray_executor, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    ex = RayExecutor(tmp_path)
    monkeypatch.setattr(ex, "_ray", lambda: fake)
    with pytest.warns(VitbenchWarning, match="1 cancelled task.*had not ended"):
        outcomes = ex.cancel([(_job("k1"), _Ref("t1")), (_job("k2"), _Ref("t2"))])
    assert ["may still be running" in o.record.error.message for o in outcomes] == [True, False]
