"""Fork servers: a process that imports a list of modules once, then forks a fresh child for each request.

multiprocessing has one fork server per process (`set_forkserver_preload` is global). vitbench keeps one per
preload list instead (`process(preload, ...)`), each started the first time a child of that list is asked for and
kept for the rest of the process: the local executor gives each backend its own (its spec's `preload`: a JAX trial
never inherits torch, nor the reverse, and neither pays its framework's import), and a max-batch search forks its
probes from a server too. A child of a fork server (a trial) asks the server that forked it for its own children
(`process(..., reuse_parent=True)`): a sibling, as warm as itself was when it started, with no server to start.

The servers and children are multiprocessing's own (CPython's multiprocessing.forkserver: a clean server process,
a fork per child, its exit code through the sentinel); only which server a child comes from is chosen here. A
child is a `multiprocessing.Process` in every other respect (`start`, `sentinel`, `is_alive`, `terminate`, `kill`,
`exitcode`). Nothing of vitbench above this module is imported (its servers import the leaf vitbench.sigint): the
lists are the callers' (backends declare theirs).

Choosing the server means using some of CPython's multiprocessing that is not its public API (INTERNALS). They are
checked once, at import, by structure (present, callable with the arguments used here); where one is absent
(another Python) or the platform has no fork server (Windows), `unavailable` says why and callers spawn their
children. On macOS, whose CPython lists a fork server too, callers spawn them by default (`unavailable` says why:
ON_MACOS), and a caller asked for the fork servers by name may still use them (the local executor's
`start_method="forkserver"`).
"""

from __future__ import annotations

import importlib
import inspect
import multiprocessing as mp
import multiprocessing.context
import os
import sys
import threading
from multiprocessing import forkserver, popen_forkserver, resource_tracker, spawn

# What this module uses of CPython's multiprocessing beyond its public API: (module, attribute path, how many
# positional arguments it is called with, None for a value that is read). Another Python may lack any of them.
INTERNALS = (
    ("multiprocessing.forkserver", "ForkServer", 0),
    ("multiprocessing.forkserver", "ForkServer.ensure_running", 1),  # (self)
    ("multiprocessing.forkserver", "ForkServer.connect_to_new_process", 2),  # (self, fds)
    ("multiprocessing.forkserver", "ForkServer.set_forkserver_preload", 2),  # (self, modules_names)
    ("multiprocessing.forkserver", "connect_to_new_process", 1),  # the module's server's, swapped in _launch
    ("multiprocessing.forkserver", "_forkserver._forkserver_address", None),  # what a server hands its child
    ("multiprocessing.forkserver", "_forkserver._forkserver_alive_fd", None),
    ("multiprocessing.forkserver", "_forkserver._forkserver_pid", None),
    ("multiprocessing.popen_forkserver", "Popen._launch", 2),  # (self, process_obj)
    ("multiprocessing.spawn", "get_preparation_data", 1),  # (name)
    ("multiprocessing.resource_tracker", "ensure_running", 0),
    ("multiprocessing.context", "ForkServerProcess._Popen", 1),  # (process_obj)
)


# Why macOS spawns by default: its system libraries (the Objective-C runtime, frameworks such as Accelerate) may
# start threads, so a fork of a process that loaded them can crash or hang in the child; CPython made spawn its
# default there in 3.8 for this (bpo-33725; the multiprocessing docs, "Contexts and start methods": "The fork start
# method should be considered unsafe"). A fork server that imported a framework forks from just such a process.
ON_MACOS = ("macOS: forking from a server that imported torch or JAX is unsafe there (its system libraries may "
            "start threads a fork does not copy; CPython's own default there is spawn, bpo-33725)")


def why_unavailable() -> str | None:
    """Why this interpreter cannot run the fork servers (None: it can): no fork server on the platform (Windows),
    or one of INTERNALS missing (not defined by its owner itself), not callable, or not callable with its
    arguments. Checked by structure, nothing started. (macOS can run them: `why_spawned`.)"""
    if "forkserver" not in mp.get_all_start_methods():
        return "this platform has no fork server"
    for module, path, nargs in INTERNALS:
        obj = importlib.import_module(module)
        for i, name in enumerate(path.split(".")):
            if name not in vars(obj):  # its own, not inherited: e.g. popen_fork.Popen's _launch forks from here
                return f"{module}.{'.'.join(path.split('.')[:i + 1])} is missing (another Python?)"
            obj = getattr(obj, name)
        if nargs is None:
            continue
        where = f"{module}.{path}"
        if not callable(obj):
            return f"{where} is not callable (another Python?)"
        try:
            inspect.signature(obj).bind(*range(nargs))
        except (TypeError, ValueError):  # ValueError: no signature to read
            return f"{where} cannot be called with {nargs} positional argument(s) (another Python?)"
    return None


def why_spawned() -> str | None:
    """Why callers start their children with spawn unless asked for the fork servers by name (None: they fork
    them): `why_unavailable`'s reason, else on macOS ON_MACOS (where a caller asked by name may still fork)."""
    return why_unavailable() or (ON_MACOS if sys.platform == "darwin" else None)


# Checked once: None, or why callers start their children with spawn instead (the local executor records it in
# each row: runner.start_method_note)
unavailable = why_spawned()

_SERVERS: dict[tuple[str, ...], forkserver.ForkServer] = {}
_lock = threading.RLock()
# Variables this process's imports set as defaults (`env_default`): a child of a fork server runs with its
# caller's environment, which lacks them when the caller never imported those modules
_ENV_DEFAULTS: dict[str, tuple[str, tuple[str, ...]]] = {}  # name -> (value, the names that rule it out)


def env_default(name: str, value: str, unless: tuple[str, ...] = ()) -> None:
    """Set `name` in this process's environment unless it is set (a user's value wins), and keep it set in the
    children that a fork server forks after importing the caller (`process`: each child takes its caller's
    environment, and a caller that never imported the module lacks the default). For settings a library reads when
    it starts its runtime, not at import: JAX reads XLA_PYTHON_CLIENT_PREALLOCATE when it creates its GPU
    client. `unless`: other names whose presence (here, or in a child's caller's environment) rules the default
    out (another spelling of the same setting that the library refuses beside it)."""
    _ENV_DEFAULTS[name] = (value, unless)
    if not any(u in os.environ for u in unless):
        os.environ.setdefault(name, value)


def _defaults_for(env: dict[str, str]) -> dict[str, str]:
    return {n: v for n, (v, unless) in _ENV_DEFAULTS.items() if not any(u in env for u in unless)}


class _Server(forkserver.ForkServer):
    """CPython's fork server, told where the main script is so that it imports it once (its '__main__' preload).
    CPython up to 3.13.7 reads the path under a key spawn.get_preparation_data no longer writes ('main_path' for
    'init_main_from_path'; python/cpython gh-126631, gh-137996), so the server never imported it and every child
    ran the main script again (a `vitbench` console script: the command line's imports, 0.25-0.45 s per trial).
    Later versions read the right key and ignore the added one."""

    def ensure_running(self):
        with _lock:
            prepared = spawn.get_preparation_data

            def with_main_path(name):
                data = prepared(name)
                if "init_main_from_path" in data:
                    data.setdefault("main_path", data["init_main_from_path"])
                return data

            spawn.get_preparation_data = with_main_path
            try:
                super().ensure_running()
            finally:
                spawn.get_preparation_data = prepared


# Imported first and last in every server's preload list: Ctrl-C ignored while the server imports (CPython's
# server ignores it only after its imports: a Ctrl-C then was its KeyboardInterrupt traceback), and Python's own
# handler back for the children it forks (vitbench.sigint says how)
QUIET_IMPORTS = ("vitbench.sigint", "vitbench.sigint.restore")


def server(preload: tuple[str, ...]) -> forkserver.ForkServer:
    """This process's server for `preload` (started by its first child; '__main__' is imported first, so a
    child never re-runs the main script; a Ctrl-C while it imports the rest leaves it serving: QUIET_IMPORTS)."""
    with _lock:
        s = _SERVERS.get(preload)
        if s is None:
            s = _SERVERS[preload] = _Server()
            s.set_forkserver_preload(["__main__", QUIET_IMPORTS[0], *preload, QUIET_IMPORTS[1]])
        return s


class _Parent(forkserver.ForkServer):
    """The server that forked this process, reached through what it handed down to its child (its address and
    the write end of its 'alive' pipe, CPython's forkserver.main/_serve_one); never started from here."""

    def __init__(self, address, alive_fd):
        super().__init__()
        self._forkserver_address, self._forkserver_alive_fd = address, alive_fd

    def ensure_running(self):
        resource_tracker.ensure_running()


def parent_server() -> forkserver.ForkServer | None:
    """The fork server this process is a child of, or None (not forked by one, or it is this process's own)."""
    g = forkserver._forkserver  # the module's server: in a child of a server, what the server set for us
    if g._forkserver_address is None or g._forkserver_alive_fd is None or g._forkserver_pid is not None:
        return None
    return _Parent(g._forkserver_address, g._forkserver_alive_fd)


class _Popen(popen_forkserver.Popen):
    def __init__(self, process_obj, srv: forkserver.ForkServer):
        self._server = srv
        super().__init__(process_obj)

    def _launch(self, process_obj):
        # CPython's _launch asks the module's one server (forkserver.connect_to_new_process): ask ours instead,
        # for the length of this call (the caller's thread only launches; children are launched one at a time)
        with _lock:
            module_server = forkserver.connect_to_new_process
            forkserver.connect_to_new_process = self._server.connect_to_new_process
            try:
                super()._launch(process_obj)
            finally:
                forkserver.connect_to_new_process = module_server


class ServerProcess(mp.context.ForkServerProcess):
    """A multiprocessing.Process forked by the server of its `preload` list, or with `reuse_parent` by the server
    that forked this process where there is one. It holds the write end of the child's requester pipe (`process`)
    until the child has been joined or the object is closed."""

    def __init__(self, *args, preload: tuple[str, ...] = (), reuse_parent: bool = False, requester=None,
                 keep=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._preload, self._reuse_parent = tuple(preload), reuse_parent
        self._requester, self._keep = requester, keep

    def _Popen(self, process_obj):  # noqa: N802 - multiprocessing's name
        srv = (parent_server() if self._reuse_parent else None) or server(self._preload)
        return _Popen(process_obj, srv)

    def __getstate__(self):  # sent to the server to fork the child: never the write end, or it would be its own
        return {**self.__dict__, "_keep": None}

    def start(self):
        try:
            super().start()
        finally:
            if self._requester is not None:
                self._requester.close()  # the child holds its own copy

    def join(self, timeout=None):
        super().join(timeout)
        if self.exitcode is not None and self._keep is not None:
            self._keep.close()

    def close(self):
        super().close()  # refused while the child runs: then the child must not be ended by closing our end
        if self._keep is not None:
            self._keep.close()


def _watch_requester(requester) -> None:
    """End this process the moment `requester` (the read end of a pipe whose only write end the requesting
    process holds) reports EOF: the requester ended, whatever way (even SIGKILL). A child of a fork server has
    the server for its parent, not the requester, so the kernel's parent-death signal cannot say it: without
    this a trial of a killed sweep, or a probe of a killed search, would go on measuring."""
    def watch():
        try:
            requester.recv()
        except (EOFError, OSError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="vitbench-requester-watch", daemon=True).start()


def _in_environment(env: dict[str, str], requester, target, args) -> None:
    """The child's side of `process`: ended with its requester; the caller's environment as it was when the child
    was made, with the defaults that the server's imports set (`env_default`) where the caller has no value of its
    own; then the target. (A server forked from its own start-up environment; what was imported there keeps what
    it read then.)"""
    _watch_requester(requester)
    os.environ.clear()
    os.environ.update({**_defaults_for(env), **env})
    _unless_orphaned(requester, target, args)


def _unless_orphaned(requester, target, args) -> None:
    """`target(*args)`; where it raises after its requester ended (the read end at EOF: `_watch_requester` had not
    yet seen it), the child ends quietly, exit 1: nobody waits for its outcome, and what failed was the requester's
    leaving (a max-batch probe forked as the command was Ctrl-C'd found its temporary folder removed and printed
    a FileNotFoundError traceback under the command's one line: session 31)."""
    try:
        target(*args)
    except BaseException:
        if requester.poll(0):  # readable: EOF, the only thing the requester's end ever gives
            os._exit(1)
        raise


def process(preload: tuple[str, ...], target, args=(), name: str | None = None,
            reuse_parent: bool = False) -> mp.Process:
    """A child (not started) running `target(*args)`, forked by the server for `preload`; with `reuse_parent`,
    by the server that forked this process if there is one (else the server for `preload`). The child runs with
    the caller's environment of now, not the server's of its start: a variable set since (a test's, a library
    user's) reaches it. It ends when the process that asked for it does (a pipe only the asker holds the write end
    of: `_watch_requester`), which its parent, the server, could not tell it."""
    requester, keep = mp.Pipe(duplex=False)
    return ServerProcess(target=_in_environment, args=(dict(os.environ), requester, target, tuple(args)),
                         name=name, preload=preload, reuse_parent=reuse_parent, requester=requester, keep=keep)
