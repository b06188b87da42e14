"""The history as series: per metric and trial, one value per commit in commit order, normalised where the
machine changed, with its change points (vitbench.history.changes); `to_page` writes the shape the history
page reads (vitbench.history.page.render).

Order: by the commit's date (the committer date recorded at append), then by the order appended; a commit
measured several times is one point, the median of its runs. Normalisation follows compare --normalize
(docs/compare.md): a speed divided by the machine's calibration (matmul TFLOP/s), here the median calibration of
each machine over the series (one run's calibration varies 3x on a busy host; a machine's median does not jump),
scaled to the newest point's machine: `normalized` reads in the newest machine's units. Every machine's median is
taken at one matrix size, the newest calibration's (vitbench.tasks.calibration.SIZE: a GPU's calibration changed
size on 2026-11-29). The change points are
found on the normalised values where the series spans more than one machine and every point has them, else on
the raw values (and the series says so in `basis`).

A paired point (vitbench.history.collect.PAIRED_SUFFIX: current / baseline from one `ab` run) is a series per
trial *and baseline commit*: ratios against one fixed commit are comparable with each other, ratios against
different ones are not (chaining them would add every link's noise to every later point); and per step
statistic (vitbench.compare.ab.Statistic, in the point's raw; 'best' where a point from before says none), as
ratios of best steps and of 90th-percentile steps differ by design. Its basis is 'paired': the machine is divided
out within each pair, so nothing is normalised.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from vitbench.env import short_sha
from vitbench.history.changes import Change, changes
from vitbench.history.collect import AT_LEAST_KEY, CAVEAT_KEY, LEFT_OUT_KEY, LEFT_OUT_WHY_KEY, PAIRED_SUFFIX
from vitbench.history.store import Point, Run
from vitbench.tasks.calibration import LEGACY_N, SIZE

# the step statistic of paired points recorded before they named theirs (ab's default then)
PAIRED_BEFORE_STATISTIC = "best"


@dataclass
class Series:
    metric: str
    unit: str
    higher_is_better: bool
    trial: str  # the label (compare's)
    key: str  # the match key
    model: str | None
    backend: str | None
    task: str | None
    commits: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    normalized: list[float | None] = field(default_factory=list)
    machines: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)  # per commit: its caveat ('' where every round was clean)
    # per commit: its value is a lower bound (a round it rests on was: the largest batch at the search's cap)
    at_least: list[bool] = field(default_factory=list)
    basis: str = "raw"  # what the change points were found on: 'raw' | 'normalized' | 'paired'
    baseline: str | None = None  # a paired series: the commit every ratio is against
    changes: list[Change] = field(default_factory=list)

    def detected_on(self) -> list[float]:
        return self.normalized if self.basis == "normalized" else self.values  # type: ignore[return-value]

    def regression(self, c: Change) -> bool:
        return c.size < 1 if self.higher_is_better else c.size > 1

    def across_machines(self, c: Change) -> bool:
        """The change lies between commits measured on different machines, on values not normalised across them
        (basis raw: no calibration on each): a machine's change as much as the code's."""
        return self.basis == "raw" and len(set(self.machines[max(c.first - 1, 0):c.last + 1])) > 1

    def commit_range(self, c: Change) -> tuple[str, str]:
        """The last commit before the change's earliest position and the commit at its latest."""
        return self.commits[max(c.first - 1, 0)], self.commits[c.last]


def _when(run: Run) -> float:
    """The commit's date (else the run's) as a UTC timestamp: ISO texts with other offsets do not sort as text."""
    import datetime as dt

    for text in (run.commit_date, run.run_date):
        try:
            t = dt.datetime.fromisoformat(str(text))
        except ValueError:
            continue
        return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()
    return float("inf")  # no date at all: after the dated ones, in the order appended


def calibration_size(pt: Point) -> int | None:
    """The matrix size of a point's calibration (a point appended before it was recorded: LEGACY_N, the size
    every calibration took before 2026-11-29); None without a calibration."""
    return pt.raw.get(SIZE, LEGACY_N) if pt.calibration else None


def _machine_calibrations(items: list[tuple[Run, Point]]) -> dict[str, float]:
    """Each machine's median calibration over the series, at one matrix size: the newest calibrated point's on
    the newest machine. A machine's speed at that size is a fact of the machine, whenever it was measured; a
    median over two sizes is not (a GPU's n=8192 reads ~7x its n=1024), and a machine calibrated only at another
    size has none, so its points are not normalised."""
    newest = items[-1][0].machine
    size = next((calibration_size(pt) for run, pt in reversed(items) if run.machine == newest and pt.calibration),
                None)
    by_machine: dict[str, list[float]] = defaultdict(list)
    for run, pt in items:
        if pt.calibration and calibration_size(pt) == size:
            by_machine[run.machine].append(pt.calibration)
    return {m: statistics.median(c) for m, c in by_machine.items()}


AT_LEAST = "\u2265 "  # before a value that is a lower bound (a point's "at_least"): the page's and the table's


def legend(marked: int) -> str:
    """The line under a history's table or chart that has marked points."""
    from vitbench.report.caveats import MARK

    return (f"{MARK}: {marked} point(s) rest only on rounds flagged unstable or measured while other trials ran "
            "on the same host (as the report marks them): read them as rough figures, and a change point beside "
            "one as unconfirmed until a clean run repeats it; 'N ... left out': the point is its clean rounds' "
            "median.")


def _caveat(every: list[tuple[Run, Point]], used: list[tuple[Run, Point]]) -> str:
    """A commit's caveat, as the report writes a summary's (vitbench.report.caveats.split): MARK and why where
    each round it rests on was marked (unstable, shared host), 'N ... round(s) left out' where marked rounds were
    left out for clean ones, '' where every round was clean."""
    from vitbench.report.caveats import MARK, join_reasons, reason_set

    kept = {id(pt) for _, pt in used}
    out = [len(pt.raw.get("rounds") or [1]) for _, pt in every if id(pt) not in kept]
    out += [len(pt.raw.get(LEFT_OUT_KEY) or []) for _, pt in used]
    seen = set().union(*(reason_set(pt.raw.get(CAVEAT_KEY)) | reason_set(pt.raw.get(LEFT_OUT_WHY_KEY))
                         for _, pt in every))
    if all(pt.raw.get(CAVEAT_KEY) for _, pt in used):
        return f"{MARK} {join_reasons(seen)}"
    return f"{sum(out)} {join_reasons(seen)} round(s) left out" if sum(out) else ""


def build(rows: list[tuple[Run, Point]], metrics: tuple[str, ...] = ()) -> list[Series]:
    """The series of the stored (run, point) rows, for `metrics` (all when empty), without change points."""
    from vitbench.compare.comparison import metrics as declared

    speeds = {n for n, m in declared().items() if m.speed}  # only a speed is divided by the machine's calibration
    groups: dict[tuple[str, str, str | None, str | None], list[tuple[Run, Point]]] = defaultdict(list)
    for run, pt in rows:
        if not metrics or pt.metric in metrics:
            paired = pt.metric.endswith(PAIRED_SUFFIX)
            groups[pt.metric, pt.trial, str(pt.raw.get("baseline")) if paired else None,
                   str(pt.raw.get("statistic", PAIRED_BEFORE_STATISTIC)) if paired else None].append((run, pt))
    out = []
    for (metric, key, baseline, stat), items in groups.items():
        items.sort(key=lambda rp: (_when(rp[0]), rp[0].id or 0))
        first = items[-1][1]
        s = Series(metric, first.unit, first.higher_is_better,
                   first.label + (f" vs {short_sha(baseline)}, {stat} step" if baseline else ""), key, first.model,
                   first.backend, first.task, baseline=baseline)
        # (points appended before 2026-11-30 carry a calibration for every metric: a speed's only is used)
        machine_cal = _machine_calibrations(items) if metric in speeds else {}
        ref = machine_cal.get(items[-1][0].machine)
        by_commit: dict[str, list[tuple[Run, Point]]] = {}
        for run, pt in items:
            by_commit.setdefault(run.commit, []).append((run, pt))
        for commit, every in by_commit.items():
            rps = [rp for rp in every if not rp[1].raw.get(CAVEAT_KEY)] or every  # as collect's rounds: the clean
            s.caveats.append(_caveat(every, rps))
            s.at_least.append(any(pt.raw.get(AT_LEAST_KEY) for _, pt in rps))
            s.commits.append(commit)
            s.dates.append(rps[0][0].commit_date or rps[0][0].run_date)
            s.values.append(statistics.median(pt.value for _, pt in rps))
            norm = [pt.value * ref / machine_cal[run.machine] for run, pt in rps
                    if ref and run.machine in machine_cal]
            s.normalized.append(statistics.median(norm) if len(norm) == len(rps) else None)
            s.machines.append(rps[-1][0].machine)
        if baseline is not None:
            s.basis = "paired"
        elif len(set(s.machines)) > 1 and all(v is not None for v in s.normalized):
            s.basis = "normalized"
        out.append(s)
    out.sort(key=lambda s: (s.metric, s.trial))
    _tell_apart(out)
    return out


def _tell_apart(series: list[Series]) -> None:
    """Series of one metric whose labels read alike (each label was made against its own results directory's
    trials: two sweeps differing only in min_seconds gave two 'ViT-Nano/4 infer torch bs4 32px fp32 cpu') get
    the settings their trial keys differ in (the key is compare's match key, a JSON object), or else the key's
    position among them, appended: never two series under one name."""
    import json

    alike: dict[tuple[str, str], list[Series]] = defaultdict(list)
    for s in series:
        alike[s.metric, s.trial].append(s)
    for group in alike.values():
        if len(group) < 2:
            continue
        flat = []
        for s in group:
            try:
                doc, _ = json.JSONDecoder().raw_decode(s.key)
                cfg = {**doc.get("config", {}), "kind": doc.get("kind"),
                       "method_version": doc.get("method_version")}
            except (ValueError, AttributeError, TypeError):  # a key of another shape: its position below
                cfg = {}
            flat.append({k: json.dumps(v, sort_keys=True, default=str) for k, v in cfg.items()})
        fields = sorted({k for c in flat for k in c if len({c.get(k) for c in flat}) > 1})
        for i, (s, c) in enumerate(zip(group, flat)):
            parts = [f"{k}={c[k]}" for k in fields if k in c] or [f"#{i + 1}"]
            s.trial += " " + " ".join(parts)


def detect(series: list[Series]) -> list[Series]:
    """Each series with its change points (in place; returned for chaining)."""
    for s in series:
        s.changes = changes(s.detected_on())
    return series


def new_regressions(s: Series, confidence: float) -> list[Change]:
    """Regression change points at `confidence` or more that the series without its newest commit does not
    show (no change of the same direction whose commit range overlaps): what the newest commit brought to
    light. Recomputed from the stored history, so no state is kept between checks."""
    # a step where the machine changed too, on raw values, is no verdict on the code (said beside it instead:
    # across_machines); a CI runner moved to other hardware read as a NEW REGRESSION, exit 1
    found = [c for c in s.changes if s.regression(c) and c.confidence >= confidence and not s.across_machines(c)]
    if not found:
        return []
    before = [c for c in changes(s.detected_on()[:-1]) if s.regression(c) and c.confidence >= confidence]
    return [c for c in found if not any(b.first <= c.last and c.first <= b.last for b in before)]


def to_page(series: list[Series]) -> list[dict]:
    """The shape the history page reads (vitbench.history.page.render's `series`)."""
    return [{"metric": s.metric, "unit": s.unit, "trial": s.trial, "model": s.model, "backend": s.backend,
             "task": s.task,
             "points": [{"commit": c, "date": d, "value": v, "normalized": n, **({"caveat": w} if w else {}),
                         **({"at_least": True} if b else {})}
                        for c, d, v, n, w, b in zip(s.commits, s.dates, s.values, s.normalized, s.caveats,
                                                    s.at_least)],
             "changes": [{"index": c.index, "commits": list(s.commit_range(c)), "size": c.size,
                          "confidence": c.confidence,
                          **({"across_machines": True} if s.across_machines(c) else {})}
                         for c in s.changes]} for s in series]
