"""The cache directory's listing and pruning (vitbench.caches, `vitbench cache`): what has gone unused goes, what
is in use or a measurement stays, a dry run removes nothing, and reading a cached value counts as use."""

from __future__ import annotations

import json
import os
import time

import pytest

from vitbench import caches, paths, value_cache

DAY = caches.DAY_S
OLD, NEW = "0" * 32 + ".json", "1" * 32 + ".json"  # value entries' names as value_cache makes them


@pytest.fixture
def root(monkeypatch, tmp_path):
    """A cache directory with two compile caches (one written 40 days ago, one today), two value entries (40 days
    old, today) and a measurement file (40 days old)."""
    root = tmp_path / "cache"
    monkeypatch.setenv(paths.CACHE_ENV, str(root))
    monkeypatch.delenv(paths.COMPILE_CACHE_ENV, raising=False)
    old, new = paths.compile_root(root) / "fw-1.0-host", paths.compile_root(root) / "fw-2.0-host"
    for d in (old, new):
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "entry").write_bytes(b"x" * 1000)
        (d / "top").write_bytes(b"y" * 24)
        (d / paths.COMPILE_MARK).touch()  # what paths.open_compile_cache writes
    values = root / value_cache.SUBDIR / "flops"
    values.mkdir(parents=True)
    (values / OLD).write_text("{}")
    (values / NEW).write_text("{}")
    (root / "peaks.json").write_text("{}")
    past = time.time() - 40 * DAY
    for p in (old / "sub" / "entry", old / "top", old / paths.COMPILE_MARK, old / "sub", old, values / OLD,
              root / "peaks.json"):
        os.utime(p, (past, past))
    return root


def test_the_listing_has_each_compile_cache_each_kind_of_value_and_each_file(root):
    listed = {str(p.path.relative_to(root)): p for p in caches.parts(root)}
    assert set(listed) == {"compile/fw-1.0-host", "compile/fw-2.0-host", "values/flops", "peaks.json"}
    assert listed["compile/fw-1.0-host"].files == 3 and listed["compile/fw-1.0-host"].bytes == 1024  # + the mark
    assert listed["values/flops"].files == 2 and listed["peaks.json"].kind is caches.PartKind.FILE
    assert listed["compile/fw-1.0-host"].newest < time.time() - 39 * DAY < listed["compile/fw-2.0-host"].newest


def test_prune_removes_what_went_unused_and_keeps_the_rest(root):
    dry = caches.prune(30, root, dry_run=True)
    assert {str(p.relative_to(root)) for p in dry.removed} == {"compile/fw-1.0-host", f"values/flops/{OLD}"}
    assert dry.bytes == 1024 + 2 and (paths.compile_root(root) / "fw-1.0-host").exists()  # nothing removed
    done = caches.prune(30, root)
    assert done == dry
    left = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert left == {"compile/fw-2.0-host/sub/entry", "compile/fw-2.0-host/top", f"values/flops/{NEW}",
                    f"compile/fw-2.0-host/{paths.COMPILE_MARK}",
                    "peaks.json"}  # the measurement stays, however old
    assert caches.prune(30, root).removed == ()
    assert {str(p.relative_to(root)) for p in caches.prune(0, root, now=time.time() + 1).removed} == {
        "compile/fw-2.0-host", f"values/flops/{NEW}"}


def test_a_compile_cache_written_to_recently_in_any_file_stays_whole(root):
    d = paths.compile_root(root) / "fw-1.0-host"
    os.utime(d / "sub" / "entry")  # one file written now
    assert caches.prune(30, root).removed == (root / value_cache.SUBDIR / "flops" / OLD,)
    assert (d / "top").exists()


def test_opening_a_compile_cache_counts_as_use(root):
    d = paths.compile_root(root) / "fw-1.0-host"
    assert paths.open_compile_cache(d) == d  # what a backend's cache.enable does with its directory
    assert caches.prune(30, root).removed == (root / value_cache.SUBDIR / "flops" / OLD,)
    assert (d / "sub" / "entry").exists()


def test_reading_a_cached_value_counts_as_use(root):
    def compute():
        return {"n": 1}

    value_cache.remembered("flops", {"m": 1}, ("numpy",), compute)
    listed = (root / value_cache.SUBDIR / "flops").iterdir()
    (entry,) = [p for p in listed if p.name not in (OLD, NEW)]
    past = time.time() - 40 * DAY
    os.utime(entry, (past, past))
    assert value_cache.remembered("flops", {"m": 1}, ("numpy",), compute).cached
    assert entry not in caches.prune(30, root).removed and entry.exists()


def test_a_negative_age_is_refused():
    with pytest.raises(ValueError, match="days"):
        caches.prune(-1)


def test_the_command_lists_prunes_and_refuses_bad_input(cli, root):
    r = cli("cache", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["cache_dir"] == str(root) and len(doc["parts"]) == 4 and "pruned" not in doc
    r = cli("cache", "--prune", "30", "--dry-run", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["pruned"]["bytes"] == 1026
    assert (paths.compile_root(root) / "fw-1.0-host").exists()
    r = cli("cache", "--prune", "30")
    assert r.exit_code == 0 and "removed 2" in r.stdout and "compile/fw-1.0-host" in r.stdout
    assert not (paths.compile_root(root) / "fw-1.0-host").exists()
    for bad in ("-1", "abc"):
        r = cli("cache", "--prune", bad)
        assert r.exit_code == 2 and "--prune" in r.output
    r = cli("cache", "--dry-run")  # alone it would look like a listing of what a prune removes
    assert r.exit_code == 2 and "only with --prune" in r.output


def test_prune_never_follows_a_link_to_a_user_s_files(root, tmp_path, cli):
    """A link in the cache directory (a value kind or a compile cache that is a link to the user's directory, a
    link inside a compile cache, a link among the files) is never followed: the user's files, however old, stay;
    a compile cache that goes takes its inner link with it as a link, not what it points to."""
    user = tmp_path / "userdata"
    (user / "sub").mkdir(parents=True)
    mine = [user / "thesis.tex", user / "sub" / "data.csv"]
    for f in mine:
        f.write_text("mine")
    past = time.time() - 40 * DAY
    for f in mine:
        os.utime(f, (past, past))
    (root / value_cache.SUBDIR / "kindX").symlink_to(user)
    (paths.compile_root(root) / "torch-link").symlink_to(user)
    (paths.compile_root(root) / "fw-1.0-host" / "inner").symlink_to(user)
    os.utime(paths.compile_root(root) / "fw-1.0-host", (past, past))  # (the link made it new)
    (root / "linked.json").symlink_to(mine[0])
    assert {p.path.name for p in caches.parts(root)} == {"fw-1.0-host", "fw-2.0-host", "flops", "peaks.json"}
    r = cli("cache", "--prune", "30", "--json")
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(r.stdout)["pruned"]["paths"]) == ["compile/fw-1.0-host", f"values/flops/{OLD}"]
    assert all(f.read_text() == "mine" for f in mine)
    assert (paths.compile_root(root) / "torch-link").is_symlink() and (root / "linked.json").is_symlink()


def test_prune_removes_only_what_is_provably_vitbench_s(tmp_path, monkeypatch, cli):
    """$VITBENCH_CACHE_DIR naming a folder of the user's with compile/ and values/ of their own: their old folders
    and files are kept and said, never removed (before: both went). A compile cache vitbench opens is marked."""
    user = tmp_path / "thesis"
    (user / "compile" / "my-thesis").mkdir(parents=True)
    (user / "compile" / "my-thesis" / "chapter1.tex").write_text("mine")
    (user / "values" / "notes").mkdir(parents=True)
    (user / "values" / "notes" / "n.txt").write_text("mine")
    past = time.time() - 10 * DAY
    for f in [*user.rglob("*")]:
        os.utime(f, (past, past))
    monkeypatch.setenv(paths.CACHE_ENV, str(user))
    r = cli("cache", "--prune", "1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)["pruned"]
    assert doc["paths"] == [] and sorted(doc["kept"]) == ["compile/my-thesis", "values/notes/n.txt"]
    assert (user / "compile" / "my-thesis" / "chapter1.tex").read_text() == "mine"
    assert (user / "values" / "notes" / "n.txt").read_text() == "mine"
    opened = paths.open_compile_cache(paths.compile_root(user) / "fw-3.0-host")
    assert (opened / paths.COMPILE_MARK).is_file()


def test_what_prune_could_not_remove_is_said_not_counted(root, monkeypatch):
    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(caches.shutil, "rmtree", refuse)
    pruned = caches.prune(30, root)
    assert [p.name for p in pruned.removed] == [OLD]
    assert [(p.name, why) for p, why in pruned.failed] == [("fw-1.0-host", "Permission denied")]
    assert pruned.bytes == 2


def test_a_cache_or_lock_that_is_not_of_its_kind_is_refused_naming_it(monkeypatch, tmp_path):
    """Issue 50: a cache directory that is a file (or inside one), a file where vitbench writes a directory or
    the reverse: refused naming the path (PathError: bad input, exit 2), never FileExistsError or
    NotADirectoryError. PathError is an OSError too, so what goes on without a cache (the matmul peaks) still
    does."""
    from vitbench.errors import ConfigError
    from vitbench.measure import peak

    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    for where in (a_file, a_file / "cache"):
        monkeypatch.setenv(paths.CACHE_ENV, str(where))
        with pytest.raises(paths.PathError, match=f"cache directory \\(\\${paths.CACHE_ENV}\\) '{where}'"):
            paths.open_compile_cache(paths.compile_cache_dir("fw"))
        with pytest.raises(paths.PathError, match="a-file"):
            paths.write_atomic(where / "peaks.json", "{}")
        with pytest.raises(paths.PathError, match="a-file"), paths.locked(where / "peaks.json"):
            pass
    assert issubclass(paths.PathError, ConfigError) and issubclass(paths.PathError, OSError)
    assert a_file.read_text() == "mine"  # nothing written over it
    reading = peak.Reading(tflops=1.0, by="torch", at="now", how="matmul", backend="torch")
    assert peak.offer("k", reading)["readings"]  # no cache to keep it in: the reading still counts
    (tmp_path / "d.lock").mkdir()  # a lock that is a directory
    with pytest.raises(paths.PathError, match=r"d\.lock' is a directory"), paths.locked(tmp_path / "d.json"):
        pass
    (tmp_path / "out.json").mkdir()  # a directory where a file is written
    with pytest.raises(paths.PathError, match=r"out\.json' is a directory"):
        paths.write_atomic(tmp_path / "out.json", "{}")


def test_a_compile_cache_other_users_can_write_is_never_loaded(root, cli):
    """The backends load a compile cache's files as code (torch's inductor unpickles its FX graphs): a cache
    directory another user can write to, or owns, is refused naming it (exit 2), before any trial of a sweep."""
    fw = paths.compile_root(root) / "fw-2.0-host"
    assert paths.open_compile_cache(fw) == fw  # the user's own, 0755: used
    os.chmod(fw, 0o775)  # group-writable: the user's choice (a team's cache)
    assert paths.open_compile_cache(fw) == fw
    for d in (fw, paths.compile_root(root)):
        os.chmod(d, 0o777)
        with pytest.raises(paths.PathError, match=f"compile cache '{d}' is writable by every user, mode 777"):
            paths.open_compile_cache(fw)
        os.chmod(d, 0o755)
    os.chmod(paths.compile_root(root), 0o1777)  # sticky: others still add their own directories in it
    with pytest.raises(paths.PathError, match="writable by every user"):
        paths.check_cache_dir()
    paths.check_cache_dir(compiling=False)  # `vitbench cache` still lists it and prunes vitbench's own
    r = cli("bench", "ViT-Nano/4", "--backend", "torch")
    assert r.exit_code == 2 and "is writable by every user" in r.output, r.output
    os.chmod(paths.compile_root(root), 0o755)
    if os.geteuid() == 0:  # only root can give a directory to another user
        os.chown(fw, 4321, 4321)  # another user's, in a group not ours
        with pytest.raises(paths.PathError, match=r"owned by another user \(uid 4321\)"):
            paths.open_compile_cache(fw)
        os.chown(fw, 4321, os.getegid())  # a teammate's, in our group: a team's cache
        assert paths.open_compile_cache(fw) == fw
        os.chown(fw, 0, 0)


def test_a_compile_cache_made_under_umask_000_is_not_refused_as_others(monkeypatch, tmp_path):
    """A CI container's umask 000 made the cache's new directories writable by every user, and the trust check
    then refused what vitbench had just made, trial after trial: what this process makes is never o+w."""
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "fresh"))
    old = os.umask(0)
    try:
        made = paths.open_compile_cache(paths.compile_cache_dir("fw-1.0"))
    finally:
        os.umask(old)
    for d in (made, made.parent):
        assert not os.stat(d).st_mode & 0o002, oct(os.stat(d).st_mode)


def test_what_a_killed_writer_left_beside_a_file_is_removed_by_the_next_write(tmp_path):
    """A kill -9 in the middle of write_atomic left its hidden temporary (a 23 MB partial checkpoint) for ever;
    the next write of the same file removes such leftovers, never a live writer's, a link or another file's."""
    target = tmp_path / "ck.safetensors"
    names = (".ck.safetensors.dead1234.tmp", ".ck.safetensors.live5678.tmp", ".ck.safetensors.link0000.tmp",
             ".other.safetensors.dead.tmp")
    old, young, link, other = (tmp_path / n for n in names)
    for p in (old, young, other):
        p.write_bytes(b"partial")
    link.symlink_to(other)
    past = time.time() - paths.STALE_TEMP_S - 60
    for p in (old, other):
        os.utime(p, (past, past))
    os.utime(link, (past, past), follow_symlinks=False)
    paths.write_atomic(target, b"whole")
    assert target.read_bytes() == b"whole"
    assert not old.exists() and young.exists() and link.is_symlink() and other.exists()


def test_an_entry_that_cannot_be_looked_at_is_named_not_a_traceback(cli, root, monkeypatch):
    """An entry of the cache directory whose stat fails (its permissions: /proc/1's cwd as root) ended `vitbench
    cache` in a PermissionError traceback; it is one line naming the directory and the entry, exit 2."""
    real = caches._part

    def denied(kind, path):
        if path.name == "fw-1.0-host":
            raise PermissionError(13, "Permission denied", str(path))
        return real(kind, path)

    monkeypatch.setattr(caches, "_part", denied)
    r = cli("cache")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "fw-1.0-host cannot be looked at: Permission denied" in r.output and "cache directory" in r.output
