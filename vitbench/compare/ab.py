"""`vitbench ab REF`: a baseline git ref and the working tree measured in the same job, interleaved, each side
by its own code in its own environment, decided on paired ratios (vitbench.compare.paired).

The baseline's code is REF's tree (`git archive`, into a temporary directory removed afterwards, Ctrl-C and
SIGTERM included). Each side's environment is built from its own code: where every pin of REF's
vitbench/requirements.lock is also the working tree's (identical, or packages added since, which REF's code never
imports), the interpreter running this command *is* that environment and both sides use it with PYTHONPATH set to
their own checkout; otherwise REF gets a virtualenv installed from its own lock
(`pip install -c LOCK -e REF`), and if that cannot be built the command stops (exit 2) rather than measure REF's
code with the wrong libraries. A round is one `vitbench sweep STUDY --results DIR` run by a side's own code on its
own copy of the study file; rounds alternate A B, B A, A B, ... so that drift cancels over pairs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vitbench.choices import Choice
from vitbench.compare.comparison import Comparison, env_differences, load_records
from vitbench.compare.decide import Decision, Row, metric_samples
from vitbench.compare.match import DEFAULT_IGNORE, Trial, group, labels, why_unmatched
from vitbench.compare.paired import Rule, verdict
from vitbench.compare.schedule import DEFAULT_SCHEDULE, Schedule, stop_process
from vitbench.errors import ConfigError
from vitbench.env import parse_lock
from vitbench.measure.extra_work import ENV as EXTRA_WORK_ENV
from vitbench.record import Record

LOCK = "vitbench/requirements.lock"
DEFAULT_STUDY = "studies/ci.yaml"
DEFAULT_BUDGET_S = 480.0  # fits .ci/run's speed check in ~10 min on a 2-core machine (docs/compare.md)
METRIC = "img_per_s"  # the gate decides on throughput (the bench task's declared headline metric)
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
        raise ConfigError(f"--repo {repo}: not inside a git checkout (vitbench ab measures a git ref against "
                          "the working tree; use `vitbench compare BASELINE CURRENT` for two result sets)")
    return Path(p.stdout.strip())


def resolve_ref(root: Path, ref: str) -> str:
    """REF's full commit SHA; ConfigError naming the ref when it is unknown (e.g. a shallow clone)."""
    p = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode or not p.stdout.strip():
        raise ConfigError(f"REF {ref!r}: no such commit in {root} (a branch, tag or SHA; a shallow clone may "
                          "lack it: git fetch --unshallow)")
    return p.stdout.strip()


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
            raise ConfigError(f"git archive {sha[:12]}: {proc.stderr.read().decode(errors='replace')[:300]}")
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

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != EXTRA_WORK_ENV}
        env["PYTHONPATH"] = str(self.root)  # this side's vitbench, ahead of any installed copy
        env.update(same_cache())
        env.update(self.extra_env)
        return env

    def start_round(self, out: Path) -> Running:
        """Start one `vitbench sweep` by this side's code into `out`."""
        out.mkdir(parents=True)
        log = out.parent / f"{out.name}.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen([self.python, "-c", "from vitbench.cli import main; main()", "sweep",
                                     str(self.study), "--results", str(out)], env=self.env(), cwd=self.root,
                                    stdout=fh, stderr=subprocess.STDOUT)
        return Running(self, proc, log)


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

    def wait(self) -> None:
        """Wait for the sweep; ConfigError unless it exits 0 or 1 (a trial not ok is a result)."""
        rc = self.proc.wait()
        if rc not in (0, 1):
            tail = self.log.read_text(errors="replace")[-_TAIL:]
            raise ConfigError(f"{self.side.name} ({self.side.describe}): `vitbench sweep {self.side.study}` "
                              f"exited {rc}:\n{tail}")

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
        raise ConfigError(f"REF {sha[:12]} has no {LOCK}: its environment cannot be rebuilt from its own code")
    venv = base / "venv"
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(base / "src" / LOCK), "-e",
              str(base / "src")]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise ConfigError(f"REF {sha[:12]}'s {LOCK} differs from the working tree's and its environment "
                              f"could not be built ({' '.join(cmd[:4])} ...): {(p.stderr or p.stdout)[-_TAIL:]}")
    return str(venv / "bin" / "python"), (f"REF's own environment: {LOCK} differs, so a virtualenv was installed "
                                          f"from REF's lock ({venv / 'bin' / 'python'})")


class Statistic(Choice):
    """A trial's value in one round, from its per-step img/s samples."""

    BEST = "best"  # the fastest step: other load only ever makes a step slower (timeit's rule)
    MEDIAN = "median"  # the typical step: robust to the odd slow step, not to a neighbour busy half the round

    def of(self, xs: list[float]) -> float:
        return max(xs) if self is Statistic.BEST else statistics.median(xs)


DEFAULT_STATISTIC = Statistic.BEST  # fewer A/A runs inconclusive than the median, 96 quiet pairs (docs/compare.md)


def round_values(path: Path) -> tuple[dict[str, tuple[Trial, list[float]]], list[Record]]:
    """One round's trials: match key -> (trial, per-step img/s samples of its ok record; [] if not ok)."""
    from vitbench.compare.comparison import metrics
    from vitbench.store import select

    metric = metrics()[METRIC]
    records = load_records(path)
    out = {}
    for key, trial in group(select(records), DEFAULT_IGNORE).items():
        out[key] = (trial, [x for r in trial.ok for x in (metric_samples(r, metric) or ())])
    return out, records


@dataclass
class Pairs:
    """The rounds so far, reduced to what the decision needs."""

    statistic: Statistic = DEFAULT_STATISTIC
    order: list[str] = field(default_factory=list)  # "baseline first" / "current first", per pair
    seconds: list[float] = field(default_factory=list)
    filled: list[float] = field(default_factory=list)  # seconds a filler held a finished side's core (together)
    samples: dict[str, list[tuple[list[float], list[float]]]] = field(default_factory=dict)  # key -> (b, c)
    trials: dict[str, tuple] = field(default_factory=dict)  # key -> (baseline Trial, current Trial)
    records: tuple[list[Record], list[Record]] = field(default_factory=lambda: ([], []))

    def add(self, b_path: Path, c_path: Path) -> None:
        (b, b_recs), (c, c_recs) = round_values(b_path), round_values(c_path)
        self.records[0].extend(b_recs)
        self.records[1].extend(c_recs)
        for key in {*b, *c}:
            bt, bx = b.get(key, (None, []))
            ct, cx = c.get(key, (None, []))
            self.samples.setdefault(key, []).append((bx, cx))
            old = self.trials.get(key, (None, None))
            self.trials[key] = (old[0] or bt, old[1] or ct)

    def values(self, key: str) -> list[tuple[float | None, float | None]]:
        """(baseline, current) value of each pair (None where a side was not ok)."""
        return [(self.statistic.of(bx) if bx else None, self.statistic.of(cx) if cx else None)
                for bx, cx in self.samples[key]]

    def ratios(self) -> dict[str, list[float]]:
        """Per matched trial, current / baseline of every pair where both sides were ok."""
        return {k: [c / b for b, c in self.values(k) if b and c] for k in self.samples if self.matched(k)}

    def matched(self, key: str) -> bool:
        b, c = self.trials[key]
        return b is not None and c is not None

    def failed(self, key: str) -> bool:
        """Ok on the baseline side in some pair where current was not."""
        return any(b and not c for b, c in self.samples[key])


def rows(pairs: Pairs, rule: Rule) -> list[Row]:
    """One Row per matched trial: the paired ratio, its interval and the decision (failed beats all)."""
    from vitbench.compare.comparison import metrics

    md = metrics()[METRIC]
    keys = [k for k in pairs.trials if pairs.matched(k)]
    names = dict(zip(keys, labels([pairs.trials[k][0].config for k in keys])))
    decided = rule.decisions(pairs.ratios())
    out = []
    for k in keys:
        p, d = decided[k]
        vals = pairs.values(k)
        bs, cs = [b for b, _ in vals if b], [c for _, c in vals if c]
        steps = [sum(len(x[i]) for x in pairs.samples[k]) for i in (0, 1)]
        note = "pairs " + " ".join(f"{r:.3f}" for r in p.ratios)
        if pairs.failed(k):
            d = Decision.FAILED
            note = f"current not ok in {sum(1 for b, c in vals if b and not c)} round(s); " + note
        elif d is Decision.INCONCLUSIVE and len(p.ratios) < rule.min_pairs:
            note = f"{len(p.ratios)} of the {rule.min_pairs} pairs a decision needs (--min-pairs); " + note
        elif d is Decision.INCONCLUSIVE:
            note = f"interval contains {1 - rule.threshold:.2f}: more pairs needed; " + note
        out.append(Row(names[k], md.name, md.unit, md.higher_is_better, d,
                       baseline=statistics.fmean(bs) if bs else None, current=statistics.fmean(cs) if cs else None,
                       ratio=p.ratio, ci_low=p.ci_low, ci_high=p.ci_high, repeats=(len(bs), len(cs)),
                       samples=tuple(steps), note=note,
                       method=f"paired: {len(p.ratios)} round pairs, {pairs.statistic.value} step"))
    return out


@dataclass
class ABResult:
    comparison: Comparison
    verdict: Decision
    pairs: int
    elapsed_s: float
    stopped: str

    @property
    def exit_code(self) -> int:
        return self.comparison.exit_code


def run_ab(ref: str, *, repo: str | Path = ".", study: str = DEFAULT_STUDY, baseline_study: str | None = None,
           rule: Rule = Rule(), budget_s: float = DEFAULT_BUDGET_S, results: str | Path | None = None,
           extra_work: float | None = None, allow_same: bool = False, schedule: Schedule = DEFAULT_SCHEDULE,
           statistic: Statistic = DEFAULT_STATISTIC,
           progress: Callable[[str], None] = lambda s: None) -> ABResult:
    """Measure REF (baseline) against the working tree (current) in interleaved round pairs until `rule` stops
    or `budget_s` is spent. `results`: keep the rounds there (default: a temporary directory, removed).
    `extra_work`: test only, current's steps get that fraction of extra work (vitbench.measure.extra_work).
    Raises ConfigError for bad input (exit 2)."""
    t_start = time.monotonic()
    check_budget(budget_s)
    root = repo_root(repo)
    sha = resolve_ref(root, ref)
    head = _git(root, "rev-parse", "HEAD")
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    if sha == head and not dirty and not extra_work and not allow_same:
        raise ConfigError(f"REF {ref!r} is {sha[:12]}, the checked-out commit itself, with no uncommitted change: "
                          "this would compare a commit with itself (for an A/A noise check, --allow-same)")
    cur_study = (root / study) if not Path(study).is_absolute() else Path(study)
    if not cur_study.is_file():
        raise ConfigError(f"--study {study}: no such file in the working tree {root}")
    out_root = Path(results) if results is not None else None
    if out_root is not None and out_root.exists() and any(out_root.iterdir()):
        raise ConfigError(f"--results {out_root}: exists and is not empty (rounds are never mixed with others)")
    with checkout(root, sha) as base:
        baseline = commit_side("baseline", ref, root, sha, base, baseline_study or study,
                               "give its own study file with --baseline-study PATH (relative to REF's tree, or "
                               "absolute)")
        current = Side("current", f"working tree {root} at {head[:12]}{' + uncommitted changes' if dirty else ''}",
                       root, cur_study, sys.executable, "this interpreter",
                       {EXTRA_WORK_ENV: f"{extra_work:g}"} if extra_work else {})
        return measure((baseline, current), baseline.environment,
                       f"baseline {baseline_study or study}, current {study} (each side's own copy)", rule=rule,
                       budget_s=budget_s, t_start=t_start, results=out_root, schedule=schedule,
                       statistic=statistic, progress=progress, extra_work=extra_work)


def check_budget(budget_s: float) -> None:
    """ConfigError unless `budget_s` is a positive, finite number of seconds (--budget-s)."""
    if not (budget_s > 0) or budget_s != budget_s or budget_s == float("inf"):
        raise ConfigError(f"--budget-s must be a positive number of seconds, got {budget_s}")


def commit_side(name: str, ref: str, root: Path, sha: str, base: Path, study: str | Path, hint: str) -> Side:
    """A side that runs commit `sha`'s code: its tree (`base`/src, from `checkout`), its own copy of `study`
    (relative to that tree, or absolute) and its own environment (`_environment`). `hint`: what to do when the
    commit has no such study file (said in the ConfigError)."""
    subject = _git(root, "log", "-1", "--format=%s", sha)[:80]
    path = Path(study) if Path(study).is_absolute() else base / "src" / study
    if not path.is_file():
        raise ConfigError(f"REF {sha[:12]} has no {study}: {hint}")
    python, sentence = _environment(root, sha, base)
    return Side(name, f"{ref} = {sha[:12]} ({subject})", base / "src", path, python, sentence)


def measure(sides: tuple[Side, Side], environment: str, study_line: str, *, rule: Rule, budget_s: float,
            t_start: float, results: Path | None = None, schedule: Schedule = DEFAULT_SCHEDULE,
            statistic: Statistic = DEFAULT_STATISTIC, progress: Callable[[str], None] = lambda s: None,
            extra_work: float | None = None) -> ABResult:
    """The A/B of two prepared sides (baseline, current): round pairs until `rule` stops or `budget_s` (counted
    from `t_start`, time.monotonic) is spent, into `results` (default: a temporary directory, removed), and the
    Comparison with its context lines (`environment`, `study_line`: how each side got them)."""
    with contextlib.ExitStack() as stack:
        out_root = results
        if out_root is None:
            out_root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vitbench-ab-rounds-")))
        pairs, stopped = _loop(sides, rule, budget_s, t_start, out_root, schedule, statistic, progress)
    elapsed = time.monotonic() - t_start
    table = rows(pairs, rule)
    if not table:
        raise ConfigError(_unmatched(pairs))
    v = verdict([r.decision for r in table])
    b_recs, c_recs = pairs.records
    context = [("baseline", sides[0].describe), ("current", sides[1].describe), ("environment", environment),
               ("study", study_line),
               ("rounds", f"{len(pairs.order)} pairs, {schedule.value} (the side started first alternated: "
                          f"{pairs.order.count('baseline first')} baseline first); a pair's value: each side's "
                          f"{pairs.statistic.value} step; {elapsed:.0f} s in all, budget {budget_s:.0f} s" +
                          (f"; a filler held the core of the side that ended first for "
                           f"{statistics.median(pairs.filled):.1f} s a pair (median)"
                           if schedule is Schedule.TOGETHER and pairs.filled else "")),
               ("rule", f"paired t-interval ({rule.confidence:.0%}) on the mean log-ratio; threshold "
                        f"{rule.threshold:.0%}; at least {rule.min_pairs} pairs" +
                        (f", at most {rule.max_pairs}" if rule.max_pairs else "")),
               ("stopped", stopped)]
    if extra_work:
        context.append(("self-test", f"current's steps carry {extra_work:.0%} extra work (${EXTRA_WORK_ENV})"))
    unmatched = [(pairs.trials[k][0] or pairs.trials[k][1]) for k in pairs.trials if not pairs.matched(k)]
    cmp = Comparison(rows=table, unmatched_baseline=[], unmatched_current=[],
                     env_diff=env_differences(b_recs, c_recs), threshold=rule.threshold,
                     confidence=rule.confidence, normalized=False, metrics=(METRIC,),
                     warnings=[f"not compared (on one side only): {t.config.get('model')} {t.config.get('task')}"
                               for t in unmatched], context=context)
    return ABResult(cmp, v, len(pairs.order), elapsed, stopped)


def _loop(sides: tuple[Side, Side], rule: Rule, budget_s: float, t_start: float, out_root: Path,
          schedule: Schedule, statistic: Statistic, progress: Callable[[str], None]) -> tuple[Pairs, str]:
    pairs = Pairs(statistic)
    n = 0
    while True:
        spent = time.monotonic() - t_start
        if pairs.seconds and spent + statistics.fmean(pairs.seconds) > budget_s:
            return pairs, (f"time budget: another pair (~{statistics.fmean(pairs.seconds):.0f} s) would pass "
                           f"--budget-s {budget_s:.0f} after {n} pairs")
        order = sides if n % 2 == 0 else sides[::-1]
        t0 = time.monotonic()
        paths = {side.name: out_root / side.name / f"pair{n + 1:02d}" for side in sides}
        pairs.filled.append(schedule.run(order, paths))
        pairs.add(paths["baseline"], paths["current"])
        pairs.order.append(f"{order[0].name} first")
        pairs.seconds.append(time.monotonic() - t0)
        n += 1
        if not any(pairs.matched(k) for k in pairs.trials):
            raise ConfigError(_unmatched(pairs))
        decided = rule.decisions(pairs.ratios())
        progress(f"pair {n} ({order[0].name} first, {pairs.seconds[-1]:.0f} s): " + "; ".join(
            f"{pairs.trials[k][0].config.get('model')} {pairs.trials[k][0].config.get('task')} "
            f"{p.ratio:.3f}" + (f" [{p.ci_low:.3f}, {p.ci_high:.3f}]" if p.ci_low else "") + f" {d.value}"
            for k, (p, d) in decided.items() if p.ratio))
        if any(pairs.failed(k) for k in pairs.trials if pairs.matched(k)):
            return pairs, f"a trial ok on the baseline failed on current (pair {n})"
        if rule.done(pairs.ratios(), n):
            if rule.max_pairs is not None and n >= rule.max_pairs:
                return pairs, f"--max-pairs {rule.max_pairs} reached"
            return pairs, f"decided after {n} pairs"


def _unmatched(pairs: Pairs) -> str:
    b = {k: t[0] for k, t in pairs.trials.items() if t[0] is not None}
    c = {k: t[1] for k, t in pairs.trials.items() if t[1] is not None}
    if not b or not c:
        return f"no measurement records on the {'baseline' if not b else 'current'} side (see the sweep logs)"
    k0 = next(iter(b))
    return (f"no trial of current matches a trial of the baseline (the sides' study files or measurement methods "
            f"differ): first baseline trial {b[k0].config.get('model')} {b[k0].config.get('task')}: "
            f"{why_unmatched(b[k0], c)}")
