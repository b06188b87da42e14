"""Fork servers (vitbench.forkservers): one per preload list, children that inherit only their server's imports,
a trial's children forked by its own server, and a probe that ends with the process that asked for it."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from vitbench import forkservers

needs_servers = pytest.mark.skipif(forkservers.unavailable is not None, reason=str(forkservers.unavailable))

# Two stdlib modules a bare interpreter does not import, one per server
A, B = "wave", "imaplib"


def _report(queue) -> None:
    queue.put((os.getpid(), os.getppid(), A in sys.modules, B in sys.modules))


def _ask_own_server_for_a_sibling(queue) -> None:
    p = forkservers.process((B,), _report, (queue,), reuse_parent=True)
    p.start()
    p.join()
    queue.put(("me", os.getppid(), p.exitcode))


def _run(preload, target, queue, **kw):
    p = forkservers.process(preload, target, (queue,), **kw)
    p.start()
    p.join(timeout=120)
    assert p.exitcode == 0
    return queue.get(timeout=10)


@needs_servers
def test_one_server_per_preload_list_and_each_child_inherits_only_its_own():
    q = mp.get_context("spawn").Queue()
    a1, a2, b = _run((A,), _report, q), _run((A,), _report, q), _run((B,), _report, q)
    assert a1[2:] == a2[2:] == (True, False) and b[2:] == (False, True)
    assert a1[1] == a2[1] != b[1] and os.getpid() not in (a1[1], b[1])  # forks of two servers, not of us
    assert a1[0] != a2[0]  # a fresh process each time


@needs_servers
def test_a_child_asks_the_server_that_forked_it_for_its_own_children():
    q = mp.get_context("spawn").Queue()
    p = forkservers.process((A,), _ask_own_server_for_a_sibling, (q,))
    p.start()
    p.join(timeout=120)
    sibling, me = q.get(timeout=10), q.get(timeout=10)
    assert me[0] == "me" and me[2] == 0
    assert sibling[1] == me[1]  # the sibling's parent is the server that forked the asking child
    assert sibling[2:] == (True, False)  # so it inherits that server's imports, not those of the list it named


def _nothing() -> None:
    pass


def _sleep() -> None:
    time.sleep(120)


def _ask_for_a_child_then_wait(queue) -> None:
    p = forkservers.process((A,), _sleep)
    p.start()
    queue.put(p.pid)
    time.sleep(120)


@needs_servers
def test_a_child_ends_when_the_process_that_asked_for_it_is_killed():
    # its parent is the fork server, which lives on: the kernel's parent-death signal cannot tell it
    q = mp.get_context("spawn").Queue()
    asker = mp.get_context("spawn").Process(target=_ask_for_a_child_then_wait, args=(q,))
    asker.start()
    child = q.get(timeout=60)
    time.sleep(0.5)
    assert psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE
    os.kill(asker.pid, signal.SIGKILL)  # no handler, no clean-up: only the kernel closing its files
    asker.join(timeout=30)
    deadline = time.monotonic() + 30
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child outlived the process that asked for it"
        time.sleep(0.1)


@needs_servers
def test_a_refused_close_leaves_the_child_running():
    p = forkservers.process((A,), _sleep)
    p.start()
    try:
        with pytest.raises(ValueError):  # multiprocessing refuses to close a running process
            p.close()
        time.sleep(0.5)
        assert p.is_alive()  # not ended by the asker's end of its requester pipe being closed
    finally:
        p.kill()
        p.join(timeout=30)


@needs_servers
def test_a_child_that_ended_is_let_go_on_join():
    p = forkservers.process((A,), _nothing)
    p.start()
    p.join(timeout=60)
    assert p.exitcode == 0 and p._keep.closed  # the asker's end of the child's requester pipe


SCRIPT = """
import os, sys
with open(sys.argv[1] if __name__ == "__main__" else os.environ["RUNS_FILE"], "a") as f:
    f.write(__name__ + "\\n")  # every run of this script's top level


def child():
    pass


if __name__ == "__main__":
    os.environ["RUNS_FILE"] = sys.argv[1]
    from vitbench import forkservers

    for _ in range(3):
        p = forkservers.process(("wave",), child)
        p.start()
        p.join()
        assert p.exitcode == 0
"""


@needs_servers
def test_the_server_runs_the_main_script_once_not_each_child(tmp_path):
    """Its children find `__main__` imported (CPython 3.11-3.13.7 never passed the script to its server:
    gh-126631); so 1 run in the parent and 1 in the server, however many children."""
    import subprocess

    script, runs = tmp_path / "main_script.py", tmp_path / "runs.txt"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(forkservers.__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(script), str(runs)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert runs.read_text().split() == ["__main__", "__mp_main__"]


# ---- another Python: what the module relies on is checked once, by structure ----------------------------------
def _owner(module: str, path: str):
    import importlib

    obj = importlib.import_module(module)
    for name in path.split(".")[:-1]:
        obj = getattr(obj, name)
    return obj, path.split(".")[-1]


@pytest.mark.parametrize("module, path", [(m, p) for m, p, _ in forkservers.INTERNALS])
def test_each_internal_missing_is_named(monkeypatch, module, path):
    assert forkservers.why_unavailable() is None  # this Python has them all
    monkeypatch.delattr(*_owner(module, path))
    assert forkservers.why_unavailable() == f"{module}.{path} is missing (another Python?)"


@pytest.mark.parametrize("module, path", [(m, p) for m, p, n in forkservers.INTERNALS if n is not None])
def test_each_internal_not_callable_or_with_other_parameters_is_named(monkeypatch, module, path):
    owner, name = _owner(module, path)
    monkeypatch.setattr(owner, name, 42)
    assert forkservers.why_unavailable() == f"{module}.{path} is not callable (another Python?)"
    n = dict((p, n) for _, p, n in forkservers.INTERNALS)[path]
    if not any(p.startswith(path + ".") for _, p, _ in forkservers.INTERNALS):  # (not one whose parts are read)
        monkeypatch.setattr(owner, name, lambda *a: None)
        assert forkservers.why_unavailable() is None  # any callable taking its arguments will do
    monkeypatch.setattr(owner, name, lambda a, b, c: None)  # takes 3 (none takes 3)
    assert forkservers.why_unavailable() == \
        f"{module}.{path} cannot be called with {n} positional argument(s) (another Python?)"


def test_a_platform_without_a_fork_server_is_named(monkeypatch):
    monkeypatch.setattr(mp, "get_all_start_methods", lambda: ["fork", "spawn"])
    assert forkservers.why_unavailable() == "this platform has no fork server"


def _report_env(queue) -> None:
    queue.put((os.environ.get("VITBENCH_TEST_PRELOAD_DEFAULT"), os.environ.get("VITBENCH_TEST_CALLERS")))


@needs_servers
def test_a_default_set_by_the_servers_imports_reaches_each_child_unless_the_caller_set_its_own(
        tmp_path, monkeypatch):
    # The GPU check on an H200: JAX's trials held 75 % of the device, because the module setting
    # XLA_PYTHON_CLIENT_PREALLOCATE=false was imported by the server, and each child took its caller's environment
    mod = "vitbench_test_envdefault"
    (tmp_path / f"{mod}.py").write_text("from vitbench.forkservers import env_default\n"
                                        "env_default('VITBENCH_TEST_PRELOAD_DEFAULT', 'from-import',\n"
                                        "            unless=('VITBENCH_TEST_OTHER_SPELLING',))\n")
    # the server is a fresh interpreter started now (a new preload list): it finds the module on its PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    monkeypatch.delenv("VITBENCH_TEST_PRELOAD_DEFAULT", raising=False)
    monkeypatch.setenv("VITBENCH_TEST_CALLERS", "1")
    q = mp.get_context("spawn").Queue()
    assert _run((mod,), _report_env, q) == ("from-import", "1")
    # another spelling the library refuses beside it, set by the caller after the server started: no default
    # (jaxlib raises on XLA_CLIENT_MEM_FRACTION with XLA_PYTHON_CLIENT_MEM_FRACTION)
    monkeypatch.setenv("VITBENCH_TEST_OTHER_SPELLING", "x")
    assert _run((mod,), _report_env, q) == (None, "1")
    monkeypatch.delenv("VITBENCH_TEST_OTHER_SPELLING")
    monkeypatch.setenv("VITBENCH_TEST_PRELOAD_DEFAULT", "users")
    assert _run((mod,), _report_env, q) == ("users", "1")  # the caller's value wins


SLOW_PRELOAD_SCRIPT = '''
import os, signal, sys, threading, time
from vitbench import forkservers

def report(path):
    with open(path, "w") as f:
        f.write(str(signal.getsignal(signal.SIGINT) is signal.default_int_handler))

if __name__ == "__main__":
    out = os.path.join(sys.argv[1], "child.txt")
    p = forkservers.process(("slow_preload",), report, (out,))
    started = threading.Thread(target=p.start)
    started.start()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(sys.argv[1], "importing")) and time.monotonic() < deadline:
        time.sleep(0.01)
    if not os.path.exists(os.path.join(sys.argv[1], "importing")):
        sys.exit("the server never imported slow_preload")
    os.kill(forkservers._SERVERS[("slow_preload",)]._forkserver_pid, signal.SIGINT)  # while it imports
    started.join(60)
    p.join(60)
    print("exitcode", p.exitcode)
'''


@needs_servers
def test_a_ctrl_c_while_the_server_imports_leaves_it_serving_and_its_children_interruptible(tmp_path):
    """A Ctrl-C while a fork server imported its preload list (torch, seconds) ended it with a KeyboardInterrupt
    traceback (`max-batch` interrupted in its first seconds: session 31); CPython ignores SIGINT there only after
    the imports. The server now ignores it from its first preload on (vitbench.sigint) and serves; its children get
    Python's own handler back (a trial is interrupted as before)."""
    import subprocess

    (tmp_path / "slow_preload.py").write_text("import pathlib, time\n"
                                               f"pathlib.Path({str(tmp_path)!r}, 'importing').touch()\n"
                                               "time.sleep(1.5)\n")
    script = tmp_path / "main_script.py"
    script.write_text(SLOW_PRELOAD_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(forkservers.__file__).parents[1]), str(tmp_path),
                                                        os.environ.get("PYTHONPATH", "")])}  # the server's path
    r = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "exitcode 0" in r.stdout, r.stdout + r.stderr
    assert "KeyboardInterrupt" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / "child.txt").read_text() == "True"


def _fails() -> None:
    raise FileNotFoundError("/tmp/vitbench-probe-x/probe.log")  # the requester's folder, removed as it ended


def test_a_child_whose_requester_ended_ends_quietly_where_it_fails(monkeypatch):
    """A probe forked as its command was Ctrl-C'd found the command's temporary folder removed, and printed a
    FileNotFoundError traceback under the command's one line (session 31): a child whose requester has ended
    exits 1 without a word; one whose requester waits raises as before."""
    class Exited(Exception):
        pass

    def exit_(code):
        raise Exited(code)

    monkeypatch.setattr(os, "_exit", exit_)
    gone, kept = mp.Pipe(duplex=False), mp.Pipe(duplex=False)
    gone[1].close()  # the requester ended: its write end closed
    with pytest.raises(Exited, match="1"):
        forkservers._unless_orphaned(gone[0], _fails, ())
    with pytest.raises(FileNotFoundError):
        forkservers._unless_orphaned(kept[0], _fails, ())
