"""The sweep's state: which row of a trial counts (record.supersedes, Store.refresh across shards, runner._latest),
what a resumed sweep runs and what its summary says, pinned where a mutation review found the suite silent.

Each test is one behaviour on hand-made rows whose right answer is known (end times written out, never measured);
the sweeps run on an in-process executor that measures nothing (`Scripted`), so no trial process is started.
"""

from __future__ import annotations

import json
import textwrap
import warnings

import pytest
import vitbench_testtasks  # noqa: F401 - registers the test-only tasks (sleep, read_checkpoint) in this process
from records import record

from vitbench.errors import VitbenchWarning
from vitbench.executors import Executor, Outcome
from vitbench.executors.base import failure
from vitbench.job import Job, Role
from vitbench.record import Record, Status
from vitbench.runner import SweepHooks, SweepSummary, failed_trials, inputs_changed, plan, run_study, trial_status
from vitbench.store import CorruptLineWarning, Store, read_records
from vitbench.study import parse_study
from vitbench.tidy import select

T1, T2, T3 = "2026-11-29T10:00:01.000+00:00", "2026-11-29T10:00:02.000+00:00", "2026-11-29T10:00:03.000+00:00"


def study(body: str, name: str = "pin", calibration: bool = False):
    return parse_study(f"name: {name}\ncalibration: {str(calibration).lower()}\n" + textwrap.dedent(body),
                       "pin.yaml")


def sleep_study(*models: str):
    return study(f"axes: {{model: [{', '.join(models)}], task: [sleep]}}\n")


def row(trial, status: str = "ok", finished_at: str = T1, study_name: str = "pin", **fields) -> Record:
    """A trial's row as a sweep writes it (a bench row: what the `sleep` task measures)."""
    cfg = dict(trial.config)
    metrics = {"img_per_s": 100.0, "step_ms_median": 20.0} if status == "ok" else {}
    return record("bench", cfg, status=status, metrics=metrics, key=trial.key, study=study_name, run_id="run",
                  repeat=trial.repeat, trial=cfg, finished_at=finished_at, started_at=finished_at, **fields)


class Scripted(Executor):
    """Runs nothing: each job's outcome is the status `statuses` gives its key (calibrations: `calibration`),
    recorded as a real executor records it (an ok bench row, or the failure row of vitbench.executors.base)."""

    name = "scripted"
    max_parallel = 1  # one job at a time, as the local executor's default: the jobs are handed out as they end

    def __init__(self, statuses: dict[str, str] | None = None, calibration: str = "ok"):
        super().__init__(None)
        self.statuses, self.calibration, self.ran = statuses or {}, calibration, []

    def submit_one(self, job: Job) -> Job:
        return job

    def poll(self, handles):
        return list(handles)

    def collect(self, job: Job, handle) -> Outcome:
        self.ran.append(job.key)
        status = self.calibration if job.role is Role.CALIBRATION else self.statuses.get(job.key, "ok")
        if status == "ok" and job.role is Role.CALIBRATION:
            rec = Record.measured(job.task, dict(job.config), metrics={"matmul_tflops_per_s": 0.05},
                                  raw={"matmul_tflops_per_s": [0.05, 0.05]}).for_job(job)
        elif status == "ok":
            rec = Record.measured("bench", dict(job.config), metrics={"img_per_s": 100.0, "step_ms_median": 20.0,
                                                                      "batch_size_achieved": 1}).for_job(job)
        else:
            rec = failure(job, Status(status), "Scripted", f"scripted {status}")
        return Outcome(rec)

    def cancel(self, running):
        return [Outcome(failure(job, Status.INTERRUPTED, "Scripted", "cancelled")) for job, _ in running]


# -- 1. Store.refresh across shards --------------------------------------------------------------------------

def test_rows_of_one_directory_supersede_each_other_by_end_time_across_shards(tmp_path):
    """The main file is read before a worker's shard, but file order does not decide which row is a trial's state:
    its latest terminal row by end time does (record.supersedes). `a`: ok at T2 in the main file, a timeout at T1
    in the shard -> ok (done, and done for --retry-failed). `c`: ok at T1 in the main file, a timeout at T2 in the
    shard -> timeout (done, but --retry-failed runs it again)."""
    s = sleep_study("ViT-Nano/4", "ViT-Micro/4")
    a, c = s.trials
    with Store(tmp_path) as main, Store(tmp_path, shard="w-1") as shard:
        main.append(row(a, "ok", T2))
        main.append(row(c, "ok", T1))
        shard.append(row(a, "timeout", T1))
        shard.append(row(c, "timeout", T2))
    st = Store(tmp_path)
    assert st.outcomes() == {a.key: (True, T2), c.key: (True, T2)}
    assert st.done_keys() == {a.key, c.key}
    assert st.done_keys(only_ok=True) == {a.key}  # what --retry-failed leaves alone
    assert plan(s, st, retry_failed=True) == [c]


def test_rows_read_by_a_later_refresh_supersede_by_end_time_too(tmp_path):
    """The store is read incrementally (a sweep refreshes before every trial): a shard row read by a later refresh
    with an earlier end time than the state already read does not replace it, one with a later end time does."""
    s = sleep_study("ViT-Nano/4")
    (a,) = s.trials
    st = Store(tmp_path)
    st.append(row(a, "ok", T2))
    assert st.done_keys(only_ok=True) == {a.key}
    with Store(tmp_path, shard="w-1") as shard:
        shard.append(row(a, "error", T1))  # an older failure arriving late (a slow worker's shard)
        assert st.done_keys(only_ok=True) == {a.key} and st.outcome(a.key) == (True, T2)
        shard.append(row(a, "error", T3))  # a newer failure: the trial failed since it was ok
    assert st.done_keys(only_ok=True) == set() and st.outcome(a.key) == (True, T3)
    assert st.done_keys() == {a.key}


def test_an_interrupted_row_after_an_ok_one_in_another_file_leaves_the_trial_ok_and_done(tmp_path):
    """ok in a worker's shard, then a later 'interrupted' (and 'skipped') row of a --force rerun in the main file:
    rows without an outcome never supersede one with (record.supersedes), so the trial stays done and ok for the
    resume, --retry-failed, the report's select and the exit code."""
    s = sleep_study("ViT-Nano/4")
    (a,) = s.trials
    with Store(tmp_path, shard="w-1") as shard:
        shard.append(row(a, "ok", T1))
    with Store(tmp_path) as main:
        main.append(row(a, "interrupted", T2))
        main.append(row(a, "skipped", T3))
    st = Store(tmp_path)
    assert st.done_keys(only_ok=True) == {a.key} and st.outcome(a.key) == (True, T1)
    assert plan(s, st) == [] and plan(s, st, retry_failed=True) == []
    assert trial_status(s, st) == {a.key: "ok"}
    assert failed_trials(s, st) == {}
    assert [(r.key, r.status.value) for r in select(st.refresh(), kinds="all")] == [(a.key, "ok")]  # the report's


# -- 2. failed_trials ---------------------------------------------------------------------------------------

def test_failed_trials_leave_out_interrupted_trials_and_keep_a_failure_an_interruption_followed(tmp_path):
    """failed_trials (the sweep's exit code) lists trials whose latest outcome is not ok. `a` only ever
    interrupted: pending (a resumed sweep runs it), not failed. `b` ok then interrupted: ok. `c` timed out, then
    its retry was interrupted: still failed, as a timeout (the interruption measured nothing)."""
    s = sleep_study("ViT-Nano/4", "ViT-Micro/4", "R-Nano")
    a, b, c = s.trials
    with Store(tmp_path) as st:
        st.append(row(a, "interrupted", T1))
        st.append(row(b, "ok", T1))
        st.append(row(b, "interrupted", T2))
        st.append(row(c, "timeout", T1))
        st.append(row(c, "interrupted", T2))
    st = Store(tmp_path)
    assert failed_trials(s, st) == {c.key: Status.TIMEOUT}
    assert trial_status(s, st) == {a.key: "interrupted", b.key: "ok", c.key: "timeout"}
    assert plan(s, st) == [a]


# -- 3. SweepSummary.succeeded ------------------------------------------------------------------------------

def test_a_sweep_whose_calibration_or_a_trial_was_interrupted_did_not_succeed(tmp_path):
    """succeeded: every trial ok, none interrupted, and every calibration of this run ok. An interrupted trial
    has no failed_trials entry (it is pending), and an interrupted calibration is a failed one all the same."""
    def summary(**kw):
        return SweepSummary(run_id="r", results_dir=tmp_path, **kw)

    assert summary(statuses={"ok": 2}, calibrations=1).succeeded
    assert not summary(statuses={"ok": 2}, calibrations=1, calibrations_failed=1).succeeded
    assert not summary(statuses={"ok": 1, "interrupted": 1}).succeeded
    assert not summary(statuses={"ok": 1}, failed_trials={"k": Status.OOM}).succeeded


@pytest.mark.parametrize("calibration", ["interrupted", "error"])
def test_a_calibration_that_did_not_end_ok_fails_the_sweep(tmp_path, calibration):
    """A run's calibration row interrupted or failed: its trials are all ok, but `compare --normalize` has no
    machine speed for this run, so the sweep did not succeed (exit 1 in the CLI)."""
    s = study("axes: {model: [ViT-Nano/4], task: [infer], backend: [torch], device: [cpu]}\n", calibration=True)
    summary = run_study(s, tmp_path, executor=Scripted(calibration=calibration))
    assert summary.calibrations == 1 and summary.calibrations_failed == 1
    assert summary.statuses == {"ok": 1} and summary.failed_trials == {}
    assert not summary.succeeded
    assert run_study(s, tmp_path / "ok", executor=Scripted()).succeeded  # the same sweep, calibrated: it did


# -- 4. skipped_claimed vs skipped_done ---------------------------------------------------------------------

def test_a_trial_another_sweep_holds_is_counted_claimed_and_one_done_before_is_counted_done(tmp_path):
    """Three trials: `done` has an ok row already (skipped_done), `held` is claimed by another live sweep for the
    whole run (skipped_claimed, not run, not done), `free` runs here."""
    s = sleep_study("ViT-Nano/4", "ViT-Micro/4", "R-Nano")
    done, held, free = s.trials
    with Store(tmp_path) as st:
        st.append(row(done, "ok", T1))
    other = Store(tmp_path)  # another sweep, in this process: flock conflicts between open files all the same
    assert other.claim(held.key)
    try:
        ex = Scripted()
        summary = run_study(s, tmp_path, executor=ex)
    finally:
        other.close()
    assert ex.ran == [free.key]
    assert (summary.skipped_done, summary.skipped_claimed, summary.ran) == (1, 1, 1), summary
    assert summary.failed_trials == {}  # held has no row: running elsewhere, not failed


def test_a_trial_the_other_sweep_finished_while_this_one_waited_is_counted_done_not_claimed(tmp_path):
    """The other sweep holds `held` at the first pass, then writes its row and lets go while this sweep runs its
    own trial: at the second pass the trial is done elsewhere (skipped_done), not claimed, and not run twice."""
    s = sleep_study("ViT-Nano/4", "ViT-Micro/4")
    held, mine = s.trials
    other = Store(tmp_path)
    assert other.claim(held.key)

    class OtherFinishes(SweepHooks):
        def started(self, trial, job):
            if trial is not None and trial.key == mine.key:
                other.append(row(held, "ok", T1))
                other.release(held.key)

    ex = Scripted()
    try:
        summary = run_study(s, tmp_path, executor=ex, hooks=OtherFinishes())
    finally:
        other.close()
    assert ex.ran == [mine.key]
    assert (summary.skipped_done, summary.skipped_claimed, summary.ran) == (1, 0, 1), summary
    assert sorted(r.key for r in read_records(tmp_path) if r.key) == sorted([held.key, mine.key])


# -- 5. a results file holding only a torn row --------------------------------------------------------------

def _torn(tmp_path, trial, cut: int) -> None:
    line = json.dumps(row(trial, "ok", T1).to_dict())
    (tmp_path / "results.jsonl").write_bytes(line[:len(line) - cut].encode())  # no newline: a killed writer's


def test_a_results_file_holding_only_a_torn_row_is_resumed_and_its_trial_run(tmp_path):
    """A sweep killed in its first write leaves a results file holding one torn line and nothing else: it is no
    sign of another tool's file (the sweep is not refused), the trial is not done, it runs, and its new row is
    written after the torn line is ended (readable, not glued to the fragment)."""
    s = sleep_study("ViT-Nano/4")
    (a,) = s.trials
    _torn(tmp_path, a, cut=25)
    ex = Scripted()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptLineWarning)  # the ended fragment, read after the new row
        summary = run_study(s, tmp_path, executor=ex)
    assert ex.ran == [a.key] and summary.ran == 1 and summary.skipped_done == 0
    with pytest.warns(CorruptLineWarning, match=r"results.jsonl:1"):
        rows = read_records(tmp_path)
    assert [(r.key, r.status.value) for r in rows] == [(a.key, "ok")]
    assert summary.succeeded


def test_an_unterminated_last_row_is_done_once_no_writer_holds_the_file(tmp_path):
    """A last line without its newline is a row still being written while a writer holds the file (each appends
    under LOCK_EX): the sweep's reader waits for it, so the trial is not done. Once no writer holds it, a whole
    row is the file's last (an editor's save without the final newline): the report read it as ok while the sweep
    took the trial as pending and ran it again. Both now read it as done."""
    import fcntl

    s = sleep_study("ViT-Nano/4")
    (a,) = s.trials
    _torn(tmp_path, a, cut=0)  # the whole JSON object, only the newline missing
    st = Store(tmp_path)
    with open(tmp_path / "results.jsonl", "rb") as writer:
        fcntl.flock(writer.fileno(), fcntl.LOCK_EX)  # a writer appending it
        assert st.done_keys() == set() and plan(s, st) == [a]
        fcntl.flock(writer.fileno(), fcntl.LOCK_UN)
    assert st.done_keys() == {a.key} and plan(s, st) == []
    assert [r.key for r in read_records(tmp_path)] == [a.key]  # as the report reads it
    # a part of a row (no JSON yet) is waited for, whoever holds the file: a worker on another node may be
    # writing it, its lock unseen through a network file system
    _torn(tmp_path, a, cut=25)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptLineWarning)  # not read as a torn line either
        assert Store(tmp_path).done_keys() == set()


# -- 6. inputs_changed after an interrupted rerun ---------------------------------------------------------

def test_a_changed_checkpoint_still_reruns_after_its_rerun_was_interrupted(tmp_path):
    """A trial's checkpoint was replaced under its name; the rerun that followed was interrupted (its row has no
    digest: it measured nothing). The trial's last outcome is still the old checkpoint's, so it is still changed,
    shown pending, and run again (not skipped on the interrupted row)."""
    from vitbench.tasks import get_task
    from vitbench.tasks.fields import INPUT_SHA256
    from vitbench.trial import input_sha256

    ckpt = tmp_path / "a.safetensors"
    ckpt.write_bytes(b"A" * 10)
    s = study(f"axes: {{model: [ViT-Nano/4], task: [read_checkpoint], checkpoint: [{ckpt}]}}\n")
    (t,) = s.trials
    old = input_sha256(get_task("read_checkpoint"), t.config)
    res = tmp_path / "res"
    ok = record("read_checkpoint", dict(t.config), metrics={"checkpoint_bytes": 10.0}, key=t.key, study="pin",
                run_id="run", repeat=0, trial=dict(t.config), finished_at=T1, runner={INPUT_SHA256: old})
    with Store(res) as st:
        st.append(ok)
        assert inputs_changed(s, st) == {} and plan(s, st) == []
        ckpt.write_bytes(b"C" * 30)  # replaced under its name
        st.append(record("read_checkpoint", dict(t.config), status="interrupted", key=t.key, study="pin",
                         run_id="run2", repeat=0, trial=dict(t.config), finished_at=T2))
        with pytest.warns(VitbenchWarning, match="has changed since its row was written"):
            changed = inputs_changed(s, st)
        assert list(changed) == [t.key]
        with pytest.warns(VitbenchWarning):
            assert plan(s, st) == [t]
        with pytest.warns(VitbenchWarning):
            assert trial_status(s, st) == {t.key: "pending"}


# -- 7. rows ending at the same time -------------------------------------------------------------------------

def test_of_two_rows_ending_at_the_same_time_the_later_in_the_file_is_the_trial_s_state(tmp_path):
    """A timeout then an ok row with one end time (a millisecond's resolution): record.supersedes takes the row
    read later, and runner._latest (trial_status, inputs_changed) must agree with it, or the dry run shows a
    timeout for a trial the sweep skips as ok. `b`: ok then timeout -> timeout, everywhere."""
    s = sleep_study("ViT-Nano/4", "ViT-Micro/4")
    a, b = s.trials
    with Store(tmp_path) as st:
        st.append(row(a, "timeout", T1))
        st.append(row(a, "ok", T1))
        st.append(row(b, "ok", T1))
        st.append(row(b, "timeout", T1))
    st = Store(tmp_path)
    assert st.done_keys(only_ok=True) == {a.key}
    assert trial_status(s, st) == {a.key: "ok", b.key: "timeout"}
    assert failed_trials(s, st) == {b.key: Status.TIMEOUT}
