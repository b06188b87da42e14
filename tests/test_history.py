"""The history store and `vitbench history` (issue 55, items 1, 2 and 5; docs/history.md): append-only SQLite that
survives a writer killed mid-append and concurrent writers, results directories recorded with commit, machine
and calibration, series normalised where the machine changed, change points, and the exit code for CI."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tolerances_stat import f64

from vitbench.env import short_sha
from vitbench.history import store
from vitbench.history.store import Point, Run

TESTS = Path(__file__).resolve().parent


def _run(commit: str, i: int, machine: str = "m1", date: str | None = None) -> Run:
    date = date or f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00"
    return Run(source="sweep", commit=commit, commit_date=date,
               run_date="2026-01-02T00:00:00+00:00", machine=machine, path="/results", info={"i": i})


def _point(value: float, cal: float | None = None, trial: str = "t1", metric: str = "img_per_s",
           size: int | None = None) -> Point:
    return Point(trial=trial, label=f"ViT-Nano/4 infer {trial}", model="ViT-Nano/4", backend="torch", task="infer",
                 metric=metric, unit="img/s", higher_is_better=True, value=value, calibration=cal,
                 raw={"rounds": [value], **({"matmul_n": size} if size else {})})


def _history(db: Path, values, machines=None, cals=None, sizes=None) -> None:
    for i, v in enumerate(values):
        store.append(db, _run(f"c{i:03d}", i, machines[i] if machines else "m1"),
                     [_point(v, cals[i] if cals else None, size=sizes[i] if sizes else None)])


# ---- the store -----------------------------------------------------------------------------------------------
def test_append_reads_back_and_refuses_rewrites(tmp_path):
    db = tmp_path / "h" / "history.sqlite"  # its directory is made
    store.append(db, _run("abc", 0), [_point(100.0, 0.05), _point(3.0, trial="t2")])
    store.append(db, _run("def", 1), [_point(101.5)])
    rows = list(store.read(db))
    assert [(r.commit, p.trial, p.value, p.calibration) for r, p in rows] == [
        ("abc", "t1", 100.0, 0.05), ("abc", "t2", 3.0, None), ("def", "t1", 101.5, None)]  # floats read back
    assert rows[0][0].info == {"i": 0} and rows[0][1].raw == {"rounds": [100.0]}
    con = sqlite3.connect(db)
    for sql in ("UPDATE points SET value = 1", "DELETE FROM runs", "DELETE FROM points",
                "UPDATE runs SET commit_sha = 'x'"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            con.execute(sql)
    con.close()
    assert len(list(store.read(db))) == 3


def test_a_full_disk_is_said_as_such_and_leaves_the_history_whole(tmp_path, monkeypatch):
    """On a full disk `history append` said the history file was unreadable and to move it away (opening), or
    ended in a traceback whose last line was 'cannot rollback - no transaction is active' (a failed COMMIT
    SQLite had rolled back already)."""
    from vitbench.errors import ConfigError

    db = tmp_path / "history.sqlite"
    store.append(db, _run("abc", 0), [_point(100.0)])
    real = store._connect

    class Full:  # SQLite's own errors on a full disk, at the statement named
        def __init__(self, con, at):
            self.con, self.at = con, at

        def execute(self, sql, *a):
            if sql.startswith(self.at):
                self.con.execute("ROLLBACK") if self.con.in_transaction else None
                raise sqlite3.OperationalError("database or disk is full" if self.at == "COMMIT" else
                                               "disk I/O error")
            return self.con.execute(sql, *a)

        def __getattr__(self, name):
            return getattr(self.con, name)

    for at in ("COMMIT", "SELECT name FROM sqlite_master"):  # a failed commit; a failed open
        monkeypatch.setattr(store, "_connect", lambda p, at=at: Full(real(p), at))
        with pytest.raises(ConfigError, match=r"cannot be written now: .*(full|disk I/O).*the history file was "
                                              r"left as it was") as e:
            store.append(db, _run("def", 1), [_point(101.0)])
        assert "move this file away" not in str(e.value)
    monkeypatch.setattr(store, "_connect", real)
    assert [r.commit for r, _ in store.read(db)] == ["abc"]


def test_a_new_history_that_cannot_be_made_leaves_no_file_behind(tmp_path, monkeypatch):
    """A first append on a full disk left SQLite's `-wal` and `-shm` files of the hidden file the new history is
    built in (SQLite could not merge and remove them), beside the user's files, for good."""
    from vitbench.errors import ConfigError

    real = store._connect

    class Full:  # the tables are written, the COMMIT fails, and the connection keeps its -wal and -shm open
        def __init__(self, con):
            self.con = con

        def execute(self, sql, *a):
            if sql.startswith("COMMIT"):
                self.con.execute("ROLLBACK")
                raise sqlite3.OperationalError("database or disk is full")
            return self.con.execute(sql, *a)

        def close(self):  # as on a full disk: nothing merged, nothing removed
            pass

    monkeypatch.setattr(store, "_connect", lambda p: Full(real(p)))
    with pytest.raises(ConfigError, match="cannot be written now"):
        store.append(tmp_path / "history.sqlite", _run("abc", 0), [_point(100.0)])
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_bad_point_writes_nothing(tmp_path):
    from vitbench.errors import ConfigError

    db = tmp_path / "history.sqlite"
    store.append(db, _run("abc", 0), [_point(100.0)])
    for bad in (float("nan"), float("inf"), 0.0, -1.0):
        with pytest.raises(ConfigError, match="not a finite positive number"):
            store.append(db, _run("def", 1), [_point(100.0), _point(bad, trial="t2")])
    assert [r.commit for r, _ in store.read(db)] == ["abc"]  # neither the run nor its good point


_WRITER = """
import os, sys, time
sys.path[:0] = [{root!r}]

from vitbench.history import store
from test_history import _run, _point
db, marker = sys.argv[1], sys.argv[2]
for i in range(5):
    store.append(db, _run(f"c{{i}}", i), [_point(100.0 + i), _point(50.0 + i, trial="t2")])
def points():  # the sixth append: two points written, then the writer hangs inside its transaction
    yield _point(1.0)
    yield _point(2.0, trial="t2")
    open(marker, "w").close()
    time.sleep(600)
    yield _point(3.0, trial="t3")
store.append(db, _run("c5", 5), points())
"""


@pytest.mark.timeout(120)
def test_a_writer_killed_mid_append_leaves_every_earlier_record(tmp_path):
    """Issue 55 "done when": kill -9 of a real writer process inside its append's transaction; every earlier run
    reads back whole, the torn one not at all, and the next append works."""
    db, marker = tmp_path / "history.sqlite", tmp_path / "inside"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER.format(root=str(TESTS.parent)), str(db), str(marker)],
                            env=env, cwd=TESTS, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 100
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rows = list(store.read(db))
    assert [(r.commit, p.trial, p.value) for r, p in rows] == [
        (f"c{i}", t, v + i) for i in range(5) for t, v in (("t1", 100.0), ("t2", 50.0))]
    store.append(db, _run("c6", 6), [_point(7.0)])
    assert [r.commit for r, _ in store.read(db)][-1] == "c6" and len(list(store.read(db))) == 11


_APPENDER = """
import sys
sys.path[:0] = [{root!r}]

from vitbench.history import store
from test_history import _run, _point
db, who = sys.argv[1], int(sys.argv[2])
for i in range(15):
    store.append(db, _run(f"w{{who}}-{{i}}", i), [_point(100.0 + who, trial=f"t{{j}}") for j in range(3)])
"""


@pytest.mark.timeout(120)
def test_concurrent_appends_all_land_whole(tmp_path):
    db = tmp_path / "history.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER.format(root=str(TESTS.parent)), str(db), str(w)],
                              env=env, cwd=TESTS, stderr=subprocess.PIPE) for w in range(3)]
    for p in procs:
        assert p.wait(timeout=100) == 0, p.stderr.read().decode()[-2000:]
    rows = list(store.read(db))
    by_run: dict[int, list] = {}
    for r, p in rows:
        by_run.setdefault(r.id, []).append((r.commit, p.trial, p.value))
    assert len(by_run) == 45
    for pts in by_run.values():  # each run's three points together, none of another writer's
        who = int(pts[0][0][1:].split("-")[0])
        assert pts == [(pts[0][0], f"t{j}", 100.0 + who) for j in range(3)]


def test_bad_history_files_exit_2_naming_the_file(cli, tmp_path):
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database \x00\xff" * 100)
    foreign = tmp_path / "foreign.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    for path, says in ((garbage, "not a readable history file"), (foreign, "not a vitbench history"),
                       (tmp_path / "absent.sqlite", "no such file"), (tmp_path, "is a directory")):
        for args in (("history", "--db", path), ("history", "append", str(tmp_path), "--db", path)):
            if args[1] == "append" and says == "no such file":
                continue  # append makes a new history
            r = cli(*args)
            assert r.exit_code == 2 and str(path) in r.output and "Traceback" not in r.output, r.output
            if args[1] != "append":
                assert says in r.output, r.output
    assert garbage.read_bytes() == b"not a database \x00\xff" * 100  # never written over


def test_an_existing_file_that_is_not_a_history_is_never_made_one(cli, tmp_path):
    """`history append --db notes.txt` naming an empty file (a mistyped path) made it a history, as SQLite takes an
    empty file for a new database; so did an SQLite file without tables. Now each is refused by every history
    command, exit 2, naming the file, and left as it was; only an absent path gets a new history, whole when it
    appears (no empty file for a racer to find, no temporary file left beside it)."""
    empty = tmp_path / "notes.txt"
    empty.touch()
    tableless = tmp_path / "blank.sqlite"
    con = sqlite3.connect(tableless)
    con.execute("PRAGMA user_version = 7")
    con.close()
    blank = tableless.read_bytes()
    assert blank
    results = _results(tmp_path / "r", "a" * 40, 100.0, 0.05)
    for path, says, content in ((empty, "an empty file, not a vitbench history", b""),
                                (tableless, "an SQLite file, but not a vitbench history (tables: none)", blank)):
        for args in (("history", "--db", path), ("history", "append", results, "--db", path, "--repo", tmp_path)):
            r = cli(*args)
            assert r.exit_code == 2 and str(path) in r.output and "Traceback" not in r.output, r.output
            assert says in " ".join(r.output.split()), r.output
            assert path.read_bytes() == content
    new = tmp_path / "new" / "h.sqlite"
    r = cli("history", "append", results, "--db", new, "--repo", tmp_path)
    assert r.exit_code == 0, r.output
    assert [p.name for p in new.parent.iterdir()] == ["h.sqlite"] and {run.id for run, _ in store.read(new)} == {1}


# ---- recording results directories --------------------------------------------------------------------------
def _results(d: Path, sha: str, speed: float, tflops: float, host: str = "vm", others: float | None = None,
             unstable: bool | None = None, overlapped: list | None = None) -> Path:
    """A results directory of a calibration and two bench rows; `others`: the rows' other_load_cores; `unstable`,
    `overlapped`: the rows' noise flag and the other trials that ran beside them (vitbench.report.caveats)."""
    from test_compare import bench_record, calibration_record, write_jsonl

    env = {"torch": "2.15.0", "git_sha": sha, "hostname": host, "cpu_model": "AMD EPYC", "cpu_count": 2,
           "device_name": "cpu"}
    d.mkdir(parents=True)
    run = str(d)  # each directory a sweep run of its own
    recs = [calibration_record([tflops] * 3, env=env, run_id=run), bench_record(step_s=[8 / speed] * 10, env=env,
                                                                                 run_id=run),
            bench_record("R-Nano", step_s=[8 / speed / 2] * 10, env=env, run_id=run)]
    for r in recs[1:]:
        if others is not None:
            r.metrics["other_load_cores"] = others
        if unstable is not None:
            r.metrics["unstable"] = unstable
        if overlapped:
            r.runner["overlapped"] = overlapped
    write_jsonl(d / "results.jsonl", recs)
    return d


def test_a_marked_measurement_is_marked_in_the_history(cli, tmp_path):
    """Rows flagged unstable or measured beside other trials (vitbench.report.caveats) were recorded and shown
    like clean ones: a busy sweep's speed entered the series unmarked. A point of clean and marked rounds is now
    its clean rounds' median and keeps the ones it left out; a point of marked rounds only is marked in the
    table, the JSON and the page (a red ring), with the legend; a change point beside it says so."""
    from vitbench.report.caveats import MARK

    db, sha = tmp_path / "h.sqlite", {c: c * 40 for c in "abcd"}
    for c in "ab":
        assert cli("history", "append", _results(tmp_path / c, sha[c], 100.0, 0.05, unstable=False), "--db",
                   db).exit_code == 0
    _results(tmp_path / "c" / "round1", sha["c"], 101.0, 0.05, unstable=False)
    _results(tmp_path / "c" / "round2", sha["c"], 50.0, 0.10, unstable=True)  # a busy round: left out
    other = [{"pid": 4242, "command": "python other_sweep.py", "cwd": "/elsewhere"}]
    _results(tmp_path / "d", sha["d"], 60.0, 0.05, unstable=False, overlapped=other)  # only a shared-host round
    for c in "cd":
        r = cli("history", "append", tmp_path / c, "--db", db)
        assert r.exit_code == 0, r.output
    pts = {run.commit[0]: p for run, p in store.read(db) if p.model == "ViT-Nano/4" and p.metric == "img_per_s"}
    assert pts["c"].value == f64(101.0, 3) and pts["c"].raw["left_out"] == [f64(50.0, 3)]
    assert pts["c"].calibration == 0.05  # the calibration of the round kept, not the median with the left-out 0.10
    assert pts["c"].raw["left_out_why"] == "unstable" and "caveat" not in pts["c"].raw
    assert pts["d"].raw["caveat"] == "shared host" and "caveat" not in pts["a"].raw
    doc = json.loads(cli("history", "--db", db, "--format", "json", "-m", "img_per_s").output)
    s = next(x for x in doc["series"] if x["model"] == "ViT-Nano/4")
    assert [p.get("caveat", "") for p in s["points"]] == ["", "", "1 unstable round(s) left out",
                                                         f"{MARK} shared host"]
    r = cli("history", "--db", db, "-m", "img_per_s", "--html", tmp_path / "page.html")
    text = " ".join(r.output.split())
    assert f"[{MARK} shared host]" in text and "rest only on rounds flagged unstable" in text, text
    assert f"{MARK} beside a marked point" in text, text  # the drop to 60 lies beside the marked point
    page = (tmp_path / "page.html").read_text()
    assert page.count('class="caveat"') == 2 and "Red ring:" in page  # one ring per model's series


def test_a_largest_batch_at_the_search_cap_shows_as_a_lower_bound(cli, tmp_path):
    """A largest batch where the search stopped at its cap is that batch or more (Metric.lower_bound_when): the
    history showed '128 images' as though 129 failed. The point keeps it, the table and the page show '\u2265'."""
    from records import record
    from test_compare import write_jsonl

    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "max_batch", "device": "cpu", "resolution": 32,
           "precision": "fp32", "mode": "infer"}
    db = tmp_path / "h.sqlite"
    for c, v, capped in (("a", 64, False), ("b", 128, True)):
        d = tmp_path / c
        d.mkdir()
        env = {"torch": "2.15.0", "git_sha": c * 40, "hostname": "vm", "cpu_model": "AMD EPYC", "cpu_count": 2,
               "device_name": "cpu"}
        write_jsonl(d / "results.jsonl", [record("max_batch", dict(cfg), metrics={
            "max_batch_size": v, "capped": capped, "memory_limit_mib": 512.0}, key="k", trial=dict(cfg), repeat=0,
            env=env, run_id=str(d))])
        r = cli("history", "append", d, "--db", db)
        assert r.exit_code == 0, r.output
    pts = {run.commit[0]: p for run, p in store.read(db) if p.metric == "max_batch_size"}
    assert pts["b"].raw.get("at_least") is True and "at_least" not in pts["a"].raw
    doc = json.loads(cli("history", "--db", db, "--format", "json", "-m", "max_batch_size").output)
    assert [p.get("at_least", False) for p in doc["series"][0]["points"]] == [False, True]
    r = cli("history", "--db", db, "-m", "max_batch_size", "--html", tmp_path / "page.html")
    assert r.exit_code == 0 and "\u2265 128 images" in " ".join(r.output.split()), r.output
    page = (tmp_path / "page.html").read_text()
    assert f"\u2265 128 images at {short_sha('b' * 40)}" in page and "\u2265 64" not in page
    # one round of two at the cap (c), or one of two appends of a commit (d): the point rests on a lower bound;
    # a newest commit not at the cap (e) reads as the plain number
    for c, rounds in (("c", [(128, True), (120, False)]), ("d", [(100, False)]), ("d", [(128, True)]),
                      ("e", [(96, False)])):
        d = tmp_path / f"{c}{len(list(tmp_path.glob(c + '*')))}"
        d.mkdir()
        env = {"torch": "2.15.0", "git_sha": c * 40, "hostname": "vm", "cpu_model": "AMD EPYC", "cpu_count": 2,
               "device_name": "cpu"}
        write_jsonl(d / "results.jsonl", [record("max_batch", dict(cfg), metrics={
            "max_batch_size": v, "capped": capped, "memory_limit_mib": 512.0}, key=f"k{i}", trial=dict(cfg),
            repeat=i, env=env, run_id=str(d)) for i, (v, capped) in enumerate(rounds)])
        r = cli("history", "append", d, "--db", db)
        assert r.exit_code == 0, r.output
    doc = json.loads(cli("history", "--db", db, "--format", "json", "-m", "max_batch_size").output)
    assert [p.get("at_least", False) for p in doc["series"][0]["points"]] == [False, True, True, True, False]
    r = cli("history", "--db", db, "-m", "max_batch_size")
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "\u2502 96 \u2502" in text and "\u2265" not in text, text  # the newest's cell


def test_a_commits_marked_append_is_left_out_for_its_clean_one(tmp_path):
    """A commit appended twice, once from a clean run (100 img/s) and once from a run every round of which was
    marked (50, unstable): its point is the clean run's, the marked one's rounds said to be left out (not the
    median 75 of both, a false 25 % drop)."""
    from vitbench.history import series as hs

    marked = _point(50.0)
    marked.raw.update(caveat="unstable", rounds=[50.0, 51.0, 49.0])  # three rounds, each marked
    rows = [(_run("c000", 0), _point(100.0)), (_run("c001", 1), _point(100.0)), (_run("c001", 2), marked)]
    (s,) = hs.build(rows)
    assert s.values == [100.0, 100.0] and s.caveats == ["", "3 unstable round(s) left out"]


def test_a_change_point_just_after_a_marked_point_says_so(cli, tmp_path):
    """The commits a change point lies between are the last before it and the first after: a marked point (rounds
    measured beside other trials) just before the step makes the step unconfirmed, as one just after does."""
    db = tmp_path / "h.sqlite"
    for i, v in enumerate([100.0] * 5 + [50.0] * 5):
        pt = _point(v)
        if i in (0, 4):
            pt.raw["caveat"] = "shared host"
        store.append(db, _run(f"{i:x}" * 40, i), [pt])
    r = cli("history", "--db", db, "-m", "img_per_s")
    text = " ".join(r.output.split())
    assert "x0.500" in text and "beside a marked point" in text, text
    assert "2 point(s) rest only on rounds flagged" in text, text  # the legend counts points, not series


def test_a_change_points_confidence_is_shown_to_the_tests_resolution(cli, tmp_path):
    """The permutation test resolves 0.001 (999 permutations): the table showed 0.995 as '100%' and the page
    as '1.00', a certainty it never has. Shown to 0.1 % in the table and 0.001 on the page."""
    import re

    db = tmp_path / "h.sqlite"
    for i, speed in enumerate([100.0] * 5 + [50.0] * 5):
        r = cli("history", "append", _results(tmp_path / str(i), f"{i:x}" * 40, speed, 0.05), "--db", db)
        assert r.exit_code == 0, r.output
    r = cli("history", "--db", db, "-m", "img_per_s", "--html", tmp_path / "page.html")
    text = " ".join(r.output.split())
    assert re.search(r"x0\.500 \(\d+\.\d%\)", text) and "(100%)" not in text, text
    assert re.search(r"\(0\.\d{3}\)", (tmp_path / "page.html").read_text())


@pytest.mark.parametrize("values", [[1e308, 2e307, 5e-324], [3.0, 1e308]])
def test_a_page_of_values_at_a_float_s_ends_is_drawn(cli, tmp_path, values):
    """A finite value of 1e308 (append takes any finite positive number) asked the page's log axis for a tick at
    10**309: an OverflowError traceback, exit 1, no page. Its ticks stay inside a float's range."""
    db = tmp_path / "h.sqlite"
    _history(db, values)
    r = cli("history", "--db", db, "--html", tmp_path / "page.html")
    assert r.exit_code in (0, 1) and isinstance(r.exception, (SystemExit, type(None))), r.exception
    assert "<svg" in (tmp_path / "page.html").read_text()


def test_append_records_a_sweep_with_commit_machine_and_calibration(cli, tmp_path):
    db = tmp_path / "h.sqlite"
    r = cli("history", "append", _results(tmp_path / "r1", "a" * 40, 100.0, 0.05), "--db", db, "--repo", tmp_path)
    assert r.exit_code == 0, r.output
    rows = list(store.read(db))
    assert {(p.model, p.metric) for _, p in rows} >= {("ViT-Nano/4", "img_per_s"), ("R-Nano", "img_per_s")}
    run, pt = next((r, p) for r, p in rows if p.model == "ViT-Nano/4" and p.metric == "img_per_s")
    assert run.commit == "a" * 40 and run.machine == "vm|AMD EPYC|2|cpu" and run.source == "sweep"
    assert pt.calibration == 0.05 and pt.value == f64(100.0, 3)  # 8 / median(8 / 100) x 8 / 8: the record's img/s
    assert pt.raw["matmul_n"] == 1024  # the calibration's matrix size (its config's, in this row from before)
    mem = next(p for _, p in rows if p.model == "ViT-Nano/4" and p.metric == "peak_mem_mib")
    assert mem.calibration is None and mem.raw["calibrations"] == []  # a memory is no speed: never divided by it
    assert run.commit_date is None  # not a commit of --repo: no date, ordered by the run's
    r = cli("history", "append", _results(tmp_path / "r2", "b" * 40 + "-dirty", 100.0, 0.05), "--db", db)
    assert r.exit_code == 2 and "uncommitted" in r.output and "r2" in r.output
    r = cli("history", "append", tmp_path / "r2", "--db", db, "--commit", "c" * 40)
    assert r.exit_code == 0, r.output
    assert len({run.id for run, _ in store.read(db)}) == 2


def test_a_run_sharing_rows_with_a_recorded_one_is_refused(cli, tmp_path):
    """A sweep appended while interrupted, then resumed and appended again, held its first rows twice: each of
    their trials' points became the median of both runs (1535 img/s where the rows' median was 1296). Only the
    very same rows were refused; now any row recorded before refuses the run, naming how many and which run."""
    whole = _results(tmp_path / "whole", "a" * 40, 100.0, 0.05)
    part = tmp_path / "part"
    part.mkdir()
    lines = (whole / "results.jsonl").read_text().splitlines(keepends=True)
    (part / "results.jsonl").write_text("".join(lines[:2]))  # the calibration and the first trial, as interrupted
    db = tmp_path / "h.sqlite"
    assert cli("history", "append", part, "--db", db).exit_code == 0
    r = cli("history", "append", whole, "--db", db)
    assert r.exit_code == 2 and "2 of its 3 rows were appended already, as run 1" in " ".join(r.output.split())
    assert len({run.id for run, _ in store.read(db)}) == 1  # nothing appended
    con = sqlite3.connect(db)
    con.execute("DROP TABLE run_rows")  # a history of before the table: made again where it is appended to
    con.close()
    assert cli("history", "append", _results(tmp_path / "new", "b" * 40, 100.0, 0.05), "--db", db).exit_code == 0
    assert cli("history", "append", tmp_path / "new", "--db", db).exit_code == 2


def test_append_records_an_ab_run_current_side_with_its_verdict(cli, tmp_path):
    """`vitbench ab --results DIR` keeps DIR/{baseline,current}/pairNN: the current side is the run (its commit),
    the verdict and pair ratios of the kept rounds go with it."""
    ab = tmp_path / "ab"
    for n, (b, c) in enumerate(((100.0, 90.0), (110.0, 99.0), (95.0, 85.5), (105.0, 94.5)), start=1):
        # a quiet host under `together`: each row saw the other side's core busy, nothing else
        _results(ab / "baseline" / f"pair{n:02d}", "", b, 0.05, others=1.0)
        _results(ab / "current" / f"pair{n:02d}", "c" * 40, c, 0.05, others=1.0)
    db = tmp_path / "h.sqlite"
    r = cli("history", "append", ab, "--db", db)
    assert r.exit_code == 0, r.output
    rows = list(store.read(db))
    run = rows[0][0]
    assert run.source == "ab" and run.commit == "c" * 40 and run.info["rounds"] == 4
    verdict = run.info["ab"]
    assert verdict["pairs"] == 4 and verdict["verdict"] == "regression"  # every pair 0.9: the gate's rule says so
    vit = next(v for k, v in verdict["trials"].items() if k.startswith("ViT-Nano/4"))
    assert vit["ratio"] == f64(0.9, 8)
    vals = sorted(p.value for _, p in rows if p.model == "ViT-Nano/4" and p.metric == "img_per_s")
    assert vals == [f64(92.25, 8)]  # the median of the current side's rounds 90, 99, 85.5, 94.5


def _ab_dir(d: Path, ratio: float, base: str | None, cur: str = "c" * 40) -> Path:
    """An `ab --results` directory of 4 quiet pairs at `ratio`; `base`: the commit its sides.json names (None: no
    sides.json, as `ab` wrote before it named them)."""
    from vitbench.compare.ab import SIDES_FILE

    for n, b in enumerate((100.0, 110.0, 95.0, 105.0), start=1):
        _results(d / "baseline" / f"pair{n:02d}", "", b, 0.05, others=1.0)
        _results(d / "current" / f"pair{n:02d}", cur, b * ratio * (1.01 if n % 2 else 1 / 1.01), 0.05, others=1.0)
    if base is not None:
        (d / SIDES_FILE).write_text(json.dumps({"baseline": {"commit": base}, "current": {"commit": cur}}))
    return d


def test_an_ab_run_records_paired_points_against_its_baseline_commit(cli, tmp_path):
    """Each trial's quiet pair ratios, their geometric mean, and the baseline's commit: one series per trial and
    baseline, never mixed with ratios against another commit nor with absolute speeds."""
    from vitbench.compare.ab import DEFAULT_STATISTIC
    from vitbench.history import series as hs
    from vitbench.history.collect import PAIRED_SUFFIX

    db, paired = tmp_path / "h.sqlite", "img_per_s" + PAIRED_SUFFIX
    for i, (ratio, base) in enumerate(((0.9, "a" * 40), (0.95, "a" * 40), (1.2, "b" * 40))):
        r = cli("history", "append", _ab_dir(tmp_path / f"ab{i}", ratio, base, cur=f"{i}" * 40), "--db", db)
        assert r.exit_code == 0, r.output
    rows = [(run, p) for run, p in store.read(db) if p.metric == paired and p.model == "ViT-Nano/4"]
    assert [p.value for _, p in rows] == [f64(0.9, 8), f64(0.95, 8), f64(1.2, 8)]  # 1.01 and 1/1.01 cancel
    assert rows[0][1].raw["baseline"] == "a" * 40 and len(rows[0][1].raw["pairs"]) == 4 and rows[0][1].unit == "x"
    vit = [s for s in hs.build(list(store.read(db)), (paired,)) if s.model == "ViT-Nano/4"]
    assert sorted((s.baseline, len(s.values), s.basis) for s in vit) == [("a" * 40, 2, "paired"),
                                                                        ("b" * 40, 1, "paired")]
    assert all(s.trial.endswith(f" vs {short_sha(s.baseline)}, {DEFAULT_STATISTIC.value} step") for s in vit)
    # ratios of another step statistic are another series: one that names its own, and one from before points
    # named theirs (then ab's best step)
    first = rows[0][1].raw
    unnamed = {k: v for k, v in first.items() if k != "statistic"}
    other = [(rows[0][0], dataclasses.replace(rows[0][1], raw={**first, "statistic": "median"})),
             (rows[0][0], dataclasses.replace(rows[0][1], raw=unnamed))]
    split = [s for s in hs.build(rows + other, (paired,)) if s.baseline == "a" * 40]
    assert sorted((s.trial.rsplit(", ", 1)[1], len(s.values)) for s in split) == sorted(
        [(f"{DEFAULT_STATISTIC.value} step", 2), ("median step", 1), (f"{hs.PAIRED_BEFORE_STATISTIC} step", 1)])
    r = cli("history", "--db", db, "--metric", paired, "--format", "json")
    assert r.exit_code == 0 and {d["basis"] for d in json.loads(r.stdout)["series"]} == {"paired"}, r.output
    # an ab directory that does not name its baseline's commit: the run and its absolute points, no paired one
    r = cli("history", "append", _ab_dir(tmp_path / "old", 0.9, None, cur="d" * 40), "--db", db)
    assert r.exit_code == 0, r.output
    run = next(run for run, _ in store.read(db) if run.commit == "d" * 40)
    assert "names no baseline commit" in run.info["ab"]["paired"]
    assert not [p for run, p in store.read(db) if run.commit == "d" * 40 and p.metric == paired]


def test_an_ab_run_s_sides_file_is_read_as_the_report_reads_it(cli, tmp_path):
    """`history append` reads an ab directory's sides.json through the store's one reader (store.ab_sides), as
    the report does: a file nested past json's depth (an edited one) ended the append in a RecursionError
    traceback, and a commit that is no text (a list) was recorded as the baseline commit "['x']"."""
    from vitbench.compare.ab import SIDES_FILE
    from vitbench.history.collect import PAIRED_SUFFIX

    db, paired = tmp_path / "h.sqlite", "img_per_s" + PAIRED_SUFFIX
    for i, text in enumerate(("[" * 100_000 + "]" * 100_000,
                              json.dumps({"baseline": {"commit": ["x"]}, "current": {"commit": "c" * 40}}))):
        d = _ab_dir(tmp_path / f"ab{i}", 0.9, None, cur=f"{i}" * 40)
        (d / SIDES_FILE).write_text(text)
        r = cli("history", "append", d, "--db", db)
        assert r.exit_code == 0 and r.exception is None, r.output
        run = next(run for run, _ in store.read(db) if run.commit == f"{i}" * 40)
        assert "names no baseline commit" in run.info["ab"]["paired"]
    assert not [p for _, p in store.read(db) if p.metric == paired]


def test_append_reads_an_ab_run_whose_pairs_have_legs(cli, tmp_path):
    """`together` keeps each pair as two legs (DIR/side/pairNN/leg1, leg2): the verdict is the gate's (a side's
    value the geometric mean over its legs, not its best step over both), and every leg is a round."""
    ab = tmp_path / "ab"
    for n, (b, c) in enumerate(((100.0, 90.0), (110.0, 99.0), (95.0, 85.5), (105.0, 94.5)), start=1):
        for leg, (fb, fc) in enumerate(((1.45, 1.0), (1.0, 1.2)), start=1):
            _results(ab / "baseline" / f"pair{n:02d}" / f"leg{leg}", "", b * fb, 0.05, others=1.0)
            _results(ab / "current" / f"pair{n:02d}" / f"leg{leg}", "c" * 40, c * fc, 0.05, others=1.0)
    db = tmp_path / "h.sqlite"
    r = cli("history", "append", ab, "--db", db)
    assert r.exit_code == 0, r.output
    run = list(store.read(db))[0][0]
    assert run.info["rounds"] == 8 and run.info["ab"]["pairs"] == 4 and run.info["ab"]["verdict"] == "regression"
    vit = next(v for k, v in run.info["ab"]["trials"].items() if k.startswith("ViT-Nano/4"))
    assert vit["ratio"] == f64(0.9 * math.sqrt(1.2 / 1.45), 8)  # the best over both legs would give 0.9 x 1.2 / 1.45


def test_append_refuses_what_is_no_measurement(cli, tmp_path):
    from test_compare import bench_record, write_jsonl

    (tmp_path / "failed").mkdir()
    env = {"git_sha": "a" * 40}
    write_jsonl(tmp_path / "failed" / "results.jsonl", [bench_record(status="oom", env=env)])
    (tmp_path / "unrecorded").mkdir()  # failed rows of no environment (a timeout's): the reason is still theirs
    write_jsonl(tmp_path / "unrecorded" / "results.jsonl", [bench_record(status="timeout", env={})])
    (tmp_path / "empty").mkdir()
    for d, says in ((tmp_path / "failed", "no ok row"), (tmp_path / "unrecorded", "no ok row"),
                    (tmp_path / "empty", "no records"), (tmp_path / "nope", "no such directory")):
        r = cli("history", "append", d, "--db", tmp_path / "h.sqlite")
        assert r.exit_code == 2 and str(d) in r.output and "Traceback" not in r.output, r.output
        assert says in " ".join(r.output.split()), (says, r.output)
    assert not (tmp_path / "h.sqlite").exists() or not list(store.read(tmp_path / "h.sqlite"))


def test_a_folder_and_the_folder_holding_it_are_the_same_rows(cli, tmp_path):
    """round1/ appended, then the folder holding it: round1's rows were recorded twice (a row's identity held its
    directory within the folder appended: round1/results.jsonl once, results.jsonl the other time) and its
    trial's point moved (1528 img/s where the 5 rounds' median was 1448). The same rows whichever folder is
    appended, in either order; rows in another folder of the parent (round2/) make it no different run."""
    for order in (("round1", "."), (".", "round1")):
        top = tmp_path / "-".join(order).replace(".", "top")
        _results(top / "round1", "a" * 40, 100.0, 0.05)
        db = top / "h.sqlite"
        assert cli("history", "append", top / order[0], "--db", db).exit_code == 0
        r = cli("history", "append", top / order[1], "--db", db)
        assert r.exit_code == 2 and "appended already, as run 1" in " ".join(r.output.split()), r.output
        assert len({run.id for run, _ in store.read(db)}) == 1


def test_a_run_dated_in_the_future_is_refused(cli, tmp_path):
    """A run whose rows start in 2097 (a wrong clock, an edited row) stayed the history's newest point for good
    (commits not in --repo are placed by their run's start): later regressions were never new. Refused past a day
    ahead of this clock; nothing appended."""
    res = _results(tmp_path / "fut", "a" * 40, 100.0, 0.05)
    text = (res / "results.jsonl").read_text()
    future = '"started_at": "2097-01-01T00:00:00.000+00:00"'
    (res / "results.jsonl").write_text(re.sub(r'"started_at": "[^"]*"', future, text))
    db = tmp_path / "h.sqlite"
    r = cli("history", "append", res, "--db", db)
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "started at 2097-01-01T00:00:00.000+00:00, after this machine's clock" in said
    assert "nothing was appended" in said and not db.exists()


def test_append_refuses_damaged_or_already_appended_rows(cli, tmp_path):
    """What is appended stays for good: a results directory with a line that cannot be read is refused naming
    it (before: appended without a word), and the same rows appended again are refused naming the run they are
    (before: a second run of the same data)."""
    db = tmp_path / "h.sqlite"
    res = _results(tmp_path / "r1", "a" * 40, 100.0, 0.05)
    (res / "results.w-1.jsonl").write_text("GARBAGE LINE\n")
    r = cli("history", "append", res, "--db", db)
    assert r.exit_code == 2 and "1 line(s) could not be read" in " ".join(r.output.split()), r.output
    assert "results.w-1.jsonl:1" in r.output and not db.exists()
    (res / "results.w-1.jsonl").unlink()
    assert cli("history", "append", res, "--db", db).exit_code == 0
    r = cli("history", "append", res, "--db", db, "--commit", "b" * 40)
    assert r.exit_code == 2 and "appended already, as run 1" in " ".join(r.output.split()), r.output
    shutil.copytree(res, tmp_path / "copy")  # the same rows from another directory: a review recorded them again
    r = cli("history", "append", tmp_path / "copy", "--db", db)
    assert r.exit_code == 2 and "appended already, as run 1" in " ".join(r.output.split()), r.output
    assert len({run.id for run, _ in store.read(db)}) == 1


def test_an_edited_history_is_refused_naming_what_was_edited(cli, tmp_path):
    """Values `history append` never writes (a value <= 0 or not finite, a calibration outside the calibration
    metric's bounds, info or raw that is not a JSON object), put there by hand past the append-only triggers:
    exit 2 naming the run, not a series or a traceback (a calibration of 1e-300 divided the machine's speeds past
    a float's range)."""
    for column, value, says in (("value", -5.0, "holds value -5.0"), ("value", float("inf"), "holds value inf"),
                                ("calibration", -1.0, "calibration -1.0"), ("calibration", 1e-300, "1e-300"),
                                ("calibration", 1e300, "calibration 1e+300"), ("raw", "{bad", "is not the JSON")):
        db = tmp_path / f"{column}{value}.sqlite"
        _history(db, [100.0, 101.0])
        con = sqlite3.connect(db)
        con.execute("DROP TRIGGER IF EXISTS points_append_only_u")
        con.execute(f"UPDATE points SET {column} = ? WHERE run_id = 2", (value,))
        con.commit()
        con.close()
        r = cli("history", "--db", db)
        assert r.exit_code == 2 and "run 2" in r.output and says in r.output and "Traceback" not in r.output, (
            column, r.output)


def test_the_help_says_where_the_default_history_file_is(cli, tmp_path, monkeypatch):
    """--help said ../vitbench-history/history.sqlite lies "beside the repository you run in"; it is relative to
    the current directory, inside the checkout when run from a subfolder. The help says so, from the one
    declaration of the default (vitbench.history.DEFAULT_PATH), which is what a run uses."""
    from vitbench.history import DEFAULT_PATH, HISTORY_ENV

    for args in (["history", "--help"], ["history", "append", "--help"]):
        text = " ".join(cli(*args).output.split())
        assert f"${HISTORY_ENV}, else {DEFAULT_PATH}, relative to the current directory" in text, text
        assert "inside the checkout when run from a subfolder" in text and "you run in" not in text, text
    monkeypatch.delenv(HISTORY_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert store.default_path(None).resolve() == (tmp_path / DEFAULT_PATH).resolve()


# ---- series, change points, the exit code -------------------------------------------------------------------
def test_a_step_is_found_with_its_size_confidence_and_commits():
    from vitbench.history.changes import changes

    rng = np.random.default_rng(1)
    sd = 0.02
    y = np.exp(np.r_[np.zeros(60), np.full(60, np.log(0.9))] + rng.normal(0, sd, 120))
    (c,) = changes(y)
    assert c.first <= 60 <= c.last and c.last - c.first < 10
    # the size: the segments' geometric means, each of 60 points with sd 0.02: 5 sd of the difference
    assert abs(np.log(c.size) - np.log(0.9)) < 5 * sd * np.sqrt(2 / 60)
    assert c.confidence >= 0.99
    assert changes(np.exp(rng.normal(0, sd, 120))) == []  # seeded: noise alone, no change


@pytest.mark.parametrize("at", [1, 5, 10, None])  # the oldest point alone, the middle, the newest alone, none
def test_a_step_anywhere_is_placed_in_its_range_with_its_size(at):
    """Segments of two points at the ends put a step at the newest point one commit early (x0.833 at 97 % for a
    step to x0.70, its range two full-speed commits: exit 1 naming them), and one at the oldest one commit late;
    one point is a segment at either end of the series now (vitbench.history.changes, ENDS). The confidence of a
    one-point segment is a rank: at best about 1 - 2/n of the whole series."""
    import random

    from vitbench.history.changes import changes

    for seed in range(1, 6):
        random.seed(seed)
        v = [1 + random.uniform(-.01, .01) for _ in range(11)]
        if at is not None:
            v = [x * (0.7 if i >= at else 1) for i, x in enumerate(v)]
        found = changes(v)
        if at is None:
            assert all(c.confidence < 0.95 for c in found), (seed, found)
            continue
        (c,) = [c for c in found if c.first <= at <= c.last]  # the range holds the step (at: its first point)
        assert abs(math.log(c.size) - math.log(0.7)) < 0.02 and c.index == at, (seed, found)
        if at in (1, 10):
            assert c.confidence < 0.9, (seed, c)  # one point of 11 (or fewer): a rank, 1 - 2/11 at best, not 97 %
        assert all(not (x.size < 0.9 or x.size > 1.1) or x is c for x in found), (seed, found)


def test_a_slowdown_at_the_newest_commit_names_it_and_fails_once_it_is_sure(cli, tmp_path):
    """Through the CLI: 11 commits, the newest slowed. It is listed at once between the previous commit and the
    newest at its size, and fails (exit 1) only when its confidence reaches --confidence: not at one point of 11
    (a rank: 82 %), here at the third commit as slow, its range still naming the commit that brought it."""
    import random

    db = tmp_path / "h.sqlite"
    random.seed(1)
    _history(db, [100 * (1 + random.uniform(-.01, .01)) for _ in range(10)] + [70.0])
    for commit, value in ((None, None), ("c011", 70.3), ("c012", 69.8)):
        if commit:
            store.append(db, _run(commit, int(commit[1:])), [_point(value)])
        r = cli("history", "--db", db, "--format", "json")
        doc = json.loads(r.stdout)["series"][0]
        (c,) = [c for c in doc["changes"] if c["size"] < 0.9]
        assert c["commits"] == ["c009", "c010"] and abs(c["size"] - 0.70) < 0.01, c
        assert r.exit_code == (1 if c["confidence"] >= 0.95 else 0), (r.exit_code, c)
    assert r.exit_code == 1 and doc["new_regressions"] == [10], r.output


def test_a_machine_change_is_divided_out_by_its_calibration(tmp_path):
    from vitbench.history import series as hs

    db = tmp_path / "h.sqlite"
    rng = np.random.default_rng(2)
    noise = np.exp(rng.normal(0, 0.01, 40))
    # the second machine is twice as fast at matmuls and at the model: no change of the code
    _history(db, list(100 * noise[:20]) + list(200 * noise[20:]), machines=["m1"] * 20 + ["m2"] * 20,
             cals=[0.05] * 20 + [0.10] * 20)
    (s,) = hs.detect(hs.build(list(store.read(db))))
    assert s.basis == "normalized" and s.changes == []
    # in the newest machine's units: (100 x) x 0.10 / 0.05 against 200 x, each literal and operation one rounding
    assert s.normalized[0] == f64(200 * noise[0], 5)
    db2 = tmp_path / "h2.sqlite"  # the same without calibrations: the step is seen, raw
    _history(db2, list(100 * noise[:20]) + list(200 * noise[20:]), machines=["m1"] * 20 + ["m2"] * 20)
    (s2,) = hs.detect(hs.build(list(store.read(db2))))
    assert s2.basis == "raw" and [c.index for c in s2.changes] == [20]
    page = hs.to_page([s2])[0]
    assert page["changes"][0]["commits"] == [s2.commits[s2.changes[0].first - 1], s2.commits[s2.changes[0].last]]
    assert set(page) == {"metric", "unit", "trial", "model", "backend", "task", "points", "changes"}
    assert set(page["points"][0]) == {"commit", "date", "value", "normalized"}
    assert page["points"][0]["normalized"] is None


def test_the_newest_value_shown_normalised_is_the_normalised_one(cli, tmp_path):
    """A series found on normalised values shows its newest value '(normalized)': where the newest commit ran on
    two machines (m1 at 100 img/s, m2, twice as fast at matmuls, at 200) that value is 200 in the newest
    machine's units; the table showed the raw median of both, 150, under that label."""
    db = tmp_path / "h.sqlite"
    for i in range(10):
        m, v, cal = ("m1", 100.0, 0.05) if i < 6 else ("m2", 200.0, 0.10)
        if i == 9:  # the newest commit, on m1 too
            store.append(db, _run(f"c{i:03d}", i), [_point(100.0, 0.05, size=1024)])
        store.append(db, _run(f"c{i:03d}", i, m), [_point(v, cal, size=1024)])
    r = cli("history", "--db", db)
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "200 img/s (normalized)" in text and "150" not in text, r.output


def test_only_a_speed_is_divided_by_the_machine_s_calibration(tmp_path):
    """Memory that stayed at 100 MiB on a machine of half the calibration read 200 after normalising: a false 1.95x
    regression at confidence 0.99, exit 1 (points appended before carry a calibration for every metric)."""
    from vitbench.history import series as hs

    db = tmp_path / "h.sqlite"
    rng = np.random.default_rng(4)
    noise = np.exp(rng.normal(0, 0.01, 30))
    for i, v in enumerate(100 * noise):
        store.append(db, _run(f"c{i:03d}", i, "m1" if i < 24 else "m2"),
                     [_point(float(v), 0.10 if i < 24 else 0.05, metric="peak_mem_mib", size=1024)])
    (s,) = hs.detect(hs.build(list(store.read(db))))
    assert s.basis == "raw" and set(s.normalized) == {None} and s.changes == []
    assert hs.new_regressions(s, 0.95) == []


def test_append_keeps_only_a_commit_sha_vitbench_writes_and_says_an_unknown_one(cli, tmp_path):
    """What is appended stays for good: a git_sha vitbench never writes (100,000 characters, text) is refused,
    nothing written; a commit --repo does not hold is kept, placed by the run's date, and said."""
    db = tmp_path / "h.sqlite"
    for bad in ("x" * 100_000, "not-a-sha", "a" * 39):
        r = cli("history", "append", _results(tmp_path / f"r{len(bad)}", bad, 100.0, 0.05), "--db", db)
        assert r.exit_code == 2 and "is not a commit SHA" in r.output and len(r.output) < 2000, r.output
        assert not db.exists()
    r = cli("history", "append", _results(tmp_path / "ok", "c" * 40, 100.0, 0.05), "--db", db, "--repo", tmp_path)
    assert r.exit_code == 0 and f"commit {'c' * 40} is not in --repo" in r.output, r.output
    # --commit is resolved in --repo to the full SHA (`HEAD` was kept as the text "HEAD"), else must be one
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    r = cli("history", "append", _results(tmp_path / "h", "d" * 40, 100.0, 0.05), "--db", db, "--repo", repo,
            "--commit", "HEAD")
    assert r.exit_code == 0 and "not in --repo" not in r.output, r.output
    assert [run.commit for run, _ in store.read(db)][-1] == head
    r = cli("history", "append", _results(tmp_path / "n", "e" * 40, 100.0, 0.05), "--db", db, "--repo", repo,
            "--commit", "v1.0")
    assert r.exit_code == 2 and "--commit v1.0: not a commit of --repo" in r.output, r.output
    r = cli("history", "append", tmp_path / "n", "--db", db, "--repo", repo, "--commit", head[:9])  # a short SHA
    assert r.exit_code == 0 and [run.commit for run, _ in store.read(db)][-1] == head, r.output
    r = cli("history", "append", _results(tmp_path / "d", "f" * 40, 100.0, 0.05), "--db", db, "--repo", repo,
            "--commit", head + "-dirty")  # the text the rows' refusal shows: still no commit
    assert r.exit_code == 2 and "names uncommitted changes" in r.output, r.output


def test_a_machine_is_normalised_by_its_calibration_at_one_matrix_size(tmp_path):
    """A GPU's calibration changed size on 2026-11-29 (n=1024 -> 8192, some 7x in bf16): machine m1 measured at
    both, then m2, twice m1's speed, at the new one. The old rule took m1's median over both sizes (0.05) against
    m2's 0.70 and called the machine change a 7x speed-up of the code."""
    from vitbench.history import series as hs

    db = tmp_path / "h.sqlite"
    rng = np.random.default_rng(3)
    noise = np.exp(rng.normal(0, 0.01, 50))
    _history(db, list(100 * noise[:30]) + list(200 * noise[30:]), machines=["m1"] * 30 + ["m2"] * 20,
             cals=[0.05] * 20 + [0.35] * 10 + [0.70] * 20, sizes=[None] * 20 + [8192] * 30)  # None: from before
    (s,) = hs.detect(hs.build(list(store.read(db))))
    assert s.basis == "normalized" and s.changes == []
    assert s.normalized[0] == f64(200 * noise[0], 5)  # 100 x 0.70 / 0.35: m1 at n=8192
    # a machine calibrated only at another size than the newest point's is not normalised: the raw step shows
    db2 = tmp_path / "h2.sqlite"
    _history(db2, list(100 * noise[:20]) + list(200 * noise[20:40]), machines=["m1"] * 20 + ["m2"] * 20,
             cals=[0.05] * 20 + [0.70] * 20, sizes=[1024] * 20 + [8192] * 20)
    (s2,) = hs.detect(hs.build(list(store.read(db2))))
    assert s2.basis == "raw" and s2.normalized[0] is None and [c.index for c in s2.changes] == [20]


def test_exit_1_on_a_new_regression_only(cli, tmp_path):
    """A regression change point the newest commit brings to light fails (exit 1); once the history without
    the newest commit shows it too, it is no longer new (exit 0), and the series still lists it."""
    db = tmp_path / "h.sqlite"
    rng = np.random.default_rng(3)
    base = list(100 * np.exp(rng.normal(0, 0.01, 30)))
    _history(db, base + [80.0, 80.5])
    r = cli("history", "--db", db, "--format", "json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)["series"][0]
    assert doc["new_regressions"] == [30] and doc["changes"][0]["commits"] == ["c029", "c030"]
    store.append(db, _run("c032", 32), [_point(79.8)])
    r = cli("history", "--db", db)
    assert r.exit_code == 0 and "c029" in r.output, r.output
    db2 = tmp_path / "h2.sqlite"  # an improvement is no regression
    _history(db2, base + [120.0, 120.5])
    assert cli("history", "--db", db2).exit_code == 0


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_the_page_gets_the_series_and_never_replaces_a_users_file(cli, tmp_path):
    """--html OUT hands to_page's series to the history page (vitbench.history.page, written apart)."""
    pytest.importorskip("vitbench.history.page")
    db = tmp_path / "h.sqlite"
    _history(db, [100.0, 101.0, 99.5, 80.0, 80.5, 79.0])
    mine = tmp_path / "notes.html"
    mine.write_text("my notes")
    r = cli("history", "--db", db, "--html", mine)
    assert r.exit_code == 2 and str(mine) in r.output and mine.read_text() == "my notes", r.output
    r = cli("history", "--db", db, "--html", tmp_path / "page.html")
    assert r.exit_code in (0, 1), r.output  # 1: the step at c003 is new (the newest commit shows it)
    page = tmp_path / "page.html"
    assert "c003" in page.read_text()
    # a page to publish: a new file's usual mode (mkstemp's 0600 kept it from a web server), umask 022 here
    assert page.stat().st_mode & 0o777 == 0o666 & ~_umask(), oct(page.stat().st_mode)
    assert cli("history", "--db", db, "--html", page).exit_code in (0, 1)  # its own page: replaced
    page.write_text(page.read_text().replace("<h1>", "<p>my note on c003</p><h1>"))  # annotated: the user's now
    r = cli("history", "--db", db, "--html", page)
    assert r.exit_code == 2 and "was edited since" in " ".join(r.output.split()) and "my note" in page.read_text()


def test_the_benchmarks_figures_hold_on_a_small_draw():
    """benchmarks/bench_history.py's history (200 commits, sd 0.063, steps of 3 % and 10 %), 40 draws of another
    seed: the 10 % steps found and the false changes of noise alone stay where the benchmark put them (95 % and
    0.03-0.07 per history). Bounds: 10 % recall 0.95 over 40 steps, below 30 has binomial probability < 1e-5; false
    changes Poisson with mean 40 x 0.07 = 2.8, 10 or more has probability < 1e-3. A penalty off by a factor (sigma
    for sigma^2) or a noise estimate that counts the steps fails one of them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_history", TESTS.parent / "benchmarks" / "bench_history.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from vitbench.history.changes import changes

    rng = np.random.default_rng(11)
    found_10 = false = 0
    for _ in range(40):
        y, steps = bench.history(rng, 0.063, with_steps=True)
        at = next(a for a, s in steps.items() if abs(s) == 0.10)
        found_10 += any(abs(c.index - at) <= bench.TOLERANCE for c in changes(np.exp(y)))
        false += len(changes(np.exp(bench.history(rng, 0.063, with_steps=False)[0])))
    assert found_10 >= 30 and false < 10, (found_10, false)


def test_an_ab_run_s_busy_pairs_are_left_out_of_its_paired_points_as_the_gate_left_them(cli, tmp_path):
    """`ab` decides on the pairs its own meter saw quiet (TreeMeter, around the pair); under `turns` a row's own
    meter cannot see that load, so `history append` worked it out again from the rows and recorded paired points
    from pairs the gate had left out (all of them busy: a point where the gate said 'no quiet pair'). The gate's
    readings are kept in PAIRS_FILE and history uses them."""
    from vitbench.compare.ab import PAIRS_FILE
    from vitbench.history.collect import PAIRED_SUFFIX

    db, paired = tmp_path / "h.sqlite", "img_per_s" + PAIRED_SUFFIX
    # a pair without the gate's reading (null) is read from its rows, as the gate itself does (quiet here)
    for commit, loads, used in (("e" * 40, [2.0, 2.0, 2.0, 2.0], None), ("f" * 40, [0.1, 2.0, None, 0.2], 3)):
        d = _ab_dir(tmp_path / commit[0], 0.9, "a" * 40, cur=commit)
        (d / PAIRS_FILE).write_text(json.dumps({f"pair{n:02d}": x for n, x in enumerate(loads, start=1)}))
        assert cli("history", "append", d, "--db", db).exit_code == 0
        pts = [p for run, p in store.read(db) if run.commit == commit and p.metric == paired]
        if used is None:
            assert not pts, [p.raw for p in pts]
        else:
            assert pts and all(len(p.raw["pairs"]) == used for p in pts), [p.raw for p in pts]


def test_a_metric_bounded_by_another_is_one_series_per_value_of_it():
    """peak_mem_mib follows its row's memory_kind (CUDA-graph replays report the reserved peak, others the
    allocated one): one commit's change of kind is no regression of the code, as compare leaves it undecided; the
    history keeps a series per kind instead of one that steps at that commit. One kind stays one series."""
    from records import record

    from vitbench.history.collect import points_of

    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "infer", "device": "cuda", "resolution": 32,
           "batch_size": 8, "precision": "bf16", "compile": True, "compile_mode": "reduce-overhead"}

    def row(mem, kind):
        return record("bench", dict(cfg), metrics={"img_per_s": 100.0, "peak_mem_mib": mem, "memory_kind": kind,
                                                    "step_ms_median": 80.0, "batch_size_achieved": 8},
                      raw={"step_s": [0.08] * 5}, key="k", trial=dict(cfg), repeat=0)

    mem = [p for p in points_of([[row(367.0, "allocator")], [row(800.0, "allocator_reserved")]])
           if p.metric == "peak_mem_mib"]
    assert sorted((p.value, p.trial.endswith("[memory_kind=allocator]"), "allocator_reserved" in p.label)
                  for p in mem) == [(367.0, True, False), (800.0, False, True)]
    speed = [p for p in points_of([[row(367.0, "allocator")], [row(800.0, "allocator_reserved")]])
             if p.metric == "img_per_s"]
    assert len(speed) == 1 and "[" not in speed[0].trial  # a metric bounded by nothing keeps one series
    same = [p for p in points_of([[row(367.0, "allocator")], [row(370.0, "allocator")]])
            if p.metric == "peak_mem_mib"]
    assert len(same) == 1 and same[0].raw["rounds"] == [367.0, 370.0]


def test_a_step_in_a_series_of_mostly_equal_values_is_found():
    """A largest batch or an allocator's deterministic peak repeats its value exactly from commit to commit: the
    noise estimate (the MAD of successive differences) was 0, and a series at 0 noise found no change at all (64
    six times then 32 six times: none; found by a review). A value that wavers by one in 64 is still no change."""
    from vitbench.history.changes import changes

    (c,) = changes([64.0] * 6 + [32.0] * 6)
    assert c.index == 6 and c.size == pytest.approx(0.5, rel=1e-12) and c.confidence > 0.99
    assert changes([64.0, 64.0, 63.0, 64.0, 64.0, 64.0, 64.0, 63.0, 64.0, 64.0]) == []
    assert changes([64.0] * 12) == []


def test_a_largest_batch_of_0_is_said_not_dropped_in_silence():
    """Nothing fits any more (max_batch_size 0) is the worst change of a largest batch; a log-scale series cannot
    hold it, and the point was left out without a word (found by a review): it is named in a warning."""
    from records import record

    from vitbench.errors import VitbenchWarning
    from vitbench.history.collect import points_of

    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "max_batch", "device": "cpu", "resolution": 32,
           "precision": "fp32", "mode": "infer"}
    row = record("max_batch", dict(cfg), metrics={"max_batch_size": 0, "memory_limit_mib": 512.0}, key="k",
                 trial=dict(cfg), repeat=0)
    with pytest.warns(VitbenchWarning, match=r"1 value\(s\) <= 0 not in the history .*max_batch_size 0 of "):
        assert [p for p in points_of([[row]]) if p.metric == "max_batch_size"] == []


def test_two_series_never_share_a_label():
    """Each append labels its trials against its own directory's: two sweeps differing only in max_seconds made
    two series both named 'ViT-Nano/4 infer torch bs4 32px fp32 cpu'. They now carry the setting their trials
    differ in; a key that is no JSON object is told apart by its position."""
    from records import record

    from vitbench.history.collect import points_of
    from vitbench.history.series import build

    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "infer", "device": "cpu", "resolution": 32,
           "batch_size": 4, "precision": "fp32"}

    def row(max_s):
        c = {**cfg, "max_seconds": max_s}
        return record("bench", dict(c), metrics={"img_per_s": 100.0, "step_ms_median": 40.0,
                                                 "batch_size_achieved": 4}, raw={"step_s": [0.04] * 5}, key="k",
                      trial=dict(c), repeat=0)

    pts = [p for d in (row(1.0), row(2.0)) for p in points_of([[d]]) if p.metric == "img_per_s"]
    assert len({p.label for p in pts}) == 1 and len({p.trial for p in pts}) == 2  # (the case: one label, 2 keys)
    names = sorted(s.trial for s in build([(_run(f"c{i}", i), p) for i, p in enumerate(pts)]))
    assert names == [f"{pts[0].label} max_seconds={v}" for v in ("1.0", "2.0")], names
    odd = [_point(1.0, trial="t1"), _point(2.0, trial="t2")]
    for p in odd:
        p.label = "same"
    assert sorted(s.trial for s in build([(_run(f"c{i}", i), p) for i, p in enumerate(odd)])) == ["same #1",
                                                                                                    "same #2"]
