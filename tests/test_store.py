"""Results store: append-only JSONL that survives torn writes; load() -> tidy DataFrame; claims; study copy."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest
from records import record, with_fields

from vitbench.errors import VitbenchWarning
from vitbench.store import CorruptLineWarning, Store, read_records
from vitbench.tidy import load, select


def rec(i: int, status: str = "ok", kind: str = "bench", key: str | None = None, **metrics):
    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "infer", "resolution": 32, "batch_size": 2 + i}
    return record(kind, cfg, metrics={"img_per_s": 100.0 + i, "step_ms_median": 20.0, **metrics},
                  raw={"step_s": [0.02, 0.021, 0.019]}, env={"torch": "x", "threads": 2}, status=status,
                  key=key or f"k{i}", study="t", run_id="run", repeat=0, trial=cfg)


def test_round_trip_to_a_tidy_dataframe(tmp_path):
    with Store(tmp_path) as st:
        for i in range(3):
            st.append(rec(i))
        st.append(rec(3, status="oom"))
    df = load(tmp_path)
    assert len(df) == 4
    assert list(df["key"]) == ["k0", "k1", "k2", "k3"]
    for col in ("model", "backend", "task", "resolution", "batch_size", "img_per_s", "step_ms_median", "status",
                "env.torch", "raw"):
        assert col in df.columns, col
    assert df.loc[0, "img_per_s"] == 100.0 and df.loc[2, "batch_size"] == 4
    assert df.loc[3, "status"] == "oom"
    assert df.loc[0, "raw"]["step_s"] == [0.02, 0.021, 0.019]
    # one line per record, each a complete JSON object
    lines = (tmp_path / "results.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(x) for x in lines[:-1])


def test_rows_held_whole_share_their_run_s_environment_and_key_strings(tmp_path):
    """read_records (compare's, history's) holds every row: a run's equal environments are one object and the
    mappings' keys are interned (3.94 -> 2.10 GiB for compare of 2 x 100,000 rows); the values are the file's."""
    from vitbench.store import iter_records

    with Store(tmp_path) as st:
        for i in range(3):
            st.append(rec(i))
        other = rec(3)
        other.env = {"torch": "y", "threads": 2}
        st.append(other)
    held, streamed = read_records(tmp_path), list(iter_records(tmp_path))
    assert held == streamed  # every field equal
    assert held[0].env is held[1].env is held[2].env and held[3].env is not held[2].env
    first, second = (next(k for k in r.metrics if k == "step_ms_median") for r in held[:2])
    assert first is second  # one string for a name every row repeats
    assert next(iter(held[0].raw)) is next(iter(held[1].raw))


def test_a_row_of_a_newer_schema_stops_the_read(tmp_path):
    """A row of a newer vitbench's shape was read as this one's (`"schema": 999`: report and compare exit 0)."""
    from vitbench.errors import ConfigError

    d = rec(0).to_dict()
    (tmp_path / "results.jsonl").write_text(json.dumps(d) + "\n" + json.dumps({**d, "schema": 999}) + "\n")
    with pytest.raises(ConfigError, match=r"results.jsonl:2: a row of schema 999, written by a newer vitbench"):
        read_records(tmp_path)
    (tmp_path / "results.jsonl").write_text(json.dumps({**d, "schema": None}) + "\n")  # null: the default
    assert [r.schema for r in read_records(tmp_path)] == [1]


def test_torn_last_line_is_skipped_with_a_warning_and_good_rows_kept(tmp_path):
    with Store(tmp_path) as st:
        for i in range(3):
            st.append(rec(i))
    path = tmp_path / "results.jsonl"
    whole = json.dumps(rec(9).to_dict())
    with open(path, "ab") as f:
        f.write(whole[: len(whole) // 2].encode())  # a write cut by kill -9
    with pytest.warns(CorruptLineWarning, match=r"results.jsonl:4: skipped torn last line"):
        df = load(tmp_path)
    assert list(df["key"]) == ["k0", "k1", "k2"]
    # the next writer terminates the torn line first, so its own record is intact
    with Store(tmp_path) as st:
        st.append(rec(4))
    with pytest.warns(CorruptLineWarning, match=r":4: skipped unparseable line"):
        df = load(tmp_path)
    assert list(df["key"]) == ["k0", "k1", "k2", "k4"]


def test_garbage_in_the_middle_keeps_every_good_row(tmp_path):
    with Store(tmp_path) as st:
        st.append(rec(0))
    with open(tmp_path / "results.jsonl", "ab") as f:
        f.write(b"\x00\xffnot json at all\n[1, 2]\n")
    with Store(tmp_path) as st:
        st.append(rec(1))
    with pytest.warns(CorruptLineWarning) as w:
        recs = read_records(tmp_path)
    assert [r.key for r in recs] == ["k0", "k1"]
    assert len(w) == 2


def test_a_newer_row_without_an_end_time_is_placed_by_file_order(tmp_path):
    """An edited newer row whose finished_at is empty was taken as the oldest, so the older row won (a 2x
    'regression' in compare, an old value in report); without an end time, file order decides."""
    from vitbench.tidy import select

    old, new = rec(0), rec(0)
    new.metrics = {**new.metrics, "img_per_s": 300.0}
    new.finished_at = ""
    with Store(tmp_path) as st:
        st.append(old)
        st.append(new)
    (latest,) = select(read_records(tmp_path))
    assert latest.metrics["img_per_s"] == 300.0


def test_rows_of_another_shape_are_skipped_with_a_warning_not_a_traceback(tmp_path):
    """Envelope fields of the wrong type (a list key, a list env, a number timestamp, a string raw...) and JSON
    nested past Python's recursion limit: each such line is skipped with a warning naming it; the rest read."""
    good = json.loads(json.dumps(rec(0).to_dict()))
    odd = [{**good, "key": [1, 2]}, {**good, "env": [1, 2]}, {**good, "runner": ["x"]}, {**good, "raw": "abc"},
           {**good, "finished_at": 12345}, {**good, "repeat": "0"}, {**good, "repeat": True}]
    lines = [json.dumps(good), *map(json.dumps, odd), '{"a":' * 100000]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.warns(CorruptLineWarning) as w:
        recs = read_records(tmp_path)
    assert [r.key for r in recs] == ["k0"] and len(w) == len(odd) + 1
    assert "key (list, not a string)" in str(w[0].message) and "results.jsonl:2" in str(w[0].message)


def test_a_shard_that_cannot_be_read_stops_the_reader_naming_it(tmp_path):
    from vitbench.errors import ConfigError

    with Store(tmp_path) as st:
        st.append(rec(0))
    (tmp_path / "results.w-1.jsonl").symlink_to(tmp_path / "gone.jsonl")
    with pytest.raises(ConfigError, match="results.w-1.jsonl' is a link to nothing"):
        read_records(tmp_path)
    (tmp_path / "results.w-1.jsonl").unlink()
    (tmp_path / "results.w-1.jsonl").mkdir()
    with pytest.raises(ConfigError, match="results.w-1.jsonl' is not a file"):
        load(tmp_path)


def test_latest_row_per_key_wins_and_calibration_rows_are_separate(tmp_path):
    with Store(tmp_path) as st:
        st.append(rec(0, status="interrupted", key="a"))
        st.append(rec(1, key="b"))
        # made in the same millisecond as the first (a full-suite run): rows of one directory are never copies
        st.append(with_fields(rec(0, key="a", img_per_s=102.0), started_at=read_records(tmp_path)[0].started_at))
        st.append(record("calibration", {"backend": "torch", "device": "cpu"},
                         metrics={"matmul_tflops_per_s": 0.05}, raw={"matmul_tflops_per_s": [0.05, 0.049]},
                         key=None, run_id="run", study="t"))
    df = load(tmp_path)
    assert sorted(df["key"]) == ["a", "b"]
    assert df.set_index("key").loc["a", "status"] == "ok" and df.set_index("key").loc["a", "img_per_s"] == 102.0
    assert len(load(tmp_path, latest=False)) == 3
    cal_df = load(tmp_path, kinds=("calibration",))
    assert len(cal_df) == 1 and cal_df.loc[0, "matmul_tflops_per_s"] == 0.05
    assert len(load(tmp_path, kinds="all")) == 3
    assert Store(tmp_path).done_keys() == {"a", "b"}


def test_two_rows_of_one_key_and_different_trials_are_refused_by_every_reader(tmp_path):
    """A key is the hash of its trial and repeat: rows copied by hand with their settings changed and the key kept
    (2,000 rows of 200 trials) were read as one trial's reruns, the latest kept and every other trial gone from
    the report in silence. Refused naming both lines, by the report's, compare's and the sweep's readers alike;
    a rerun of the same trial is still a rerun. Found by a hostile-user round."""
    from vitbench.errors import ConfigError

    with Store(tmp_path) as st:
        st.append(rec(0, key="a"))
        st.append(rec(0, key="a", img_per_s=150.0))  # the same trial again: a rerun
    assert len(load(tmp_path)) == 1 and Store(tmp_path).done_keys() == {"a"}
    with Store(tmp_path) as st:
        st.append(with_fields(rec(1, key="a"), repeat=0))  # batch 3 under batch 2's key
    for read in (load, read_records, lambda p: Store(p).done_keys()):
        with pytest.raises(ConfigError, match=r"results.jsonl:3: .*key 'a'.*results.jsonl:1"):
            read(tmp_path)
    with Store(tmp_path / "b") as st:  # another repeat under the same key: two measurements pooled as one
        st.append(rec(0, key="r"))
        st.append(with_fields(rec(0, key="r"), repeat=1))
    with pytest.raises(ConfigError, match="results.jsonl:2"):
        load(tmp_path / "b")


def test_shards_are_merged_on_load(tmp_path):
    with Store(tmp_path) as st:
        st.append(rec(0))
    with Store(tmp_path, shard="w-worker-1") as st:
        st.append(rec(1))
    assert (tmp_path / "results.w-worker-1.jsonl").exists()
    assert sorted(load(tmp_path)["key"]) == ["k0", "k1"]


def test_a_store_copied_beside_itself_counts_each_measurement_once(tmp_path):
    # The GPU check resumed a store into a folder holding a copy of its first run: the report counted each row as
    # two repeats ("repeats=2") and 55 trials of 29
    with Store(tmp_path / "a") as st:
        for i in range(3):
            st.append(with_fields(rec(i), run_id="run1", started_at=f"2026-11-29T10:00:0{i}"))
    shutil.copytree(tmp_path / "a", tmp_path / "a" / "copy")
    with Store(tmp_path / "b") as st:  # another run of the same trials: other measurements, kept
        st.append(with_fields(rec(0), run_id="run2", started_at="2026-11-29T11:00:00"))
    with pytest.warns(VitbenchWarning, match=r"3 row\(s\) are copies .*copy \(3\)"):
        df = load(tmp_path)
    assert len(df) == 4 and sorted(df["run_id"]) == ["run1"] * 3 + ["run2"]


def test_a_command_s_row_copied_twice_is_one_measurement(tmp_path):
    """A `bench --json` row (no sweep run, no trial key for the latest-row rule) whose line was copied into its
    file twice counted as two runs: compare's between-run sd read 0.000 and an inconclusive verdict became "no
    change". The same start, finish, config and metrics is one measurement (within a file, across files); a
    row of another start is another."""
    from vitbench.record import Record

    def row(start: str, img: float = 100.0) -> Record:
        return Record.measured("bench", {"model": "ViT-Nano/4", "task": "infer", "threads": 1},
                               metrics={"img_per_s": img}, started_at=start)

    line = json.dumps(row("2026-12-03T10:00:00.000+00:00").to_dict()) + "\n"
    (tmp_path / "twice.jsonl").write_text(line + line)
    with pytest.warns(VitbenchWarning, match=r"1 row\(s\) are copies .*a command's row: the same start.*"
                                              r"counted once: .* \(1\)"):
        assert len(select(read_records(tmp_path / "twice.jsonl"))) == 1
    with pytest.warns(VitbenchWarning, match="are copies"):
        assert len(load(tmp_path / "twice.jsonl")) == 1
    other = json.dumps(row("2026-12-03T10:01:00.000+00:00").to_dict()) + "\n"
    (tmp_path / "two.jsonl").write_text(line + other)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no copy said
        assert len(select(read_records(tmp_path / "two.jsonl"))) == 2


@pytest.mark.parametrize("original, copy", [("a_orig", "b_copy"), ("b_orig", "a_copy")])
def test_which_copy_counts_does_not_depend_on_the_directories_names(tmp_path, original, copy):
    # The review: a run copied aside, then the trial re-run in the original; the copy's old row was served as
    # another run or not by which directory's name sorted first
    with Store(tmp_path / original) as st:
        st.append(with_fields(rec(0, img_per_s=100.0), run_id="run1", started_at="2026-11-29T10:00:00",
                              finished_at="2026-11-29T10:00:05"))
    shutil.copytree(tmp_path / original, tmp_path / copy)
    with Store(tmp_path / original) as st:  # re-run (--force): supersedes the old row in its own directory
        st.append(with_fields(rec(0, img_per_s=200.0), run_id="run2", started_at="2026-11-29T11:00:00",
                              finished_at="2026-11-29T11:00:05"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = sorted(load(tmp_path)["img_per_s"])
        picked = sorted(r.metrics["img_per_s"] for r in select(read_records(tmp_path)))
    assert got == picked == [100.0, 200.0]  # the copy's latest is one run, the original's latest another


def _writer(path: str, worker: int, n: int) -> None:
    with Store(path) as st:
        for i in range(n):
            st.append(rec(i, key=f"w{worker}-{i}", pad="x" * 5000))  # lines larger than PIPE_BUF


def test_concurrent_writers_never_interleave_lines(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 40)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    recs = read_records(tmp_path)  # no warnings: every line is whole
    assert sorted(r.key for r in recs) == sorted(f"w{w}-{i}" for w in range(3) for i in range(40))


def test_a_claim_is_exclusive_across_processes_and_released_on_death(tmp_path):
    st = Store(tmp_path)
    code = textwrap.dedent(f"""
        import sys, time
        from vitbench.store import Store
        st = Store({str(tmp_path)!r})
        print(st.claim("abc"), flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "True"
        assert st.claim("abc") is False  # held by the other process
        assert st.claim("other") is True
    finally:
        p.kill()
        p.wait()
    assert st.claim("abc") is True  # a killed holder releases its claim
    st.close()


def test_the_study_copy_lock_excludes_another_sweep_on_the_folder(tmp_path):
    """Two sweeps started into one folder at once each checked it before either wrote its study copy: the check
    and the copy are made under an exclusive lock on the folder (runner.run_study), which another sweep cannot take
    while it is held, and can once it is released."""
    import fcntl

    st = Store(tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with st.locked():
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the block
    finally:
        os.close(fd)
        st.close()


def test_study_copy_keeps_the_previous_version(tmp_path):
    st = Store(tmp_path)
    st.save_study("name: a\n")
    st.save_study("name: a\n")
    moved = r"study.yaml held another study text .*: kept as study\.\w{12}\.yaml"
    with pytest.warns(VitbenchWarning, match=moved):
        st.save_study("name: a\nrepeats: 2\n")  # a file moved is said (it may be the user's own)
    assert (tmp_path / "study.yaml").read_text() == "name: a\nrepeats: 2\n"
    old = [p for p in tmp_path.glob("study.*.yaml")]
    assert len(old) == 1 and old[0].read_text() == "name: a\n"
    # a copy the user edited in Latin-1 is kept byte for byte (it was a UnicodeDecodeError traceback, exit 1)
    (tmp_path / "study.yaml").write_bytes(b"name: a\n# caf\xe9\n")
    with pytest.warns(VitbenchWarning, match="held another study text"):
        st.save_study("name: a\n")
    assert {p.read_bytes() for p in tmp_path.glob("study.*.yaml")} == {b"name: a\n", b"name: a\n# caf\xe9\n"}


def test_missing_path_is_a_clear_error(tmp_path):
    from vitbench.errors import ConfigError

    with pytest.raises(ConfigError, match="does not exist"):
        load(tmp_path / "nope")


def test_each_record_is_fsynced(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    with Store(tmp_path) as st:
        st.append(rec(0))
        st.append(rec(1))
    assert len(calls) >= 2


def test_a_full_disk_leaves_no_torn_line_and_says_which_row_was_lost(tmp_path, monkeypatch, cli):
    """A write that fails half way (ENOSPC) was a traceback, exit 1 (a failed trial's code), with a torn line
    left in the file; now the file is as it was, and the error names it, the row lost, exit 2."""
    import errno

    from vitbench import paths, store
    from vitbench.paths import PathError

    with Store(tmp_path) as s:
        s.append(rec(1))
        size = s.path.stat().st_size
        real = store._write_all

        def half_then_full(fd, data):
            real(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(store, "_write_all", half_then_full)
        with pytest.raises(PathError, match=r"results.jsonl' cannot be written: the disk is full .*: trial k2's "
                                            r"row was not recorded"):
            s.append(rec(2, key="k2"))
        monkeypatch.setattr(store, "_write_all", real)
        assert s.path.stat().st_size == size
        s.append(rec(3))
    assert [r.key for r in read_records(tmp_path)] == ["k1", "k3"]

    def full(*a, **k):  # a file written whole or not at all: the old one kept, the error naming it
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "kept.txt").write_text("old")
    monkeypatch.setattr(paths.os, "fchmod", full)
    with pytest.raises(PathError, match=r"kept.txt' cannot be written: the disk is full"):
        paths.write_atomic(tmp_path / "kept.txt", "new")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".kept")] == []
    assert (tmp_path / "kept.txt").read_text() == "old"
    monkeypatch.undo()

    def full_write(self, data):  # any other write of a command: one line naming the disk, exit 2
        raise OSError(errno.ENOSPC, "No space left on device")

    (tmp_path / "law.csv").write_text("c,e\n" + "".join(f"{10 ** (i / 4)},{1 / (1 + i)}\n" for i in range(12)))
    monkeypatch.setattr(paths.Path, "write_bytes", full_write)
    r = cli("fit", tmp_path / "law.csv", "--compute", "c", "--error", "e", "--out", tmp_path / "fit")
    assert r.exit_code == 2 and "cannot be written: the disk is full" in r.output, r.output
    assert "Traceback" not in r.output


def test_a_claim_a_full_disk_refuses_names_its_file_and_leaves_the_trial_free(tmp_path, monkeypatch, cli):
    """A claim's lock file that a full disk would not take said 'a file cannot be written' (its pwrite names
    none); now the error names the lock file and the trial, and the claim is released: the trial stays free."""
    import errno

    from vitbench.paths import PathError
    from vitbench.store import claim_path

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", full)
    with Store(tmp_path) as s, Store(tmp_path) as other:
        with pytest.raises(PathError, match=r"claims/k1.lock' cannot be written: the disk is full .*: trial k1 "):
            s.claim("k1")
        monkeypatch.setattr(os, "pwrite", real)
        assert other.claim("k1")  # not held by the store that failed
        other.release("k1")
        assert s.claim("k1")
    assert claim_path(tmp_path, "k1").read_text().endswith(f" {os.getpid()}\n")

    study = tmp_path / "tiny.yaml"
    study.write_text("name: t\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [flops]}\n")
    monkeypatch.setattr(os, "pwrite", full)
    r = cli("sweep", study, "--results", tmp_path / "res")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert re.search(r"error: claim file '\S*res/claims/\w+\.lock' cannot be written: the disk is full",
                     " ".join(r.output.split())), r.output


def test_done_keys_follow_rows_appended_by_another_writer(tmp_path):
    """The sweep asks before every trial whether another sweep finished it: kept as rows are read (no rebuild
    from every row per trial), rows another process appends included."""
    mine, other = Store(tmp_path), Store(tmp_path, shard="w-1")
    mine.append(rec(1))
    mine.append(rec(2, status="error"))
    assert mine.done_keys() == {"k1", "k2"} and mine.done_keys(only_ok=True) == {"k1"}
    assert not mine.is_done("k3")
    other.append(rec(3))  # another sweep's worker, into its shard
    other.append(rec(4, status="interrupted"))  # not terminal: it runs again
    assert mine.is_done("k3") and mine.is_done("k3", only_ok=True) and not mine.is_done("k4")
    assert not mine.is_done("k2", only_ok=True)
    keys = mine.done_keys()
    keys.add("x")  # the caller's copy
    assert not mine.is_done("x")


@pytest.mark.parametrize("how", ["an editor's save", "removed"])
def test_a_results_file_replaced_while_a_sweep_runs_gets_the_rows_after_it(tmp_path, how):
    """The store kept the descriptor it opened first: a results.jsonl saved by an editor (a new file at the path)
    or removed mid-sweep took every later row into the unlinked file, lost, while the sweep said all ok. Now a row
    goes into the file at the path, with a warning, and what the sweep has read is the files as they are now."""
    path = tmp_path / "results.jsonl"
    st = Store(tmp_path)
    st.append(rec(1))
    st.append(rec(2))
    assert st.done_keys() == {"k1", "k2"}
    if how == "removed":
        path.unlink()
    else:  # the editor kept row 1 only, and wrote a new file in the old one's place
        (tmp_path / "saved").write_text(path.read_text().splitlines()[0] + "\n")
        os.replace(tmp_path / "saved", path)
    with pytest.warns(VitbenchWarning, match="was replaced or removed while this sweep ran"):
        st.append(rec(3))
    st.append(rec(4))  # the file it now holds: no second warning needed, none lost
    kept = ["k1"] if how != "removed" else []
    assert [r.key for r in read_records(tmp_path)] == [*kept, "k3", "k4"]
    assert st.done_keys() == {*kept, "k3", "k4"}  # what it read of the old file is not taken as done
    st.close()


@pytest.mark.parametrize("literal", ["1e999", "-1E+400", "1" + "0" * 400 + ".5", "NaN", "-Infinity",
                                     "1" + "0" * 400, "-" + "9" * 309])
def test_a_number_that_is_not_finite_is_refused_naming_the_line(tmp_path, literal):
    """Every spelling of a non-finite number (vitbench writes null for one) is refused, naming the line; an
    integer beyond a float's range too (10**400 as digits was a traceback, OverflowError, in every reader)."""
    from vitbench.errors import ConfigError

    with Store(tmp_path) as s:
        s.append(rec(1))
    line = (tmp_path / "results.jsonl").read_text().rstrip("\n")
    (tmp_path / "results.jsonl").write_text(line + "\n" + line.replace('"img_per_s":', f'"x": {literal}, '
                                                                                         '"img_per_s":') + "\n")
    with pytest.raises(ConfigError, match=r"results.jsonl:2: the row holds .* \(a non-finite number\)"):
        read_records(tmp_path)


@pytest.mark.parametrize("where", ["top", "metrics"])
def test_a_key_written_twice_in_a_row_is_refused_naming_the_line_and_key(tmp_path, where, cli):
    """JSON keeps the last of two equal keys without a word: an edited row whose second "metrics" (or second
    img_per_s) differs was read as the last one's (found by a hostile-input review). vitbench never writes one:
    the line and key are named, and a command exits 2."""
    from vitbench.errors import ConfigError

    with Store(tmp_path) as s:
        s.append(rec(1))
    line = (tmp_path / "results.jsonl").read_text().rstrip("\n")
    edited = ('{"metrics": {"img_per_s": 99999.0}, ' + line[1:] if where == "top"
              else line.replace('"img_per_s":', '"img_per_s": 99999.0, "img_per_s":'))
    (tmp_path / "results.jsonl").write_text(line + "\n" + edited + "\n")
    key = "metrics" if where == "top" else "img_per_s"
    with pytest.raises(ConfigError, match=rf"results.jsonl:2: the row holds the key '{key}' twice"):
        read_records(tmp_path)
    r = cli("report", str(tmp_path), "--no-plots", "--format", "md", "--out", str(tmp_path / "rep"))
    assert r.exit_code == 2 and "Traceback" not in r.output and "twice" in r.output


def test_a_reader_that_stops_early_still_hears_of_demoted_rows(tmp_path):
    """iter_records is a generator: the one warning for the rows it demoted is said when a reader stops early
    too."""
    from vitbench.store import UnmeasuredRowWarning, iter_records
    from vitbench.tasks import row_check

    with Store(tmp_path) as st:
        for i in range(3):
            st.append(rec(i))
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    for d in lines:
        d["metrics"].pop("img_per_s")
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    with pytest.warns(UnmeasuredRowWarning, match="1 ok row"):
        it = iter_records(tmp_path, row_check())
        assert next(it).status.value == "error"
        it.close()


def test_an_int_beyond_a_float_is_no_finite_number():
    """record.finite_number, every reader's test: math.isfinite raised OverflowError on 10**400."""
    from vitbench.record import finite_number

    assert finite_number(10 ** 300) and not finite_number(10 ** 400) and not finite_number(-(10 ** 400))


def test_a_side_file_beside_the_store_is_not_read(tmp_path):
    """A user's `results-old.jsonl` beside `results.jsonl` was read with it (the latest row winning): the report
    showed the side file's numbers. A store is results.jsonl and its shards, results.w-<host>.jsonl: a copy named
    results.bak.jsonl (or results.<date>.jsonl) matched the shards' old pattern, results.*.jsonl, and its rows
    were trials done (a sweep ran none of them); it is not read, and said."""
    from vitbench.store import result_files

    with Store(tmp_path) as s:
        s.append(rec(1))
    text = (tmp_path / "results.jsonl").read_text()
    (tmp_path / "results-old.jsonl").write_text(text)
    (tmp_path / "results.w-node1.jsonl").write_text(text)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mydata.jsonl").write_text(text)  # rows of the user's own: said too, not read
    with pytest.warns(VitbenchWarning, match=r"results-old\.jsonl' and 1 more not read: not a file of the store "
                                              r".*give the file itself or a folder of its own"):
        assert [f.name for f in result_files(tmp_path)] == ["results.jsonl", "results.w-node1.jsonl"]
    (tmp_path / "sub" / "mydata.jsonl").unlink()
    (tmp_path / "results-old.jsonl").unlink()
    (tmp_path / "results.jsonl").rename(tmp_path / "results.bak.jsonl")
    (tmp_path / "results.w-node1.jsonl").unlink()
    with pytest.warns(VitbenchWarning, match=r"results\.bak\.jsonl' not read: not a file of the store"):
        assert result_files(tmp_path) == []
    with pytest.warns(VitbenchWarning, match="not read"):
        assert Store(tmp_path).done_keys() == set()


def test_a_setting_longer_than_any_vitbench_writes_stops_the_read(tmp_path):
    """A 5 MB model name in an edited row made compare print 5 MB, history 10 MB and the report's legend a
    traceback; a setting is at most a path's limit (SETTING_CHARS), else the read stops naming the line."""
    from vitbench.errors import ConfigError
    from vitbench.store import SETTING_CHARS

    with Store(tmp_path) as s:
        s.append(rec(1))
    d = json.loads((tmp_path / "results.jsonl").read_text())
    d["config"]["model"] = "M" * (SETTING_CHARS + 1)
    (tmp_path / "results.jsonl").write_text(json.dumps(d) + "\n")
    with pytest.raises(ConfigError, match=rf"results.jsonl:1: the row's model is {SETTING_CHARS + 1} characters"):
        read_records(tmp_path)


def test_an_interrupted_rerun_leaves_the_trial_as_its_last_outcome_everywhere(tmp_path):
    """A timed-out trial retried (--retry-failed) or an ok one re-run (--force), then interrupted: the resume
    skipped it (a terminal row exists: store.done_keys) while the report showed 'interrupted' with no measurement
    and the exit code said nothing failed. Every reader now takes the last row with an outcome."""
    import time

    from vitbench.tidy import select

    with Store(tmp_path / "r") as st:
        for i, (key, first) in enumerate((("t", "timeout"), ("o", "ok"))):  # a key is one trial's: rec(i)
            st.append(rec(i, status=first, key=key))
            time.sleep(0.01)
            st.append(rec(i, status="interrupted", key=key))
        time.sleep(0.01)
        st.append(rec(1, status="skipped", key="o"))
        assert st.done_keys() == {"t", "o"}  # what a resumed sweep skips
        state = {r.key: r.status.value for r in select(st.refresh(), kinds="all")}
    assert state == {"t": "timeout", "o": "ok"}, state
    # the report's reader too: it took the latest row by end time, so the ok measurement vanished from the report,
    # its CSV and `fit` while the sweep counted it done (found by a review)
    from vitbench.tidy import load

    df = load(tmp_path / "r", kinds="all")
    assert dict(zip(df["key"], df["status"])) == {"t": "timeout", "o": "ok"}


def test_retry_failed_reruns_a_trial_ok_once_and_failed_since(tmp_path):
    """--retry-failed re-runs a trial whose latest row is not ok; a trial ok once, then timed out under --force,
    counted as done (any ok row ever), so the sweep exited 1 on every run while advising the flag that did
    nothing (found by a review). Its latest outcome decides; a rerun that is ok again makes it done again."""
    import time

    with Store(tmp_path / "r") as st:
        st.append(rec(1, status="ok", key="k"))
        time.sleep(0.01)
        st.append(rec(1, status="timeout", key="k", img_per_s=102.0))
        assert st.done_keys(only_ok=True) == set() and st.done_keys() == {"k"}
        time.sleep(0.01)
        st.append(rec(1, status="interrupted", key="k", img_per_s=103.0))  # no outcome: the timeout stays
        assert not st.is_done("k", only_ok=True)
        time.sleep(0.01)
        st.append(rec(1, status="ok", key="k", img_per_s=104.0))
        assert st.is_done("k", only_ok=True)


_CLAIM_MANY = """
import resource, sys
from vitbench.paths import PathError
from vitbench.store import Store
soft = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, int(sys.argv[3]) if len(sys.argv) > 3 else
                                             resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
store = Store(sys.argv[1])
try:
    held = sum(store.claim(f"k{i}") for i in range(3 * soft))
    print("held", held, resource.getrlimit(resource.RLIMIT_NOFILE)[0] > soft)
except PathError as e:
    print("refused", e)
"""


def test_claims_past_the_soft_open_files_limit_raise_it_or_say_what_to_do(tmp_path):
    """A sweep holds one open lock per trial in flight (slurm and ray put every pending trial in flight): past
    the soft limit of open files the store raises it towards the hard one; where the hard one is reached too, the
    refusal names the remedy (max_parallel, ulimit -n). A resume of 1,793 trials under a soft limit of 1,024
    claimed none before."""
    import resource

    soft, hard = 64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4 * soft:
        pytest.skip(f"the hard limit of open files here ({hard}) leaves no room above {soft}")
    out = subprocess.run([sys.executable, "-c", _CLAIM_MANY, str(tmp_path / "a"), str(soft)],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["held", str(3 * soft), "True"], out.stdout + out.stderr
    out = subprocess.run([sys.executable, "-c", _CLAIM_MANY, str(tmp_path / "b"), str(soft), str(soft)],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("refused") and "max_parallel" in out.stdout and "ulimit -n" in out.stdout, \
        out.stdout + out.stderr
