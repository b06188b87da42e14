"""The report writes only files it wrote itself and can prove it (issue 50): the folder's manifest holds each
file's hash; a file of anyone else's is never overwritten, moved or removed, a folder holding such files is refused
unless allowed, and a dead report's staging folder is cleaned up (vitbench.outdir)."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys

import pytest
from test_report import make_results

from vitbench.errors import ConfigError
from vitbench.report import build_report
from vitbench.outdir import LOCK, STAGING
from vitbench.report.build import REPORT

MANIFEST = REPORT.manifest


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    path = tmp_path_factory.mktemp("outdir") / "res"
    make_results(path)
    return path


def _report(res, out, **kw):
    return build_report(res, out, formats=("md", "csv"), plots=False, **kw)


def _snapshot(d):
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


def test_a_users_report_md_is_never_overwritten_even_when_other_files_are_allowed(res, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("my notes")
    (out / "trials.csv").write_text("my,table\n")
    for allow in (False, True):
        with pytest.raises(ConfigError, match="report.md") as e:
            _report(res, out, allow_other_files=allow)
        assert "nothing was written" in str(e.value)
        assert _snapshot(out) == {"report.md": b"my notes", "trials.csv": b"my,table\n"}
        assert sorted(p.name for p in out.iterdir()) == ["report.md", "trials.csv"]  # no manifest, no staging


def test_other_files_refuse_the_folder_unless_allowed_and_are_left_alone(res, tmp_path, cli):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = cli("report", res, "--out", out, "--format", "md", "--no-plots")
    assert r.exit_code == 2 and "notes.txt" in r.output and "--allow-other-files" in r.output, r.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    r = cli("report", res, "--out", out, "--format", "md", "--no-plots", "--allow-other-files")
    assert r.exit_code == 0, r.output
    assert (out / "notes.txt").read_text() == "mine" and (out / "report.md").is_file()
    manifest = json.loads((out / MANIFEST).read_text())
    assert set(manifest["files"]) == {"report.md"} and len(manifest["files"]["report.md"]["sha256"]) == 64


def test_a_report_file_changed_since_becomes_the_users(res, tmp_path):
    out = tmp_path / "out"
    _report(res, out)
    _report(res, out)  # its own files: rewritten without a word
    (out / "throughput.csv").write_text("edited by hand\n")
    with pytest.raises(ConfigError, match="throughput.csv"):
        _report(res, out)
    assert (out / "throughput.csv").read_text() == "edited by hand\n"
    with pytest.raises(ConfigError, match="throughput.csv"):
        _report(res, out, allow_other_files=True)
    (out / "throughput.csv").unlink()
    build_report(res, out, formats=("md",), plots=False)  # no csv now: its earlier csv files go, proven ones only
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "report.md"]


def test_a_forged_manifest_proves_nothing(res, tmp_path):
    """A manifest naming a store file, a path outside, or a file with another hash removes nothing."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text("{}\n")
    (tmp_path / "outside.md").write_text("outside")
    (out / "status.csv").write_text("user's")
    files = {n: {"size": 1, "sha256": "0" * 64} for n in ("results.jsonl", "../outside.md", "status.csv")}
    (out / MANIFEST).write_text(json.dumps({"format": "vitbench report manifest 1", "files": files}))
    with pytest.raises(ConfigError, match="results.jsonl"):
        _report(res, out)
    with pytest.raises(ConfigError, match="status.csv"):  # its name is the report's, its bytes are not
        _report(res, out, allow_other_files=True)
    (out / "status.csv").unlink()
    _report(res, out, allow_other_files=True)
    assert (out / "results.jsonl").read_text() == "{}\n" and (tmp_path / "outside.md").read_text() == "outside"


def test_an_older_vitbench_manifest_of_names_proves_nothing(res, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("from an older vitbench, or the user's: nothing says which")
    (out / MANIFEST).write_text(json.dumps(["report.md"]))
    with pytest.raises(ConfigError, match="report.md"):
        _report(res, out)
    assert (out / "report.md").read_text().startswith("from an older")


def test_a_link_named_like_a_report_file_is_not_followed(res, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "precious.md"
    target.write_text("precious")
    (out / "report.md").symlink_to(target)
    with pytest.raises(ConfigError, match="report.md"):
        _report(res, out, allow_other_files=True)
    assert target.read_text() == "precious" and (out / "report.md").is_symlink()


def test_the_store_folder_as_out_is_refused_unless_allowed_and_its_files_are_kept(tmp_path):
    make_results(tmp_path / "res")
    before = (tmp_path / "res" / "results.jsonl").read_bytes()
    with pytest.raises(ConfigError, match="results.jsonl"):
        _report(tmp_path / "res", tmp_path / "res")
    _report(tmp_path / "res", tmp_path / "res", allow_other_files=True)
    _report(tmp_path / "res", tmp_path / "res", allow_other_files=True)
    assert (tmp_path / "res" / "results.jsonl").read_bytes() == before


def test_a_dead_reports_staging_folder_is_removed_a_live_ones_kept(res, tmp_path):
    out = tmp_path / "out"
    _report(res, out)
    dead = out / f"{STAGING}dead"
    dead.mkdir()
    (dead / LOCK).touch()
    (dead / "report.md").write_text("half")
    live = out / f"{STAGING}live"
    live.mkdir()
    (live / LOCK).touch()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1]); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)",
                               str(live / LOCK)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        _report(res, out)
        assert not dead.exists() and live.is_dir()  # another report still running there
        with open(live / LOCK) as f:  # (the test's own check that the holder kept it)
            with pytest.raises(OSError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        holder.kill()
        holder.wait()
    _report(res, out)
    assert not live.exists() and not [p for p in out.iterdir() if p.name.startswith(STAGING)]


def test_a_report_killed_while_it_moves_its_files_in_leaves_a_folder_the_next_one_replaces(res, tmp_path,
                                                                                          monkeypatch):
    """A kill between the first file moved in and the manifest left a mix of two reports whose new files no
    manifest proved: every later report into the folder was refused, --allow-other-files too (found by killing
    `vitbench report` at each move). The manifest moved in first proves both."""
    import shutil

    from vitbench import outdir
    from vitbench.errors import VitbenchWarning

    out, other = tmp_path / "out", tmp_path / "res2"
    _report(res, out)
    before = _snapshot(out)
    shutil.copytree(res, other)
    rows = (other / "results.jsonl").read_text().splitlines(keepends=True)
    (other / "results.jsonl").write_text("".join(rows[:-1]))  # another report: other bytes in every table
    moved, real = [], outdir._move

    def killed_after_two(src, dst, replace):
        if len(moved) == 3:  # the manifest, then two report files: then the process is gone
            raise KeyboardInterrupt
        moved.append(dst.name)
        real(src, dst, replace)

    monkeypatch.setattr(outdir, "_move", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        _report(other, out)
    monkeypatch.setattr(outdir, "_move", real)
    now = _snapshot(out)
    assert moved[0] == MANIFEST and any(now[n] != before[n] for n in moved[1:])  # a mix of two reports
    with pytest.warns(VitbenchWarning, match="stopped while it moved its files in"):
        _report(other, out)  # not refused: every file there is provably the report's
    again = tmp_path / "again"
    _report(other, again)

    def content(d):  # the files but the manifest, report.md without its time of generation
        return {n: b"".join(line for line in b.splitlines(keepends=True) if not line.startswith(b"- generated "))
                for n, b in _snapshot(d).items() if n != MANIFEST}

    assert content(out) == content(again)  # wholly the new report
    assert "pending" not in json.loads((out / MANIFEST).read_text())


def test_a_reports_earlier_files_it_no_longer_writes_are_removed_and_said(res, tmp_path, cli):
    """A report with fewer formats removes its earlier run's other files (a stale csv beside a new md would
    disagree with it); it removed 15 files without a word, which looked like data lost: it names them now."""
    out = tmp_path / "rep"
    first = _report(res, out)
    assert {p.suffix for p in first.files} == {".md", ".csv"}
    again = build_report(res, out, formats=("md",), plots=False)
    gone = sorted(p.name for p in first.files if p.suffix == ".csv")
    assert not any((out / n).exists() for n in gone)
    note = next(w for w in again.warnings if w.startswith("removed"))
    assert f"removed {len(gone)} file(s) the previous report wrote there and this one does not" in note, note
    assert gone[0] in note
    r = cli("report", res, "--out", out, "--format", "md", "--no-plots")
    assert r.exit_code == 0 and "removed" not in r.stderr, r.output  # nothing more to remove: nothing said
    r = cli("report", res, "--out", out, "--format", "md,csv", "--no-plots")
    r = cli("report", res, "--out", out, "--format", "md", "--no-plots")
    assert r.exit_code == 0 and "removed" in r.stderr and gone[0] in r.stderr, r.output


def _full_disk_in_staging(monkeypatch):
    """A file written into a writer's staging folder fails half way as a full disk does: a write to an open file
    (pyarrow's, matplotlib's, write_bytes') carries no file name."""
    import errno
    from pathlib import Path

    real = Path.write_bytes

    def full(self, data):
        if not self.parent.name.startswith(STAGING):
            return real(self, data)
        real(self, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)


def test_a_full_disk_names_the_report_folder_and_leaves_no_new_empty_one(res, tmp_path, cli, monkeypatch):
    """A report refused by a full disk said 'a file cannot be written', exit 2, and left the report folder it
    had made, empty; now the message names the folder, the folders it made go, an earlier report stays whole."""
    import errno

    from vitbench.report import build

    real = build._write

    def full(df, cal, out, *a, **k):
        (out / "report.md").write_text("half a rep")  # into the staging folder, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "new" / "report"
    monkeypatch.setattr(build, "_write", full)
    r = cli("report", res, "--out", out, "--format", "md", "--no-plots")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"report directory '{out}' cannot be written: the disk is full" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "new").exists()  # made by this report (a parent too), nothing published: removed

    monkeypatch.setattr(build, "_write", real)
    _report(res, out)
    before = _snapshot(out)
    monkeypatch.setattr(build, "_write", full)
    r = cli("report", res, "--out", out, "--format", "md", "--no-plots")
    assert r.exit_code == 2 and "cannot be written: the disk is full" in r.output, r.output
    assert _snapshot(out) == before and sorted(p.name for p in out.iterdir()) == sorted(before)


@pytest.mark.parametrize("command", ["fit", "inspect"])
def test_a_full_disk_names_the_out_folder_and_leaves_no_new_empty_one(command, tmp_path, cli, monkeypatch):
    """fit --out and inspect --out: the same (vitbench.outdir.write_files)."""
    if command == "fit":
        law = tmp_path / "law.csv"
        law.write_text("c,e\n" + "".join(f"{10 ** (3 + i / 2)},{1 / (1 + i)}\n" for i in range(12)))
        args = ("fit", law, "--compute", "c", "--error", "e", "--bootstrap", "0", "--workers", "1")
    else:
        args = ("inspect", "ViT-Nano/4", "--images", "2", "--rollout", "0", "--threads", "1")
    out = tmp_path / "out"
    _full_disk_in_staging(monkeypatch)
    r = cli(*args, "--out", out)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    said = " ".join(r.output.split())
    assert f"{command} directory '{out}' cannot be written: the disk is full" in said, r.output
    assert not out.exists()

    monkeypatch.undo()
    assert cli(*args, "--out", out).exit_code == 0
    before = _snapshot(out)
    _full_disk_in_staging(monkeypatch)
    r = cli(*args, "--out", out)
    assert r.exit_code == 2 and f"{command} directory '{out}' cannot be written" in " ".join(r.output.split())
    assert _snapshot(out) == before and sorted(p.name for p in out.iterdir()) == sorted(before)
