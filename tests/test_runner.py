"""Runner + local executor: isolation, failures as rows, resume after a real kill -9, Ctrl-C, two sweeps at once.

Most tests use the test-only task `sleep` (tests/vitbench_testtasks.py) so they take seconds; one runs a real
tiny-model trial through the default fork server.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import vitbench_testtasks  # noqa: F401 - registers the `sleep` task in this process

from vitbench.runner import run_study
from vitbench.store import read_records
from vitbench.tidy import load
from vitbench.study import parse_study

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SPAWN = {"start_method": "spawn"}  # no torch preload: the fake task needs none, and it starts faster


def fake_study(body: str, name: str = "fake"):
    return parse_study(f"name: {name}\ncalibration: false\n" + textwrap.dedent(body), "fake.yaml")


def statuses(path) -> list[tuple[str, str]]:
    return [(r.key, r.status.value) for r in read_records(path) if r.key]


def test_failures_become_rows_and_the_sweep_goes_on(tmp_path):
    s = fake_study("""
        timeout_s: 10
        axes:
          model: [ViT-Nano/4]
          task: [sleep]
          behaviour: [crash, abort, oom, hang, ok]
    """)
    summary = run_study(s, tmp_path, executor_options=SPAWN)
    assert summary.statuses == {"error": 2, "oom": 1, "timeout": 1, "ok": 1}
    df = load(tmp_path).set_index("behaviour")
    assert df.loc["crash", "status"] == "error" and df.loc["crash", "error_type"] == "RuntimeError"
    assert "deliberate failure" in df.loc["crash", "error_tail"] and "Traceback" in df.loc["crash", "error_tail"]
    assert df.loc["abort", "error_type"] == "TrialCrashed" and "SIGABRT" in df.loc["abort", "error_message"]
    assert "behaviour=abort" in df.loc["abort", "error_tail"]  # the child's own output, from its log
    assert df.loc["oom", "status"] == "oom"
    assert df.loc["hang", "status"] == "timeout" and 10 <= df.loc["hang", "runner.wall_s"] < 40
    assert df.loc["ok", "status"] == "ok" and df.loc["ok", "img_per_s"] > 0
    assert (tmp_path / "study.yaml").read_text() == s.text
    assert (tmp_path / "logs").is_dir()


def test_a_timeout_kills_the_trial_and_the_processes_it_started(tmp_path):
    s = fake_study("timeout_s: 4\naxes: {model: [ViT-Nano/4], task: [spawner]}\n")
    run_study(s, tmp_path, executor_options=SPAWN)
    row = load(tmp_path).iloc[0]
    assert row["status"] == "timeout"
    pid = int(re.search(r"grandchild (\d+)", row["error_tail"]).group(1))
    _wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
              timeout=10, what="the grandchild to die")


def test_every_trial_runs_in_its_own_process(tmp_path):
    s = fake_study("axes: {model: [ViT-Nano/4, R-Nano, ViT-Micro/4], task: [sleep]}\n")
    run_study(s, tmp_path, executor_options=SPAWN)
    pids = load(tmp_path)["pid"].tolist()
    assert len(set(pids)) == 3 and os.getpid() not in pids


def test_each_backend_has_its_own_fork_server_and_inherits_no_other_framework(tmp_path, monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)  # set here if this process imported JAX's
    s = fake_study("axes: {model: [ViT-Nano/4, R-Nano], backend: [torch, jax], task: [sleep]}\n")
    run_study(s, tmp_path)  # the default: fork servers, one per backend
    df = load(tmp_path)
    assert (df["runner.start_method"] == "forkserver").all() and df["pid"].nunique() == 4
    by = df.groupby("backend")
    assert by["frameworks"].agg(set).to_dict() == {"torch": {"torch timm"}, "jax": {"jax flax"}}
    servers = by["parent_pid"].agg(set).to_dict()  # each backend's trials: forks of one server, not the other's
    assert len(servers["torch"]) == len(servers["jax"]) == 1 and servers["torch"] != servers["jax"]
    # JAX's trials allocate GPU memory on demand: the default set where the server imported the backend is kept,
    # though each trial runs with the sweep's environment (on an H200 they held 75 % of the device: docs/gpu.md)
    assert set(df.loc[df["backend"] == "jax", "xla_preallocate_env"]) == {"false"}


def _registry_at_start(queue) -> None:
    from vitbench.registry import _STATE
    from vitbench.value_cache import source_hash

    queue.put((sorted(k.value for k in _STATE.loaded), _STATE.outside_loaded, source_hash.cache_info().currsize))


def test_a_trial_forked_from_a_server_finds_the_plugins_registered_and_the_source_hashed():
    """The servers register vitbench's plug-ins and hash its source for the value cache once (executors/warm.py);
    a server without that module does not, and its children would each do it again."""
    import multiprocessing as mp

    from vitbench import forkservers
    from vitbench.executors.local import PRELOAD
    from vitbench.registry import Kind

    q = mp.get_context("spawn").Queue()
    found = {}
    for preload in (PRELOAD, tuple(m for m in PRELOAD if m != "vitbench.executors.warm")):
        p = forkservers.process(preload, _registry_at_start, (q,))
        p.start()
        p.join(timeout=120)
        assert p.exitcode == 0
        found[preload] = q.get(timeout=10)
    with_warm, without = found.values()
    assert with_warm == (sorted(k.value for k in Kind), True, 1)
    assert without[1] is False and len(without[0]) < len(Kind) and without[2] == 0


@pytest.mark.parametrize("module, path, how", [
    ("multiprocessing.popen_forkserver", "Popen", "_launch"),
    ("multiprocessing.forkserver", "_forkserver", "_forkserver_alive_fd"),
    ("multiprocessing.forkserver", "ForkServer", "connect_to_new_process"),
])
def test_without_what_the_fork_servers_use_a_sweep_spawns_its_trials_and_says_why(tmp_path, monkeypatch, module,
                                                                                    path, how):
    """Another Python: the check (once, at import; run again here) finds the internal gone, and the sweep runs
    every trial spawned, each row naming the reason."""
    import importlib

    from vitbench import forkservers

    monkeypatch.delattr(getattr(importlib.import_module(module), path), how)
    monkeypatch.setattr(forkservers, "unavailable", forkservers.why_unavailable())
    s = fake_study("axes: {model: [ViT-Nano/4, R-Nano], task: [sleep]}\n")
    summary = run_study(s, tmp_path)  # the default start method: forkserver
    assert summary.statuses == {"ok": 2}
    df = load(tmp_path)
    assert (df["runner.start_method"] == "spawn").all()
    assert (df["runner.start_method_note"] == f"no fork server: {module}.{path}.{how} is missing (another "
                                              "Python?)").all()
    assert (df["parent_pid"] == os.getpid()).all()  # children of the sweep itself, not of a server


def test_resume_force_and_retry_failed(tmp_path):
    s = fake_study("axes: {model: [ViT-Nano/4, R-Nano], task: [sleep], behaviour: [ok, crash]}\n")
    first = run_study(s, tmp_path, executor_options=SPAWN)
    assert first.ran == 4
    again = run_study(s, tmp_path, executor_options=SPAWN)
    assert again.ran == 0 and again.skipped_done == 4
    retry = run_study(s, tmp_path, retry_failed=True, executor_options=SPAWN)
    assert retry.ran == 2 and retry.statuses == {"error": 2}
    forced = run_study(s, tmp_path, force=True, executor_options=SPAWN)
    assert forced.ran == 4
    assert len(load(tmp_path)) == 4  # one row per trial: the latest
    assert len(read_records(tmp_path)) == 10


def test_repeats_are_stored_interleaved(tmp_path):
    s = fake_study("repeats: 2\naxes: {model: [ViT-Nano/4, R-Nano], task: [sleep]}\n")
    run_study(s, tmp_path, executor_options=SPAWN)
    order = [(r.trial["model"], r.repeat) for r in read_records(tmp_path)]
    assert order == [("ViT-Nano/4", 0), ("R-Nano", 0), ("ViT-Nano/4", 1), ("R-Nano", 1)]


# ----------------------------------------------------------------------------------------------------------
# Real processes: the CLI killed, interrupted, and run twice at once
# ----------------------------------------------------------------------------------------------------------
def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")])
    env["VITBENCH_PLUGINS"] = "vitbench_testtasks"
    return env


def _sweep_cmd(study_path: Path, results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", "from vitbench.cli import main; main()", "sweep", str(study_path),
            "--results", str(results), "--start-method", "spawn", *extra]


def _write_study(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text("name: proc\ncalibration: false\ntimeout_s: 60\n" + textwrap.dedent(body))
    return p


def _wait_for(cond, timeout: float = 60.0, what: str = "condition") -> None:
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _log_says(results: Path, text: str) -> bool:
    """A trial log in `results` has `text`; a log listed and then gone (an ok trial's log is removed as it ends,
    between the listing and the read) has not."""
    for f in (results / "logs").glob("*.log"):
        try:
            if text in f.read_text():
                return True
        except FileNotFoundError:
            pass
    return False


def _ran(stdout: bytes) -> int:
    m = re.search(r"ran (\d+) trial", " ".join(stdout.decode().split()))
    assert m, stdout.decode()
    return int(m.group(1))


def _rows(results: Path) -> int:
    f = results / "results.jsonl"
    return f.read_bytes().count(b"\n") if f.exists() else 0


@pytest.mark.timeout(180)
def test_resume_after_kill_9_records_every_trial_exactly_once(tmp_path):
    study_path = _write_study(tmp_path, """
        repeats: 2
        defaults: {seconds: 0.3}
        axes:
          model: [ViT-Nano/4, ViT-Micro/4, R-Nano, R-Micro]
          task: [sleep]
    """)
    results = tmp_path / "res"
    p = subprocess.Popen(_sweep_cmd(study_path, results), env=_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: _rows(results) >= 3 or p.poll() is not None, what="three finished trials")
        assert p.poll() is None, p.stderr.read().decode()[-2000:]
        children = psutil.Process(p.pid).children(recursive=True)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
    killed_at = _rows(results)
    assert 3 <= killed_at < 8
    # the running trial dies with the sweep (PR_SET_PDEATHSIG): nothing keeps measuring in the background
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [c.pid for c in alive]
    r = subprocess.run(_sweep_cmd(study_path, results), env=_env(), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    keys = [k for k, st in statuses(results)]
    assert len(keys) == 8 and len(set(keys)) == 8, collections.Counter(keys)
    assert {st for _, st in statuses(results)} == {"ok"}
    assert _ran(r.stdout) == 8 - killed_at


@pytest.mark.timeout(120)
def test_a_trial_never_outlives_its_sweep_killed_9(tmp_path):
    """A forked trial's parent is its fork server, not the sweep: the kernel's parent-death signal never came, and
    the trial held the server alive, so after `kill -9` of the sweep both ran on (past the trial's timeout,
    beside the resumed sweep's trials) until the trial ended by itself. This trial would never end by itself."""
    gate = tmp_path / "gate"  # never made
    study_path = _write_study(tmp_path, f"""
        defaults: {{seconds: 0.1, gate: {str(gate)!r}, behaviour: gate}}
        axes: {{model: [ViT-Nano/4], task: [sleep]}}
    """)
    results = tmp_path / "res"
    forked = [a for a in _sweep_cmd(study_path, results) if a not in ("--start-method", "spawn")]  # the default
    p = subprocess.Popen(forked, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: _log_says(results, "behaviour=gate")
                  or p.poll() is not None, what="the trial to start")
        assert p.poll() is None, p.stderr.read().decode()[-2000:]
        children = psutil.Process(p.pid).children(recursive=True)
        assert len(children) >= 2  # its fork server and the trial, at least
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
    _, alive = psutil.wait_procs(children, timeout=15)
    for c in alive:
        c.kill()
    assert not alive, [(c.pid, c.cmdline()[:3]) for c in alive]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig,group", [
    (signal.SIGINT, False),  # Ctrl-C
    (signal.SIGTERM, False),  # kill
    (signal.SIGUSR2, True),  # SLURM's preemption warning (--signal=USR2@N): every process of the job step gets it
    (signal.SIGUSR2, False),  # ... `--signal=B:USR2@N` with `exec vitbench sweep` in the batch script: the sweep
])
def test_ctrl_c_or_a_stop_signal_records_the_running_trial_as_interrupted_and_it_reruns(tmp_path, sig, group):
    gate = tmp_path / "gate"  # the gated trial runs until this file exists: surely running when interrupted
    study_path = _write_study(tmp_path, f"""
        defaults: {{seconds: 0.1, gate: {str(gate)!r}}}
        axes:
          model: [ViT-Nano/4, R-Nano]
          task: [sleep]
          behaviour: [ok, gate]
    """)
    results = tmp_path / "res"
    env = _env()
    p = subprocess.Popen(_sweep_cmd(study_path, results), env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    _wait_for(lambda: _rows(results) >= 1, what="the first trial")
    # Interrupt once the gated trial is really running (its log has the task's first line); between two
    # trials there is nothing to mark interrupted.
    _wait_for(lambda: _log_says(results, "behaviour=gate"),
              what="the second trial to start")
    if group:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    assert p.wait(30) == 130, p.stderr.read().decode()[-2000:]
    sts = statuses(results)
    assert [s for _, s in sts] == ["ok", "interrupted"]
    (stopped,) = [r for r in read_records(results) if r.status == "interrupted"]
    # the sweep stopped the trial, or (signalled too) the trial said which signal stopped it
    assert stopped.error.type == "KeyboardInterrupt" or sig.name in stopped.error.message, stopped.error
    gate.touch()
    r = subprocess.run(_sweep_cmd(study_path, results), env=env, capture_output=True, timeout=90)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    df = load(results)
    assert len(df) == 4 and set(df["status"]) == {"ok"}
    assert sts[1][0] in set(df["key"])  # the interrupted trial ran again


@pytest.mark.timeout(120)
def test_a_second_ctrl_c_does_not_cut_short_the_interrupted_row(tmp_path):
    """A second Ctrl-C while the sweep stopped its running trial (SIGTERM, then SIGKILL after the grace) cut the
    cancelling short: no row was written, while the sweep said the trial 'is recorded as interrupted'."""
    study_path = _write_study(tmp_path, """
        executor: {name: local, options: {grace_s: 3}}
        defaults: {behaviour: stubborn_hang}
        axes: {model: [ViT-Nano/4], task: [hog]}
    """)
    results = tmp_path / "res"
    env = {**_env(), "VITBENCH_PLUGINS": "vitbench_testtasks,vitbench_hogtasks"}
    p = subprocess.Popen(_sweep_cmd(study_path, results), env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: _log_says(results, "behaviour=stubborn_hang")
                  or p.poll() is not None, what="the trial to start")
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)  # within the grace: the trial ignores SIGTERM
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 130, p.stderr.read().decode()[-2000:]
    finally:
        if p.poll() is None:
            p.kill()
    assert [s for _, s in statuses(results)] == ["interrupted"]


@pytest.mark.timeout(120)
def test_two_studies_started_at_once_into_one_folder_never_pool(tmp_path):
    """Each sweep checked the folder for another study's results before either had written there: the second to
    start its trials moved the first's study.yaml aside, took the first's row of the same trial as its own done
    trial and exited 0 having measured nothing (found by a review). Now the check is made again, under a lock on
    the folder, where the study copy is written: the second is refused (exit 2 naming the other study)."""
    from vitbench.errors import ConfigError
    from vitbench.runner import SweepHooks

    body = "axes: {model: [ViT-Nano/4], task: [sleep]}\n"

    class OtherStartsMeanwhile(SweepHooks):
        def planned(self, todo, summary):  # after this sweep's check, before it writes: the other study runs
            assert run_study(fake_study(body, "other"), tmp_path, executor_options=SPAWN).statuses == {"ok": 1}

    with pytest.raises(ConfigError, match="holds the results of study 'other'"):
        run_study(fake_study(body, "mine"), tmp_path, executor_options=SPAWN, hooks=OtherStartsMeanwhile())
    assert [r.study for r in read_records(tmp_path)] == ["other"]
    assert parse_study((tmp_path / "study.yaml").read_text(), "x.yaml").name == "other"
    assert sorted(p.name for p in tmp_path.glob("study*.yaml")) == ["study.yaml"]  # nothing moved aside


@pytest.mark.timeout(240)
@pytest.mark.parametrize("force", [False, True])
def test_two_sweeps_at_once_split_the_work_without_duplicates(tmp_path, force):
    """Also under --force on a folder where every trial is done: each trial was measured by both sweeps that
    found it released (5 rows for 3 trials; found by a review)."""
    study_path = _write_study(tmp_path, """
        defaults: {seconds: 0.3}
        axes:
          model: [ViT-Nano/4, ViT-Micro/4, R-Nano, R-Micro]
          task: [sleep]
          batch_size: [2, 4]
    """)
    results = tmp_path / "res"
    extra = ("--force",) if force else ()
    if force:
        s = subprocess.run(_sweep_cmd(study_path, results), env=_env(), capture_output=True, timeout=150)
        assert s.returncode == 0, s.stderr.decode()[-2000:]
    procs = [subprocess.Popen(_sweep_cmd(study_path, results, *extra), env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=150) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode()[-2000:]
    keys = [k for k, _ in statuses(results)]
    n = 16 if force else 8  # with --force: the first sweep's 8 rows and one more of each trial
    assert len(keys) == n and set(collections.Counter(keys).values()) == {n // 8}, collections.Counter(keys)
    assert sum(_ran(out) for out, _ in outs) == 8


# ----------------------------------------------------------------------------------------------------------
# A real trial through the default fork server, with the calibration workload
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_real_tiny_trials_and_calibration_through_the_fork_server(tmp_path):
    s = parse_study(textwrap.dedent("""
        name: real
        timeout_s: 240
        defaults: {batch_size: 4, warmup_steps: 1, min_steps: 3, min_seconds: 0.05, max_seconds: 2}
        axes:
          model: [ViT-Nano/4]
          task: [infer, flops]
    """), "real.yaml")
    summary = run_study(s, tmp_path)
    assert summary.statuses == {"ok": 2} and summary.calibrations == 1
    df = load(tmp_path).set_index("task")
    assert df.loc["infer", "img_per_s"] > 0 and len(df.loc["infer", "raw"]["step_s"]) >= 3
    assert df.loc["infer", "runner.start_method"] == "forkserver"
    assert df.loc["infer", "runner.startup_s"] < 5  # torch already imported in the server
    assert df.loc["flops", "gflops"] > 0 and df.loc["infer", "run_id"] == df.loc["flops", "run_id"]
    cal = load(tmp_path, kinds=("calibration",))
    assert len(cal) == 1 and cal.loc[0, "matmul_tflops_per_s"] > 0
    assert cal.loc[0, "run_id"] == df.loc["infer", "run_id"]
    assert len(cal.loc[0, "raw"]["matmul_tflops_per_s"]) == 3


def test_an_edited_row_is_never_taken_as_done_and_ok(tmp_path):
    """A resumed sweep read an ok row without its measure as done (`1 of 1 trials already done`, exit 0). Such a
    row (vitbench wrote some before 2026-11-28) is read as an error row, said, and re-run with --retry-failed; a
    measure vitbench never writes (a negative speed) stops the sweep naming the file and line."""
    import json

    import pytest

    from vitbench.errors import ConfigError
    from vitbench.store import UnmeasuredRowWarning

    s = fake_study("axes: {model: [ViT-Nano/4], task: [sleep]}\n")
    assert run_study(s, tmp_path, executor_options=SPAWN).ran == 1
    f = tmp_path / "results.jsonl"
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    trial = next(i for i, r in enumerate(rows) if r["kind"] == "bench")

    def edit(value) -> None:
        rows[trial]["metrics"]["img_per_s"] = value
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))

    edit(None)
    with pytest.warns(UnmeasuredRowWarning, match=rf"results.jsonl:{trial + 1}: an ok row without its img_per_s"):
        again = run_study(s, tmp_path, executor_options=SPAWN)
    assert again.ran == 0 and [x.value for x in again.failed_trials.values()] == ["error"]  # exit 1 in the CLI
    with pytest.warns(UnmeasuredRowWarning):
        assert run_study(s, tmp_path, retry_failed=True, executor_options=SPAWN).statuses == {"ok": 1}
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    edit(-5.0)  # (what a task measures so is an error row where it is written: below)
    with pytest.raises(ConfigError, match=rf"results.jsonl:{trial + 1}: img_per_s = -5.0, where vitbench writes"):
        run_study(s, tmp_path, executor_options=SPAWN)


def test_a_number_every_reader_refuses_is_never_written_as_ok(tmp_path):
    """What the readers refuse (vitbench.tasks.row_check) is refused where it is written too: a task that measured
    a step time below 0 ms gets an error row, and the store stays readable (else the sweep's own next read of it
    stopped the sweep)."""
    s = fake_study("axes: {model: [ViT-Nano/4], task: [sleep], behaviour: [negative]}\n")
    summary = run_study(s, tmp_path, executor_options=SPAWN)
    assert summary.statuses == {"error": 1}
    (row,) = [r for r in read_records(tmp_path) if r.key]
    assert "step_ms_median = -1.0, where vitbench writes a finite number >= 0 (ms)" in row.error.message


def test_a_checkpoint_replaced_under_its_name_runs_its_trial_again(tmp_path):
    """The trial key holds a checkpoint's path, not its content: a file replaced under the same name kept the old
    row as done (a fewshot accuracy of the previous checkpoint). The row records the SHA-256 of what the trial
    read; a resumed sweep runs a trial whose file has changed again, says so, and leaves an unchanged one done."""
    from vitbench.errors import VitbenchWarning
    from vitbench.tasks.fields import INPUT_SHA256

    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    a.write_bytes(b"A" * 10)
    b.write_bytes(b"B" * 10)
    s = fake_study(f"axes: {{model: [ViT-Nano/4], task: [read_checkpoint], checkpoint: [{a}, {b}]}}\n")
    res = tmp_path / "res"
    assert run_study(s, res, executor_options=SPAWN).statuses == {"ok": 2}
    rows = read_records(res)
    assert all(len(r.runner[INPUT_SHA256]["checkpoint"]) == 64 for r in rows)
    assert run_study(s, res, executor_options=SPAWN).skipped_done == 2  # nothing changed: nothing runs
    a.write_bytes(b"C" * 30)  # replaced under its name
    from vitbench.runner import trial_status
    from vitbench.store import Store

    with pytest.warns(VitbenchWarning):  # a dry run shows it as a sweep would take it: to run
        shown = trial_status(s, Store(res))
    assert sorted(shown.values()) == ["ok", "pending"]
    changed = r"checkpoint .*a\.safetensors' has changed since its row was written"
    with pytest.warns(VitbenchWarning, match=changed):
        again = run_study(s, res, executor_options=SPAWN)
    assert again.ran == 1 and again.skipped_done == 1
    latest = load(res).set_index("checkpoint")["checkpoint_bytes"].to_dict()
    assert latest == {str(a): 30.0, str(b): 10.0}  # the newer row supersedes the old one
    assert run_study(s, res, executor_options=SPAWN).skipped_done == 2  # and is done in turn


def test_a_trial_another_sweep_held_and_left_unfinished_is_run_here(tmp_path):
    """Two sweeps on one directory: a trial claimed by the other is skipped here; when the other stops (Ctrl-C, a
    kill) without finishing it, its claim is free again. This sweep said "1 running in another sweep" and exited 0
    with the trial never run; it now asks once more when its own trials are handed out, and runs it."""
    from vitbench.runner import SweepHooks
    from vitbench.store import Store

    s = fake_study("axes: {model: [ViT-Nano/4, ViT-Micro/4], task: [sleep]}\n")
    held, mine = s.trials
    other = Store(tmp_path)  # the other sweep, holding the first trial's claim
    assert other.claim(held.key)

    class OtherStops(SweepHooks):
        def started(self, trial, job):
            if trial is not None and trial.key == mine.key:
                other.release(held.key)  # it stopped while this sweep ran its own trial

    summary = run_study(s, tmp_path, executor_options=SPAWN, hooks=OtherStops())
    assert summary.ran == 2 and summary.skipped_claimed == 0, summary
    assert sorted(st for _, st in statuses(tmp_path)) == ["ok", "ok"]


def _held_at_first_start_cmd(study_path: Path, results: Path, marker: Path) -> list[str]:
    """`_sweep_cmd` whose first trial's process never comes up: the sweep touches `marker` where the local
    executor starts it, then waits there (as it waits for a fork server still starting) until it is stopped."""
    code = textwrap.dedent(f"""
        import pathlib, time
        from vitbench.executors.local import LocalExecutor
        def submit_one(self, job):
            pathlib.Path({str(marker)!r}).touch()
            time.sleep(120)
            raise SystemExit("the sweep was not stopped")
        LocalExecutor.submit_one = submit_one
        from vitbench.cli import main
        main()
    """)
    return [sys.executable, "-c", code, *_sweep_cmd(study_path, results)[3:]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_sweep_stopped_before_its_first_trial_started_says_nothing_was_recorded(tmp_path, sig):
    """Stopped at "starting 0/4" (its calibration or first trial's process not up yet), the sweep said "a trial
    that was running is recorded as interrupted", with no row written (no results file at all)."""
    study_path = _write_study(tmp_path, """
        axes: {model: [ViT-Nano/4, ViT-Micro/4, R-Nano, R-Micro], task: [sleep]}
    """)
    results, marker = tmp_path / "res", tmp_path / "starting"
    p = subprocess.Popen(_held_at_first_start_cmd(study_path, results, marker), env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: marker.exists() or p.poll() is not None, what="the first trial's start")
        p.send_signal(sig)
        assert p.wait(30) == 130, p.stderr.read().decode()[-2000:]
    finally:
        if p.poll() is None:
            p.kill()
    said = " ".join(p.stderr.read().decode().split())
    assert "interrupted: no trial had started; nothing was recorded." in said, said
    assert "recorded as interrupted" not in said, said
    assert not (results / "results.jsonl").exists()


@pytest.mark.timeout(120)
def test_a_sweep_stopped_while_a_trial_runs_names_the_trial_recorded_as_interrupted(tmp_path):
    from vitbench.study import load_study

    gate = tmp_path / "gate"  # never made: the gated trial runs until the sweep stops it
    study_path = _write_study(tmp_path, f"""
        defaults: {{seconds: 0.1, gate: {str(gate)!r}}}
        axes: {{model: [ViT-Nano/4, R-Nano], task: [sleep], behaviour: [ok, gate]}}
    """)
    results = tmp_path / "res"
    p = subprocess.Popen(_sweep_cmd(study_path, results), env=_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: _log_says(results, "behaviour=gate")
                  or p.poll() is not None, what="the gated trial to start")
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 130, p.stderr.read().decode()[-2000:]
    finally:
        if p.poll() is None:
            p.kill()
    said = " ".join(p.stderr.read().decode().split())
    (stopped,) = [r for r in read_records(results) if r.status == "interrupted"]
    (trial,) = [t for t in load_study(str(study_path)).trials if t.key == stopped.key]
    assert "interrupted: 1 trial(s) finished in this run are in " in said, said
    assert f"; recorded as interrupted (run again next time): {trial.label()} (key {trial.key[:8]})." in said, said
