"""The two sides of an A/B run and where their code comes from (vitbench.compare.ab, .bisection).

A side is a commit's tree or the working tree, its own copy of the study file and its own interpreter. REF's tree
is `git archive`d into a temporary directory (no .git, so the repository is untouched), removed afterwards, Ctrl-C
and SIGTERM included. Each side's environment is built from its own code: where every pin of REF's
vitbench/requirements.lock is also the working tree's (identical, or packages added since, which REF's code never
imports), the interpreter running this command *is* that environment and both sides use it with PYTHONPATH set to
their own checkout; otherwise REF gets a virtualenv installed from its own lock (`pip install -c LOCK -e REF`), and
if that cannot be built the command stops (exit 2) rather than measure REF's code with the wrong libraries. A
round is one `vitbench sweep STUDY --results DIR` run by a side's own code, on the CPUs the schedule gives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vitbench.compare.schedule import pinned_to, stop_process
from vitbench.env import GIT_SHA_ENV, parse_lock, short_sha
from vitbench.errors import ConfigError, clip
from vitbench.measure.extra_work import ENV as EXTRA_WORK_ENV

LOCK = "vitbench/requirements.lock"
_TAIL = 1500  # characters of a failed sweep's log shown in the error
# How long a stopped round's sweep has after SIGTERM before SIGKILL: it stops its running trial the same way, with the
# local executor's grace (vitbench.executors.local.LocalOptions.grace_s, 5 s by default), and records it interrupted.
ROUND_GRACE_S = 30.0


def _git(repo: Path, *args: str) -> str:
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    if p.returncode:
        raise ConfigError(f"git {' '.join(args)} in {repo}: {p.stderr.strip()[:300] or 'failed'}")
    return p.stdout.strip()


def repo_root(repo: str | Path) -> Path:
    """The top of the git checkout containing `repo`; ConfigError if there is none."""
    path = Path(repo)
    if not path.is_dir():
        raise ConfigError(f"--repo {repo}: not a directory")
    p = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                       timeout=60)
    if p.returncode:
        raise ConfigError(f"--repo {repo}: not inside a git checkout (vitbench ab and bisect measure the commits "
                          "of one; use `vitbench compare BASELINE CURRENT` for two result sets)")
    return Path(p.stdout.strip())


def resolve_commit(name: str, repo: Path) -> str | None:
    """The full SHA of commit `name` (a SHA, a short one, a ref) in the git checkout at `repo`; None where it is
    not one there (or git cannot run). The one lookup of a commit (ab, bisect, history append --commit)."""
    try:
        p = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


def resolve_ref(root: Path, ref: str) -> str:
    """REF's full commit SHA; ConfigError naming the ref when it is unknown (e.g. a shallow clone)."""
    sha = resolve_commit(ref, root)
    if sha is None:
        raise ConfigError(f"REF {clip(repr(ref), 200)}: no such commit in {root} (a branch, tag or SHA; a shallow "
                          "clone may lack it: git fetch --unshallow)")
    return sha


@contextlib.contextmanager
def checkout(root: Path, sha: str) -> Iterator[Path]:
    """REF's tree in a temporary directory (no .git, so the repository is untouched), removed on exit, including
    Ctrl-C and SIGTERM (turned into KeyboardInterrupt while it is held)."""
    tmp = Path(tempfile.mkdtemp(prefix="vitbench-ab-"))
    old = None
    if threading_main():
        old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        src = tmp / "src"
        src.mkdir()
        proc = subprocess.Popen(["git", "-C", str(root), "archive", "--format=tar", sha], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            tar.extractall(src, filter="data")
        if proc.wait():
            raise ConfigError(f"git archive {short_sha(sha)}: {proc.stderr.read().decode(errors='replace')[:300]}")
        yield tmp
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@dataclass
class Side:
    """One side of the A/B: its code, its study file, its interpreter and extra environment."""

    name: str  # "baseline" | "current"
    describe: str  # the code: "REF = sha (subject)" or "working tree at sha"
    root: Path
    study: Path
    python: str
    environment: str  # how the environment was obtained, one sentence
    extra_env: dict[str, str] = field(default_factory=dict)
    commit: str = ""  # the SHA its code is ("-dirty" added for uncommitted changes); "" where not known

    @property
    def takes_turns(self) -> bool:
        """Whether this side's code takes turns on a shared CPU (vitbench/turns.py, `--schedule turns`): a commit
        from before it cannot."""
        return (self.root / "vitbench" / "turns.py").is_file()

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in (EXTRA_WORK_ENV, GIT_SHA_ENV)}
        env["PYTHONPATH"] = str(self.root)  # this side's vitbench, ahead of any installed copy
        env.update(same_cache())
        env.update(self.extra_env)
        return env

    def start_round(self, out: Path, cpus: Collection[int] | None = None, env: dict[str, str] | None = None
                    ) -> Running:
        """Start one `vitbench sweep` by this side's code into `out`, pinned to `cpus` (with every trial it
        starts) if given, `env` added to its environment."""
        out.mkdir(parents=True)
        log = out.parent / f"{out.name}.log"
        with open(log, "w") as fh:
            # (`out` from here: the sweep runs in this side's tree, where a relative path would land)
            proc = subprocess.Popen([self.python, "-c", "from vitbench.cli import main; main()", "sweep",
                                     str(self.study), "--results", str(out.absolute())],
                                    env={**self.env(), **(env or {})}, cwd=self.root, stdout=fh,
                                    stderr=subprocess.STDOUT, preexec_fn=pinned_to(cpus))
        return Running(self, proc, log, out, cpus)


def same_cache() -> dict[str, str]:
    """Both sides' cache settings, the same for both: one cache directory (this machine's, resolved here once)
    and the compile caches on or off as this process sees them. Each side's sweeps read and write the
    persistent compile caches between rounds: the first pair compiles, later pairs load; an executable is
    keyed by its program (vitbench.paths.compile_cache_dir), so a side never runs the other's code, and an
    identical program is shared. Compile time is never inside the throughput the gate decides on."""
    from vitbench.paths import CACHE_ENV, COMPILE_CACHE_ENV, cache_dir, compile_cache_on

    return {CACHE_ENV: str(cache_dir()), COMPILE_CACHE_ENV: "1" if compile_cache_on() else "0"}


@dataclass
class Running:
    """A side's round in progress."""

    side: Side
    proc: subprocess.Popen
    log: Path
    out: Path  # its results directory
    cpus: Collection[int] | None = None  # the CPUs it was pinned to (None: not pinned)

    def wait(self) -> None:
        """Wait for the sweep; ConfigError unless it exits 0 or 1 with rows written (a trial not ok is a result;
        exit 1 without a row is a sweep that ended before its trials, e.g. on a traceback: its log says why, where
        reading the empty round had blamed the results' format)."""
        rc = self.proc.wait()
        if rc not in (0, 1) or (rc == 1 and not any(p.stat().st_size for p in self.out.rglob("*.jsonl"))):
            text = self.log.read_text(errors="replace")
            start = text.rfind("error:")  # the sweep's own message from its start (its last lines cut its head)
            said = clip(text[start:], _TAIL) if start >= 0 else text[-_TAIL:]
            tree = f"{self.side.root}/"  # a temporary copy of the side's tree, gone when the user reads this
            try:
                study = f"{self.side.study.relative_to(self.side.root)} (in that tree)"
            except ValueError:  # an absolute study outside the tree: the user's own path
                study = str(self.side.study)
            raise ConfigError(f"{self.side.name} ({self.side.describe}): `vitbench sweep` of {study} "
                              f"exited {rc}:\n{said.replace(tree, '')}")

    def stop(self) -> None:
        """End the sweep if it still runs (an interrupted gate leaves no round behind)."""
        stop_process(self.proc, ROUND_GRACE_S)


def _environment(root: Path, sha: str, base: Path) -> tuple[str, str]:
    """(interpreter, sentence) for REF's side: this one when every pin of REF's lock is this environment's lock's
    pin too (identical, or REF's a subset: packages added since are ones REF's code never imports), else a venv
    from REF's lock."""
    mine, theirs = ((d / LOCK).read_text() if (d / LOCK).exists() else None for d in (root, base / "src"))
    pins, ref_pins = parse_lock(mine or ""), parse_lock(theirs or "")
    if mine is not None and ref_pins and all(pins.get(name) == v for name, v in ref_pins.items()):
        same = "identical" if pins == ref_pins else (f"REF's pins a subset of it ({len(pins) - len(ref_pins)} "
                                                    "packages added since, which REF's code does not import)")
        return sys.executable, (f"the same environment for both sides: {LOCK} is {same}, so the interpreter "
                                f"{sys.executable} is each side's environment (PYTHONPATH = that side's code)")
    if theirs is None:
        raise ConfigError(f"REF {short_sha(sha)} has no {LOCK}: its environment cannot be rebuilt from its own "
                          "code")
    venv = base / "venv"
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(base / "src" / LOCK), "-e",
              str(base / "src")]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise ConfigError(f"REF {short_sha(sha)}'s {LOCK} differs from the working tree's and its environment "
                              f"could not be built ({' '.join(cmd[:4])} ...): {(p.stderr or p.stdout)[-_TAIL:]}")
    return str(venv / "bin" / "python"), (f"REF's own environment: {LOCK} differs, so a virtualenv was installed "
                                          f"from REF's lock ({venv / 'bin' / 'python'})")



def study_in(tree: Path, study: str | Path, what: str) -> Path:
    """`study` as a side reads it: absolute, or relative to the side's `tree` and inside it (a relative path
    that climbs out, ../../etc/passwd, read a file of neither tree; a study outside is given absolute)."""
    if Path(study).is_absolute():
        return Path(study)
    path = tree / study
    if not path.resolve().is_relative_to(tree.resolve()):
        raise ConfigError(f"--study {clip(str(study), 200)}: leaves {what}; a relative study path is read inside "
                          "each side's tree (give an absolute path for a study outside it)")
    return path


def commit_side(name: str, ref: str, root: Path, sha: str, base: Path, study: str | Path, hint: str) -> Side:
    """A side that runs commit `sha`'s code: its tree (`base`/src, from `checkout`), its own copy of `study`
    (relative to that tree, or absolute) and its own environment (`_environment`). `hint`: what to do when the
    commit has no such study file (said in the ConfigError)."""
    subject = _git(root, "log", "-1", "--format=%s", sha)[:80]
    path = study_in(base / "src", study, f"REF {short_sha(sha)}'s tree")
    if not path.is_file():
        raise ConfigError(f"REF {short_sha(sha)} has no {study}: {hint}")
    python, sentence = _environment(root, sha, base)
    # `git archive`'s tree has no .git: the commit its rows record (vitbench.env.git_sha; code older than that
    # reads no such variable, and records None: the report takes it from --results' SIDES_FILE)
    return Side(name, f"{ref} = {short_sha(sha)} ({subject})", base / "src", path, python, sentence,
                {GIT_SHA_ENV: sha}, commit=sha)
