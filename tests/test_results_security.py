"""A results folder from elsewhere is input, not a place to write through (2026-12-01 security review): links
where a sweep writes (claims, logs, the results file) and a linked default report folder are refused, never
followed; a row nested past Python's recursion limit or longer than any row vitbench writes is skipped with a
warning naming file:line; the slurm executor loads submitit's pickles only from a folder no other user can write
(vitbench.store, vitbench.executors.local, vitbench.outdir, vitbench.executors.slurm)."""

from __future__ import annotations

import json
import os
import types
import warnings
from pathlib import Path

import pytest
import vitbench_testtasks  # noqa: F401 - registers the test-only `sleep` task (a trial in a fraction of a second)
from records import record

from vitbench import rows as rowsmod
from vitbench.paths import PathError
from vitbench.store import CorruptLineWarning, Store, dumps, iter_records, read_records

VICTIM = b"the user's own file\n"


def _rec(i: int = 0, **raw):
    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "infer", "resolution": 32, "batch_size": 2 + i}
    return record("bench", cfg, metrics={"img_per_s": 100.0 + i, "step_ms_median": 20.0}, raw=raw or None,
                  key=f"k{i}", study="t", run_id="run", repeat=0, trial=cfg)


def _victim(tmp_path: Path, name: str = "victim.txt") -> Path:
    v = tmp_path / name
    v.write_bytes(VICTIM)
    return v


def _said(e) -> str:
    return " ".join(str(e).split())


# ---- 1. links where a sweep writes -------------------------------------------------------------------------
def test_a_claim_that_is_a_link_is_refused_and_what_it_points_at_is_untouched(tmp_path):
    """claims/<key>.lock -> a user's file: the claim truncated it and wrote 'host pid' into it."""
    victim, res = _victim(tmp_path), tmp_path / "res"
    (res / "claims").mkdir(parents=True)
    (res / "claims" / "k1.lock").symlink_to(victim)
    with Store(res) as st, pytest.raises(PathError) as e:
        st.claim("k1")
    said = _said(e.value)
    assert "k1.lock" in said and "is a symbolic link" in said and "remove the link" in said
    assert victim.read_bytes() == VICTIM


def test_a_claims_directory_that_is_a_link_is_refused(tmp_path):
    elsewhere, res = tmp_path / "elsewhere", tmp_path / "res"
    elsewhere.mkdir()
    (elsewhere / "k1.lock").write_bytes(VICTIM)
    res.mkdir()
    (res / "claims").symlink_to(elsewhere)
    with Store(res) as st, pytest.raises(PathError) as e:
        st.claim("k1")
    assert f"'{res / 'claims'}' is a symbolic link" in _said(e.value)
    assert (elsewhere / "k1.lock").read_bytes() == VICTIM


def test_a_results_file_that_is_a_link_is_refused_not_appended_through(tmp_path):
    victim, res = _victim(tmp_path), tmp_path / "res"
    res.mkdir()
    (res / "results.jsonl").symlink_to(victim)
    with Store(res) as st, pytest.raises(PathError) as e:
        st.append(_rec())
    said = _said(e.value)
    assert "results.jsonl" in said and "is a symbolic link" in said and "give the folder it is in" in said
    assert victim.read_bytes() == VICTIM
    # a results folder that is itself a link (the user named it) is written as before
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    with Store(tmp_path / "linked") as st:
        st.append(_rec())
    assert len(read_records(tmp_path / "real")) == 1


def test_a_trial_log_that_is_a_link_is_refused_before_the_trial_runs(tmp_path):
    """logs/<key>.log -> a user's file: the trial opened it with O_TRUNC and emptied it."""
    from vitbench.executors import Job
    from vitbench.executors.local import LocalExecutor

    victim, res = _victim(tmp_path), tmp_path / "res"
    (res / "logs").mkdir(parents=True)
    (res / "logs" / "k1.log").symlink_to(victim)
    job = Job(key="k1", config={"model": "ViT-Nano/4", "backend": "torch", "task": "sleep", "device": "cpu",
                                "resolution": 32, "batch_size": 2, "seed": 0, "seconds": 0.01, "behaviour": "ok"},
              repeat=0, study="g", study_sha="0" * 64, run_id="run", timeout_s=60,
              task_module="vitbench_testtasks")
    ex = LocalExecutor(res, start_method="spawn", preload=())
    h = None
    try:
        with pytest.raises(PathError) as e:
            h = ex.submit_one(job)
        assert "k1.log" in str(e.value) and "is a symbolic link" in _said(e.value)
    finally:
        if h is not None:  # (the old code started the trial)
            h.proc.join(60)
            ex.cancel([(job, h)])
        ex.close()
    assert victim.read_bytes() == VICTIM


def test_a_sweep_into_a_folder_with_a_linked_log_or_claim_stops_before_any_trial(tmp_path, cli):
    """The reviewer's case: a shipped results folder whose claim and log of a trial (keys are deterministic) link
    to the user's files: exit 2 naming the link, before any trial runs; the files are untouched."""
    from vitbench.study import parse_study

    text = "name: sec\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [sleep]}\n"
    (tmp_path / "s.yaml").write_text(text)
    (key,) = [t.key for t in parse_study(text, "s.yaml").trials]
    for sub, suffix in (("logs", ".log"), ("claims", ".lock")):
        res, victim = tmp_path / f"res-{sub}", _victim(tmp_path, f"victim-{sub}.txt")
        (res / sub).mkdir(parents=True)
        (res / sub / f"{key}{suffix}").symlink_to(victim)
        r = cli("sweep", tmp_path / "s.yaml", "--results", res)
        said = " ".join(r.output.split())
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert f"{key}{suffix}" in said and "is a symbolic link" in said, r.output
        assert victim.read_bytes() == VICTIM
        assert not (res / "results.jsonl").exists()  # no trial ran


# ---- 2. a linked default report folder -----------------------------------------------------------------------
def test_a_default_report_folder_that_is_a_link_is_refused(tmp_path, cli):
    from test_report import make_results

    res, victim = tmp_path / "res", tmp_path / "victimdir"
    make_results(res)
    victim.mkdir()
    (res / "report").symlink_to(victim)
    r = cli("report", res, "--format", "md", "--no-plots")
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "is a symbolic link" in said and "remove the link" in said and "--out" in said, r.output
    assert list(victim.iterdir()) == []
    # a link the user names as --out (outside a results folder) is theirs to follow
    (tmp_path / "mine").symlink_to(victim)
    r = cli("report", res, "--out", tmp_path / "mine", "--format", "md", "--no-plots")
    assert r.exit_code == 0 and (victim / "report.md").is_file(), r.output


# ---- 3. a row nested past the recursion limit ------------------------------------------------------------------
def _deep_line(levels: int) -> str:
    d = _rec(1).to_dict()
    d["raw"] = "@DEEP@"
    return json.dumps(d).replace('"@DEEP@"', '{"a":' * levels + "1" + "}" * levels)


def test_a_row_nested_past_the_recursion_limit_is_skipped_with_its_file_and_line(tmp_path, cli):
    """800 levels parse (json's limit is ~1000); read_records' interning recursed and compare ended in a
    RecursionError traceback."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.jsonl").write_bytes(dumps(_rec(0)) + dumps(_rec(1)))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.jsonl").write_bytes(dumps(_rec(0)) + (_deep_line(800) + "\n").encode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = read_records(tmp_path / "b")
    assert [r.key for r in rows] == ["k0"]
    said = [str(w.message) for w in caught if issubclass(w.category, CorruptLineWarning)]
    assert len(said) == 1 and f"{tmp_path / 'b' / 'results.jsonl'}:2" in said[0] and "nested" in said[0], said
    r = cli("compare", tmp_path / "a", tmp_path / "b")
    assert "Traceback" not in r.output and "RecursionError" not in r.output and r.exit_code in (0, 1, 2), r.output


# ---- 4. a line longer than any row vitbench writes --------------------------------------------------------------
def test_a_line_longer_than_the_bound_is_skipped_read_no_further(tmp_path, monkeypatch):
    """Each reader (iter_records: report, compare; Store.refresh: the sweep) skips a line longer than
    MAX_LINE_BYTES with a warning naming file:line and the bound, and keeps the rows after it; the bound is
    lowered here so that the test holds kilobytes, not the 64 MiB real one."""
    monkeypatch.setattr(rowsmod, "MAX_LINE_BYTES", 4096)
    f = tmp_path / "results.jsonl"
    f.write_bytes(dumps(_rec(0)) + dumps(_rec(1, blob="x" * 10_000)) + dumps(_rec(2))
                  + dumps(_rec(3, blob="y" * 9_000)).rstrip(b"\n"))  # the last one over-long and unterminated
    for read in (lambda: [r.key for r in iter_records(tmp_path)],
                 lambda: [r.key for r in Store(tmp_path).refresh()]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert read() == ["k0", "k2"]
        said = [str(w.message) for w in caught if issubclass(w.category, CorruptLineWarning)]
        assert len(said) == 2 and f"{f}:2" in said[0] and f"{f}:4" in said[1], said
        assert "4096 bytes" in said[0] and "longer than any row vitbench writes" in said[0], said


def test_the_line_bound_holds_the_largest_rows_vitbench_writes():
    """The bound's stated reason: a serve row at max_probes (100 runs of LoadGen's two logs, 38 KB a run
    measured) and a timing row at MAX_STEPS per-step times fit 16 times over."""
    from vitbench.backends.workload import MAX_STEPS

    serve_row = 100 * 38_000
    steps_row = MAX_STEPS * 25
    assert rowsmod.MAX_LINE_BYTES >= 16 * max(serve_row, steps_row)


# ---- 5. submitit's pickles only from a folder no other user can write -------------------------------------------
def test_a_slurm_job_folder_others_can_write_is_refused(tmp_path):
    pytest.importorskip("submitit")
    from vitbench.executors.slurm import SlurmExecutor

    res = tmp_path / "res"
    (res / "slurm").mkdir(parents=True)
    os.chmod(res / "slurm", 0o777)
    with pytest.raises(PathError) as e:
        SlurmExecutor(res, cluster="local")
    said = _said(e.value)
    assert "slurm" in said and "writable by every user" in said and "pickles" in said and "chmod o-w" in said
    os.chmod(res / "slurm", 0o755)
    SlurmExecutor(res, cluster="local")  # the folder fixed: used


def test_a_slurm_job_folder_made_writable_meanwhile_is_not_unpickled_from(tmp_path):
    pytest.importorskip("submitit")
    from records import job

    from vitbench.executors.slurm import SlurmExecutor

    res = tmp_path / "res"
    (res / "slurm").mkdir(parents=True)
    ex = SlurmExecutor(res, cluster="local")
    os.chmod(res / "slurm", 0o777)  # made writable while the sweep runs: the job's result is not unpickled
    unpickled = []
    pkl = res / "slurm" / "1_0_result.pkl"
    pkl.write_bytes(b"not read")
    paths = types.SimpleNamespace(result_pickle=pkl, folder=res / "slurm")
    sjob = types.SimpleNamespace(job_id="1", paths=paths, result=lambda: unpickled.append(1))
    h = types.SimpleNamespace(sjob=sjob, lost=False, t0=0.0, queue_state=None)
    with pytest.raises(PathError, match="writable by every user"):
        ex.collect(job({"model": "ViT-Nano/4", "task": "sleep"}, key="k1"), h)
    assert unpickled == []
