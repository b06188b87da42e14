"""`vitbench sweep` as CI meets it: an exit code that says whether the study succeeded, everything checked before
anything is shown or written (executor options, the results directory), and no study mixed into another's results.

Trials use the test-only task `sleep` (tests/vitbench_testtasks.py) under spawn, so each sweep takes seconds.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
import vitbench_testtasks  # noqa: F401 - registers the `sleep` task in this process

from vitbench.runner import EXIT_FAILED
from vitbench.store import read_records

SPAWN = ("--start-method", "spawn")


def study(tmp_path, behaviours=("ok",), name="fake"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ncalibration: false\ntimeout_s: 30\n" + textwrap.dedent(f"""
        axes:
          model: [ViT-Nano/4]
          task: [sleep]
          behaviour: [{', '.join(behaviours)}]
    """))
    return path


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_failed_trial_makes_the_sweep_fail_unless_accepted(tmp_path, cli):
    s, res = study(tmp_path, ("ok", "crash")), tmp_path / "res"
    r = cli("sweep", s, "--results", res, *SPAWN)
    assert r.exit_code == EXIT_FAILED == 1, r.output
    assert "failed: 1 of 2 trials did not end ok (1 error)" in flat(r.output)
    again = cli("sweep", s, "--results", res, *SPAWN)  # resumed: nothing runs, the study still failed
    assert again.exit_code == 1 and "ran 0 trial" in flat(again.output), again.output
    accepted = cli("sweep", s, "--results", res, "--allow-failures", *SPAWN)
    assert accepted.exit_code == 0 and "accepted: --allow-failures" in flat(accepted.output), accepted.output
    fine = cli("sweep", study(tmp_path, ("ok",), name="fine"), "--results", tmp_path / "fine", *SPAWN)
    assert fine.exit_code == 0, fine.output


@pytest.mark.parametrize("dry_run", [True, False])
def test_bad_executor_options_fail_before_anything_is_shown_or_written(tmp_path, cli, dry_run):
    res = tmp_path / "res"
    r = cli("sweep", study(tmp_path), "--results", res, "-o", "bogus=1", *(["--dry-run"] if dry_run else []))
    assert r.exit_code == 2 and "bogus: Extra inputs are not permitted" in flat(r.output), r.output
    assert r.output.startswith("error:")  # no progress bar, no table before the error
    assert not res.exists()


@pytest.mark.parametrize("flag, option", [(("--no-keep-logs",), "keep_logs=true"),
                                          (("--start-method", "spawn"), "start_method=forkserver")])
def test_a_flag_and_an_executor_option_that_disagree_are_refused(tmp_path, cli, flag, option):
    """`--no-keep-logs -o keep_logs=true` kept the logs: -o won in silence (session 31). Both set one option."""
    res = tmp_path / "res"
    r = cli("sweep", study(tmp_path), "--results", res, *flag, "-o", option)
    assert r.exit_code == 2 and f"{' '.join(flag)} and -o {option} disagree: give one" in flat(r.output), r.output
    assert not res.exists()
    same = cli("sweep", study(tmp_path), "--results", res, "--dry-run", *flag, "-o", option.split("=")[0] + "="
               + ("false" if flag[0] == "--no-keep-logs" else flag[1]))
    assert same.exit_code == 0, same.output


def test_a_study_copy_without_rows_is_said_so_with_what_to_remove(tmp_path, cli):
    """A sweep whose executor could not submit left its study.yaml and no row; another study was then refused as
    if the directory held that study's results (session 31): said so, naming the file to remove."""
    res = tmp_path / "res"
    res.mkdir()
    (res / "study.yaml").write_text("name: first\naxes: {model: [ViT-Nano/4]}\n")
    r = cli("sweep", study(tmp_path, name="second"), "--results", res, "--dry-run", *SPAWN)
    assert r.exit_code == 2 and "holds the study.yaml of study 'first' and no row" in flat(r.output), r.output
    assert "remove that study.yaml (or the directory)" in flat(r.output)
    assert (res / "study.yaml").read_text().startswith("name: first")  # said, never removed


def test_results_path_that_cannot_be_a_directory_is_refused(tmp_path, cli):
    s = study(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for target, expected in ((afile, "is a file; give a directory"),
                             (afile / "sub", "which is a file; give a directory"),
                             ("/dev/null", "is not a directory (a device or a pipe); give a directory")):
        for extra in ([], ["--dry-run"]):
            r = cli("sweep", s, "--results", target, *extra, *SPAWN)
            assert r.exit_code == 2 and expected in flat(r.output), r.output
            assert "Traceback" not in r.output and str(target) in r.output
    assert afile.read_text() == "not a directory"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/sys is Linux's")
def test_results_directory_that_cannot_be_created_is_refused(tmp_path, cli):
    r = cli("sweep", study(tmp_path), "--results", "/sys/vitbench-test-results", *SPAWN)
    assert r.exit_code == 2 and "/sys/vitbench-test-results" in r.output, r.output
    assert "cannot be created" in r.output or "not writable" in r.output


def test_another_study_is_not_run_into_existing_results(tmp_path, cli):
    res = tmp_path / "res"
    assert cli("sweep", study(tmp_path, name="first"), "--results", res, *SPAWN).exit_code == 0
    before = {p.name: p.read_bytes() for p in res.iterdir() if p.is_file()}
    for extra in ([], ["--dry-run"]):
        r = cli("sweep", study(tmp_path, name="second"), "--results", res, *extra, *SPAWN)
        assert r.exit_code == 2, r.output
        assert "holds the results of study 'first', not 'second'" in flat(r.output)
    assert {p.name: p.read_bytes() for p in res.iterdir() if p.is_file()} == before
    assert {r.study for r in read_records(res)} == {"first"}


def test_a_directory_of_files_no_sweep_wrote_is_refused_and_left_as_it_is(tmp_path, cli):
    """A results.jsonl of another tool's (lines, none a vitbench record), or a study.yaml that is no study copy:
    refused, exit 2, the files unchanged (before: a row appended to the user's file; the study.yaml renamed)."""
    for name, text in (("results.jsonl", '{"my": "data"}\n{"more": 1}\n'), ("study.yaml", "my notes: [1, 2]\n")):
        res = tmp_path / name.split(".")[0]
        res.mkdir()
        (res / name).write_text(text)
        for extra in ([], ["--dry-run"]):
            r = cli("sweep", study(tmp_path), "--results", res, *extra, *SPAWN)
            assert r.exit_code == 2 and "give the sweep a directory of its own" in flat(r.output), r.output
        assert [p.name for p in res.iterdir()] == [name] and (res / name).read_text() == text


def test_a_dry_run_says_what_force_and_retry_failed_would_run(tmp_path, cli):
    """`--dry-run --force` listed every done trial as `ok` (what a resumed sweep skips) and said nothing of the
    re-run it stood for: the dry run shows what this command line would run."""
    import json

    s, res = study(tmp_path, ("ok", "crash")), tmp_path / "res"
    assert cli("sweep", s, "--results", res, *SPAWN).exit_code == EXIT_FAILED
    for extra, runs in (([], set()), (["--retry-failed"], {"error"}), (["--force"], {"ok", "error"})):
        r = cli("sweep", s, "--results", res, "--dry-run", "--json", *extra)
        assert r.exit_code == 0, r.output
        assert {t["status"] for t in json.loads(r.stdout) if t["runs"]} == runs, (extra, r.stdout)
        table = flat(cli("sweep", s, "--results", res, "--dry-run", *extra).output)
        assert table.count("runs again") == len(runs) and f"would run {len(runs)} of them" in table, table


def test_a_dry_run_names_a_value_given_twice_as_a_cause_of_merged_combinations(tmp_path, cli):
    """`model: [ViT-Nano/4, ViT-Nano/4]` said "1 combinations merged (fields their task ignores)": no field was
    ignored; the second value was the same trial."""
    s = tmp_path / "d.yaml"
    s.write_text("name: d\ncalibration: false\naxes: {model: [ViT-Nano/4, ViT-Nano/4], task: [sleep]}\n")
    r = cli("sweep", s, "--dry-run", "--results", tmp_path / "res")
    assert r.exit_code == 0 and "1 combinations merged (the same trial: a value given twice" in flat(r.output)


def test_allow_failures_does_not_accept_an_interrupted_trial(tmp_path, cli):
    """--allow-failures accepts trials that ended oom, error or timeout; a trial stopped from outside (kill,
    scancel, a preemption) was accepted too, and a study with a trial never measured exited 0."""
    s, res = study(tmp_path, ("ok", "sigterm", "crash")), tmp_path / "res"
    r = cli("sweep", s, "--results", res, "--allow-failures", *SPAWN)
    assert r.exit_code == EXIT_FAILED, r.output
    out = flat(r.output)
    assert "1 of 3 trials did not end ok (1 error) (accepted: --allow-failures)" in out, out
    assert "failed: 1 trial(s) interrupted" in out and "not interrupted ones" in out, out
