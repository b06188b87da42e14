"""Paths no file system call can take (a name past 255 bytes, a loop of symbolic links, a file where a directory
is needed), given to any command: one bounded line naming it, exit 2, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LONG = "A" * 300  # NAME_MAX is 255 bytes


@pytest.mark.parametrize("argv", [
    ["sweep", LONG, "--dry-run"],
    ["report", LONG],
    ["compare", LONG, LONG + "B"],
    ["fit", LONG],
    ["history", "--db", LONG],
])
def test_a_name_past_the_file_systems_limit_is_bad_input(cli, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    r = cli(*argv)
    assert r.exit_code == 2, r.output[-2000:]
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    assert len(r.output) < 1000
    assert "File name too long" in r.output or "too long" in r.output


def test_a_results_folder_that_is_a_dangling_link_is_said_to_be_one(tmp_path):
    """`--results LINK` where LINK aims at nothing: 'cannot be created: File exists' named no reason a user could
    act on (found by a review); the refusal names the link and where it leads."""
    from vitbench.paths import PathError, make_dir

    (tmp_path / "res").symlink_to(tmp_path / "gone" / "deeper")
    with pytest.raises(PathError, match=r"'.*res' is a symbolic link to '.*gone/deeper', which does not exist"):
        make_dir(tmp_path / "res", "results directory")
    assert not (tmp_path / "gone").exists()


def test_report_out_under_a_symlink_loop_is_bad_input(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loopA").symlink_to("loopB")
    (tmp_path / "loopB").symlink_to("loopA")
    r = cli("report", str(tmp_path / "loopA" / "x"))
    assert r.exit_code == 2 and len(r.output) < 1000, r.output[-2000:]


@pytest.mark.parametrize("argv", [["sweep", "smoke", "--results", ""], ["report", "x", "--out", ""]])
def test_an_empty_path_option_is_refused_before_anything_runs(cli, tmp_path, monkeypatch, argv):
    """'' is the current directory as a path (`--results ""` wrote a store into it): an unset shell variable,
    refused naming the option, nothing written."""
    monkeypatch.chdir(tmp_path)
    r = cli(*argv)
    assert r.exit_code == 2 and f"{argv[-2]} is empty" in r.output, r.output[-2000:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["bench", "ViT-Nano/4", "--backend", "A" * 100_000],
                                  ["bench", "ViT-Nano/4", "--set", "A" * 100_000 + "=1"],
                                  ["report", "x", "--format", "A" * 100_000]])
def test_a_huge_value_is_quoted_short_whichever_check_refuses_it(cli, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    r = cli(*argv)
    assert r.exit_code == 2 and len(r.output) < 1500 and "(100" in r.output, r.output[:2000]


def test_a_sides_failed_sweep_is_quoted_from_its_error_line(tmp_path):
    """ab and bisect quote a side's sweep that exited 2 from its `error:` line on, not its log's last 1500
    characters (which cut the head of a long message: which study, what was wrong)."""
    import types

    from vitbench.compare.sides import Running
    from vitbench.errors import ConfigError

    log = tmp_path / "log"
    log.write_text("progress line\n" * 50 + "error: invalid study /x/study.yaml (2 problems):\n"
                   + "".join(f"  axes.model[{i}]: unknown model {'B' * 50}\n" for i in range(40)))
    side = types.SimpleNamespace(name="current", describe="working tree", study=Path("/x/study.yaml"),
                                 root=Path("/y"))
    run = Running(side, types.SimpleNamespace(wait=lambda: 2), log, tmp_path / "round")
    with pytest.raises(ConfigError) as e:
        run.wait()
    said = str(e.value)
    assert "error: invalid study /x/study.yaml (2 problems)" in said and "progress line" not in said
    assert len(said) < 2000


def test_a_sides_failed_sweep_names_the_study_as_the_user_gave_it_not_the_temporary_copy(tmp_path):
    """A commit's side runs in a temporary copy of its tree, removed when the command ends: the error named
    /tmp/vitbench-ab-XXXX/src/README.md, a path gone by the time it was read (found by a hostile-input review).
    It names the study within that tree as the user gave it."""
    import types

    from vitbench.compare.sides import Running
    from vitbench.errors import ConfigError

    tree = tmp_path / "vitbench-ab-q7xe" / "src"
    log = tmp_path / "log"
    log.write_text(f"error: invalid study {tree}/README.md:3: not valid YAML\n")
    side = types.SimpleNamespace(name="baseline", describe="GOOD = 90cb66f3ebd2", study=tree / "README.md",
                                 root=tree)
    with pytest.raises(ConfigError) as e:
        Running(side, types.SimpleNamespace(wait=lambda: 2), log, tmp_path / "round").wait()
    said = str(e.value)
    assert "of README.md (in that tree) exited 2" in said and "invalid study README.md:3" in said
    assert str(tree) not in said


def test_a_sides_sweep_that_exits_1_before_any_row_is_quoted_from_its_log(tmp_path):
    """Exit 1 is a sweep whose trials were not all ok, a result; exit 1 with no row written is one that ended
    before its trials (a traceback in the side's code): its log's tail is quoted, where reading the empty round had
    said the results were of the wrong format (found by a review). Exit 1 with rows stays a result."""
    import types

    from vitbench.compare.sides import Running
    from vitbench.errors import ConfigError

    log, out = tmp_path / "log", tmp_path / "round"
    out.mkdir()
    log.write_text("Traceback (most recent call last):\n  ...\nNameError: name 'steps' is not defined\n")
    side = types.SimpleNamespace(name="current", describe="working tree", study=Path("/x/study.yaml"),
                                 root=Path("/y"))
    with pytest.raises(ConfigError, match=r"(?s)current \(working tree\).*exited 1.*NameError: name 'steps'"):
        Running(side, types.SimpleNamespace(wait=lambda: 1), log, out).wait()
    (out / "results.jsonl").write_text('{"kind": "bench"}\n')
    Running(side, types.SimpleNamespace(wait=lambda: 1), log, out).wait()  # rows: a result, read as one


def test_replacing_an_earlier_vitbench_checkpoint_is_said_before_anything_runs(tmp_path):
    from test_no_silent_results import write_vitbench_checkpoint

    from vitbench.errors import VitbenchWarning
    from vitbench.transfer.checkpoint import check_replaceable

    path = tmp_path / "my.safetensors"
    check_replaceable(path, "--out")  # nothing there: nothing to say
    write_vitbench_checkpoint(path)
    with pytest.warns(VitbenchWarning, match="holds an earlier vitbench checkpoint: this run replaces it"):
        check_replaceable(path, "--out")


@pytest.mark.parametrize("value", ["1e308", "1001", "-0.1"])
def test_a_weight_decay_no_run_can_train_with_is_refused_up_front(cli, value):
    """A decay past 1e3 zeroes or flips every kernel each step at the paper's LR: refused before training, as
    --lr past 1e3 is (it trained, then stopped as diverged, exit 1)."""
    r = cli("pretrain", "ViT-Nano/4", "--steps", "2", "-b", "4", "--weight-decay", value)
    assert r.exit_code == 2 and "--weight-decay" in r.output, r.output[-2000:]


@pytest.mark.timeout(30)
def test_a_named_pipe_where_a_file_is_hashed_is_refused_at_once_not_waited_on(tmp_path):
    """file_digest (the report's manifest check, a checkpoint's content hash) opened a named pipe blocking: it
    waited for a writer that never came (`vitbench report` hung on a pipe in place of report.md). It is opened
    non-blocking now and refused as no plain file; a plain file still hashes."""
    import hashlib

    from vitbench.paths import content_sha256, file_digest

    pipe = tmp_path / "report.md"
    os.mkfifo(pipe)
    assert file_digest(pipe) is None and content_sha256(pipe) is None
    plain = tmp_path / "a.txt"
    plain.write_bytes(b"abc")
    assert file_digest(plain) == (3, hashlib.sha256(b"abc").hexdigest())
