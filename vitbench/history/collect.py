"""What `vitbench history append RESULTS_DIR` records: a results directory read into one history run and its
points (vitbench.history.store).

Two layouts: a sweep's results (one directory, or rounds in subdirectories: each directory a round), and the
rounds `vitbench ab --results DIR` keeps (DIR/baseline/pairNN and DIR/current/pairNN): of those, the current
side's rounds are the run (the working tree's commit), and the verdict with its pair ratios, worked out again
from the rounds by the gate's default rule (vitbench.compare.paired), goes into the run's info. Where the
directory names the baseline's commit (DIR/sides.json, written by `ab`), each trial also gets a *paired* point:
metric `<ab's metric>` + PAIRED_SUFFIX, the geometric mean of its quiet pairs' ratios current / baseline, the
baseline's commit in its raw (docs/history.md, "Paired points": against a fixed baseline they are the
least noisy series this machine gives).

A point is one trial's metric in the run: the median of its rounds' values (a finite number from an ok record;
failed, skipped and non-finite rows are never recorded) with the machine's calibration beside it, the
calibration compare --normalize would divide by (vitbench.compare.calibrations.Calibrations: same run, backend,
device, precision, threads, nearest in time), the median over the rounds, and the size of its matmul in the
point's raw (vitbench.tasks.calibration.SIZE; none where the rounds' calibrations were of different sizes).
"""

from __future__ import annotations

import hashlib
import re
import statistics
import subprocess
import warnings
from collections import defaultdict
from pathlib import Path

from vitbench.env import short_sha
from vitbench.errors import ConfigError, VitbenchWarning, clip
from vitbench.history.store import ROWS_KEY, Point, Run
from vitbench.record import OVERLAPPED, finite_number
# vitbench ab --results DIR: one subdirectory per side (vitbench.compare.ab), and its sides file's one reader
from vitbench.store import AB_SIDES, ab_sides

# A point's raw: why every round it rests on was marked (unstable, shared host: vitbench.report.caveats), or the
# marked rounds' values left out of it and why
CAVEAT_KEY, LEFT_OUT_KEY, LEFT_OUT_WHY_KEY = "caveat", "left_out", "left_out_why"
# A point's raw: true where a round it rests on holds a lower bound, not the value (Metric.lower_bound_when)
AT_LEAST_KEY = "at_least"
PAIRED_SUFFIX = "_paired"  # a paired point's metric: ab's metric + this (img_per_s_paired: current / baseline)
# The environment fields that name the machine (vitbench.env.machine_id's, read from the rows)
MACHINE_FIELDS = ("hostname", "cpu_model", "cpu_count")
# what a row's git_sha can be (vitbench.env: `git rev-parse HEAD`, SHA-1 or SHA-256, + "-dirty" for changes)
GIT_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?(?:-dirty)?")


def _row_lines(records) -> list[str]:
    """Each row as the history tells rows apart, wherever it is found: its trial, sweep run, repeat, start, status,
    end time and kind. The same row appended from a copied or moved directory, or from a directory and then from
    one below it (round1/, then the folder holding it: its rows were recorded twice), is the same line; a sweep
    run again has new run ids and times."""
    return sorted(f"{r.key}|{r.run_id}|{r.repeat}|{r.started_at}|{r.status.value}|{r.finished_at}|{r.kind}"
                  for r in records)


def _legacy_row_lines(records, root: Path) -> list[str]:
    """`_row_lines` as histories of 2026-12-03 (4af12a3) kept them: with the row's directory within `root` (the
    directory appended), which told a row appended from a folder from the same row appended from its parent.
    Read to refuse such a row again; never stored."""
    import os

    top = str(Path(root).resolve())
    return sorted(f"{os.path.relpath(r.source, top) if r.source else ''}|{r.key}|{r.run_id}|{r.status.value}|"
                  f"{r.finished_at}|{r.kind}" for r in records)


def _run_hash(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def rows_sha256(records) -> str:
    """The rows a run is made from, as one hash (`_row_lines`): the same results appended twice have the same."""
    return _run_hash(_row_lines(records))


def _hashes(lines: list[str]) -> list[str]:
    return [hashlib.sha256(line.encode()).hexdigest()[:32] for line in lines]


def row_ids(records) -> list[str]:
    """Each row's own hash (`_row_lines`): a run sharing any with one recorded is refused (store.append). A sweep
    appended while it was interrupted, resumed and appended again held its first rows twice: each trial's point
    was the median of both runs (1535 img/s where its rows' median was 1296)."""
    return _hashes(_row_lines(records))


# How far ahead of this machine's clock a row's start may be: a day, more than the largest time-zone offset
# (UTC+14, Kiribati), so a clock set to local time as if it were UTC is not refused. A run dated in 2097 stayed the
# history's newest point for good (commits not in --repo are placed by their run's start): later regressions were
# never new.
MAX_CLOCK_AHEAD_S = 24 * 3600


def _not_ahead(latest: str | None, path: Path) -> None:
    """ConfigError where a row of `path` starts more than MAX_CLOCK_AHEAD_S after now (a wrong clock, an edit)."""
    import datetime as dt

    if not latest:
        return
    try:
        when = dt.datetime.fromisoformat(latest)
    except ValueError:
        return  # a start that is no time orders nothing (the rows' reader refuses what vitbench never writes)
    when = when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    now = dt.datetime.now(dt.timezone.utc)
    if (when - now).total_seconds() > MAX_CLOCK_AHEAD_S:
        raise ConfigError(f"RESULTS_DIR {path}: a row started at {clip(latest, 40)}, after this machine's clock "
                          f"({now.isoformat(timespec='seconds')}) by more than a day: a wrong clock or an edited "
                          "row would stay the history's newest point for good; nothing was appended")


def is_ab(path: Path) -> bool:
    return all((path / side).is_dir() for side in AB_SIDES)


def machine_of(records) -> str:
    """hostname|cpu model|cpu count|device names: a run on other hardware is another machine."""
    env = records[0].env
    devices = sorted({str(r.env.get("device_name") or r.env.get("device") or "") for r in records} - {""})
    return "|".join([*(str(env.get(k, "")) for k in MACHINE_FIELDS), ",".join(devices)])


def _commit(records, commit: str | None, path: Path, repo: Path) -> str:
    if commit:  # resolved to the full SHA (`HEAD` was recorded as the text "HEAD": kept for good, and merged)
        if commit.endswith("-dirty"):
            raise ConfigError(f"--commit {clip(commit, 60)}: names uncommitted changes, which no commit holds; "
                              "give the commit to record them as (its SHA without -dirty)")
        full = resolve_commit(commit, repo)
        if full is None and not GIT_SHA.fullmatch(commit):
            raise ConfigError(f"--commit {clip(commit, 60)}: not a commit of --repo {clip(str(repo), 120)}, nor a "
                              "full hexadecimal SHA: what is appended is kept for good, so name the commit in "
                              "full, or give --repo the checkout that holds it")
        return full or commit
    shas = sorted({str(r.env.get("git_sha")) for r in records if r.env.get("git_sha")})
    if not shas:
        raise ConfigError(f"RESULTS_DIR {path}: the rows record no git commit (vitbench ran outside a git "
                          "checkout); give it with --commit SHA")
    if len(shas) > 1:
        named = ", ".join(short_sha(s) for s in shas[:4])
        raise ConfigError(f"RESULTS_DIR {path}: rows of {len(shas)} commits ({named}); "
                          "append each commit's results apart, or name one with --commit SHA")
    if not GIT_SHA.fullmatch(shas[0]):  # kept for good: never a text vitbench does not write
        raise ConfigError(f"RESULTS_DIR {path}: the rows' git_sha {clip(repr(shas[0]), 60)} is not a commit "
                          "SHA (vitbench records git's hexadecimal SHA, with -dirty for uncommitted changes): the "
                          "rows were edited or written by another tool; give the commit with --commit SHA")
    if shas[0].endswith("-dirty"):
        raise ConfigError(f"RESULTS_DIR {path}: measured from uncommitted changes ({short_sha(shas[0])}), "
                          "which no commit holds; give --commit SHA to record it as a commit's anyway")
    return shas[0]


def resolve_commit(name: str, repo: Path) -> str | None:
    """The full SHA of commit `name` in the git checkout at `repo` (vitbench.compare.sides.resolve_commit); None
    where it is not one there."""
    from vitbench.compare.sides import resolve_commit as lookup

    sha = lookup(name, repo)
    return sha if sha and GIT_SHA.fullmatch(sha) else None


def commit_date(sha: str, repo: Path) -> str | None:
    """The commit's committer date (ISO 8601) from the git checkout at `repo`; None where it is not known."""
    try:
        p = subprocess.run(["git", "-C", str(repo), "show", "-s", "--format=%cI", f"{sha}^{{commit}}"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() or None if p.returncode == 0 else None


def _rounds(path: Path) -> list[list]:
    """The records of each round (results directory) under `path`, in directory order; selected as the store
    selects them (the latest row per trial and directory)."""
    from vitbench.compare.comparison import load_records
    from vitbench.tidy import select

    skipped: list[str] = []
    records = select(load_records(path, skipped), "all")  # the calibrations too
    if skipped:  # what is appended stays for good: never from a store that could not be read whole
        raise ConfigError(f"RESULTS_DIR {path}: {len(skipped)} line(s) could not be read (first: "
                          f"{clip(skipped[0], 300)}); nothing was appended: the history keeps what it is given "
                          "for good, so fix or remove those lines first")
    by_dir: dict[str, list] = defaultdict(list)
    for r in records:
        by_dir[str(r.source)].append(r)
    return [by_dir[k] for k in sorted(by_dir)]


def points_of(rounds: list[list]) -> list[Point]:
    """One point per trial and comparable metric: the median over the rounds of its ok records' finite values,
    and the median calibration beside them."""
    from vitbench.compare.comparison import metrics
    from vitbench.compare.calibrations import Calibrations
    from vitbench.compare.match import DEFAULT_IGNORE, labels, match_key
    from vitbench.record import Status
    from vitbench.report.caveats import UNSTABLE_FLAG, join_reasons, reason_set, reasons
    from vitbench.tasks import calibration_task
    from vitbench.tasks.calibration import SIZE

    known = metrics()
    cal_task, cal_metric = calibration_task() or (None, None)
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    cals: dict[tuple[str, str], list[tuple | None]] = defaultdict(list)  # beside each value: (calibration, size)
    why: dict[tuple[str, str], list[str]] = defaultdict(list)  # beside each value: its row's caveat ('' clean)
    bound: dict[tuple[str, str], list[bool]] = defaultdict(list)  # beside each value: whether it is a lower bound
    first: dict[str, object] = {}
    trial_of: dict[str, str] = {}  # a series' trial key
    unheld: list[str] = []  # values a series on a log scale cannot hold (a largest batch of 0: nothing fit)
    for recs in rounds:
        calib = None
        if cal_task is not None:
            cal_recs = [r for r in recs if r.kind == cal_task.kind and r.status is Status.OK]
            calib = Calibrations(cal_recs, cal_metric, "history") if cal_recs else None
        for r in recs:
            if r.status is not Status.OK or (cal_task is not None and r.kind == cal_task.kind):
                continue
            key = match_key(r, DEFAULT_IGNORE)
            first.setdefault(key, r)
            cal = size = None
            marked = reasons(r.metrics.get(UNSTABLE_FLAG), r.runner.get(OVERLAPPED))
            if calib is not None:
                try:
                    cal, size = calib.lookup(r)
                except ConfigError:  # no calibration for this backend/device: the point has none
                    cal = None
            for name, md in known.items():
                v = r.metrics.get(name)
                if finite_number(v) and v > 0:
                    # a metric that follows others of its row (Metric.bounded_by: peak memory its memory_kind, the
                    # largest batch the memory budget) is one series per value of them: a change of kind is no step
                    series = key + "".join(f" [{b}={r.metrics.get(b)}]" for b in md.bounded_by)
                    trial_of[series] = key
                    values[series, name].append(float(v))
                    why[series, name].append(marked)
                    bound[series, name].append(md.lower_bound_when is not None
                                               and r.metrics.get(md.lower_bound_when) is True)
                    # a memory or a time is no speed: never divided by the machine's calibration
                    cals[series, name].append((cal, size) if md.speed and finite_number(cal) and cal > 0 else None)
                elif finite_number(v):
                    unheld.append(f"{name} {v:g} of {clip(key, 120)}")
    if unheld:  # said, not dropped in silence: `vitbench compare` calls a largest batch of 0 a regression
        warnings.warn(f"{len(unheld)} value(s) <= 0 not in the history (its series are on a log scale): "
                      f"{'; '.join(unheld[:3])}{' ...' if len(unheld) > 3 else ''}; compare these results with "
                      "`vitbench compare` to judge them", VitbenchWarning, stacklevel=2)
    keys = list(first)
    names = dict(zip(keys, labels([first[k].measured_config for k in keys])))
    out = []
    for (series, name), every in values.items():
        key = trial_of[series]
        cfg, md = first[key].measured_config, known[name]
        # as the report summarises (vitbench.report.caveats.split): the clean rounds where there are some, the
        # marked ones said to be left out; else every round, and the point is marked with why
        ws = why[series, name]
        use = [i for i, w in enumerate(ws) if not w] or list(range(len(ws)))
        xs = [every[i] for i in use]
        seen = set().union(*map(reason_set, ws))
        caveat = {} if not seen else {CAVEAT_KEY: join_reasons(seen)} if len(use) == len(ws) else {
            LEFT_OUT_KEY: [every[i] for i in range(len(ws)) if i not in use], LEFT_OUT_WHY_KEY: join_reasons(seen)}
        picked = [cals[series, name][i] for i in use if cals[series, name][i] is not None]
        cs = [c for c, _ in picked]
        sizes = {n for _, n in picked}
        alike = len(sizes) == 1 and None not in sizes  # calibrations of two matrix sizes have no one median
        out.append(Point(trial=series, label=names[key] + series[len(key):], model=cfg.get("model"),
                         backend=cfg.get("backend"),
                         task=cfg.get("task"), metric=name, unit=md.unit, higher_is_better=md.higher_is_better,
                         value=statistics.median(xs), calibration=statistics.median(cs) if cs and alike else None,
                         raw={"rounds": xs, "calibrations": cs, **({SIZE: sizes.pop()} if alike else {}),
                              **caveat, **({AT_LEAST_KEY: True} if any(bound[series, name][i] for i in use)
                                           else {})}))
    return out


def _ab_info(path: Path) -> tuple[dict, list[Point]]:
    """The gate's verdict and pair ratios, worked out again from the kept rounds by the default rule; and the
    paired points, where DIR/sides.json names the baseline's commit (else none, and the info says why)."""
    import math

    from vitbench.compare.ab import METRIC, SIDES_FILE, Pairs, pair_loads, rows
    from vitbench.compare.comparison import metrics
    from vitbench.compare.paired import Rule, verdict

    base, cur = (sorted(p.name for p in (path / side).iterdir() if p.is_dir()) for side in AB_SIDES)
    both = [n for n in base if n in cur]
    if not both:
        raise ConfigError(f"RESULTS_DIR {path}: a `vitbench ab --results` directory without a round pair "
                          "(baseline/pairNN beside current/pairNN)")
    pairs, rule, gate = Pairs(), Rule(), pair_loads(path)
    for n in both:  # the gate's own reading of each pair's load where it kept one, as the gate decided on it
        pairs.add(*(path / side / n for side in AB_SIDES), gate.get(n))
    table = rows(pairs, rule)
    info = {"verdict": verdict([r.decision for r in table]).value, "pairs": len(both),
            "rule": {"threshold": rule.threshold, "confidence": rule.confidence,
                     "statistic": pairs.statistic.value},
            "trials": {r.trial: {"decision": r.decision.value, "ratio": r.ratio, "ci": [r.ci_low, r.ci_high],
                                 "note": r.note} for r in table}}
    # the store's one reader of SIDES_FILE, as the report's (a file nested past json's depth ended the append in
    # a RecursionError; a commit that is no text was recorded as its repr)
    base = ((ab_sides(path) or {}).get(AB_SIDES[0]) or {}).get("commit", "")
    if not base or base.endswith("-dirty"):
        info["paired"] = (f"not recorded: {SIDES_FILE} names no baseline commit" if not base else
                          "not recorded: the baseline ran uncommitted changes")
        return info, []
    md, names, out = metrics()[METRIC], pairs.names(), []
    for key, ratios in pairs.ratios().items():
        if not ratios:
            continue  # every pair busy or a side not ok: nothing paired to record
        cfg = pairs.trials[key][1].config
        out.append(Point(trial=key, label=names[key], model=cfg.get("model"), backend=cfg.get("backend"),
                         task=cfg.get("task"), metric=METRIC + PAIRED_SUFFIX, unit="x",
                         higher_is_better=md.higher_is_better,
                         value=math.exp(statistics.fmean(math.log(r) for r in ratios)),
                         raw={"pairs": ratios, "baseline": base, "statistic": pairs.statistic.value}))
    return info, out


def collect(path: str | Path, commit: str | None = None, repo: str | Path = ".") -> tuple[Run, list[Point]]:
    """The run and points of a results directory (either layout). ConfigError naming RESULTS_DIR for a missing
    or empty directory, rows of several commits, or nothing measured."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ConfigError(f"RESULTS_DIR {p}: {'no such directory' if not p.exists() else 'not a directory'} "
                          "(a `vitbench sweep --results` or `vitbench ab --results` directory)")
    ab = is_ab(p)
    rounds = _rounds(p / "current" if ab else p)
    records = [r for recs in rounds for r in recs]
    if not records:
        raise ConfigError(f"RESULTS_DIR {p}: no records")
    points = points_of(rounds)
    if not points:  # before the commit: failed rows may record none, and --commit would not make them numbers
        raise ConfigError(f"RESULTS_DIR {p}: no ok row with a finite metric to record (failed, skipped or "
                          "non-finite rows are not measurements)")
    sha = _commit(records, commit, p, Path(repo))
    env = next((r.env for r in records if r.env), {})
    info = {"env": env, "rounds": len(rounds),  # the first row's environment: the versions measured with
            ROWS_KEY: rows_sha256(records)}
    if ab:
        info["ab"], paired = _ab_info(p)
        points += paired
    started = sorted(r.started_at for r in records if r.started_at)
    _not_ahead(started[-1] if started else None, p)
    legacy = _legacy_row_lines(records, p)  # (read once: its hashes and its run's hash)
    date = commit_date(sha, Path(repo))
    if date is None:  # a commit of another checkout: kept, placed by the run's date; said, since it is for good
        warnings.warn(f"commit {clip(sha, 60)} is not in --repo {clip(str(repo), 120)}: recorded without its "
                      "commit date, placed in the history by the run's start; append from the checkout that holds "
                      "it for its place", VitbenchWarning, stacklevel=2)
    run = Run(source="ab" if ab else "sweep", commit=sha, commit_date=date,
              run_date=started[0] if started else "", machine=machine_of(records), path=str(p.resolve()),
              info=info, rows=row_ids(records), legacy_rows=_hashes(legacy), legacy_rows_sha256=_run_hash(legacy))
    return run, points
