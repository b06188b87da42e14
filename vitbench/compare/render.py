"""What `vitbench compare` prints: table cells, the summary line, Markdown, github-action-benchmark JSON."""

from __future__ import annotations

from collections import defaultdict

from vitbench.compare.decide import REGRESSING, Row
from vitbench.numfmt import fmt, md_cell, percent

COLUMNS = ("trial", "metric", "baseline", "current", "ratio", "CI", "decision", "note")


def _ratio(x: float) -> str:
    """A ratio to 3 decimals; far from 1 (a step of 1e-300 s in an edited row: 300 digits), 3 significant."""
    return f"{x:.3f}" if 1e-3 <= abs(x) < 1e6 else f"{x:.3g}"


def side_value(x: float | None, runs: int, at_least: bool = False, shown_as: str = "") -> str:
    """A side's value as shown: '6418.5 (mean of 3 runs)' where the side has several runs (Row.baseline and
    Row.current are the mean of its runs' values; `vitbench report` shows the median over repeats); '\u2265 128'
    where it is a lower bound (Row.at_least: the largest batch at the search's cap), as the history shows it;
    `shown_as` (Row.shown_as), where given, says what the value is instead of 'mean of N runs'."""
    return "-" if x is None else ("\u2265 " if at_least else "") + fmt(x) + (
        f" ({shown_as})" if shown_as else f" (mean of {runs} runs)" if runs > 1 else "")


def row_cells(row: Row) -> dict[str, str]:
    """Display strings of a row, one per COLUMNS entry (the ratio and CI as current / baseline)."""
    note = row.note
    if row.machine_ratio is not None:
        note = "; ".join(filter(None, [f"raw {_ratio(row.ratio_raw)}, machine {_ratio(row.machine_ratio)}", note]))
    if row.method and row.method != "status":
        note = "; ".join(filter(None, [row.method, note]))
    return {
        "trial": row.trial,
        "metric": row.metric + (f" ({row.unit})" if row.unit else ""),
        "baseline": side_value(row.baseline, row.repeats[0], row.at_least[0], row.shown_as[0]),
        "current": side_value(row.current, row.repeats[1], row.at_least[1], row.shown_as[1]),
        "ratio": f"{_ratio(row.ratio)}" if row.ratio is not None else "-",
        "CI": f"[{_ratio(row.ci_low)}, {_ratio(row.ci_high)}]" if row.ci_low is not None else "-",
        "decision": row.decision.value,
        "note": note,
    }


def summary_line(cmp) -> str:
    counts: dict[str, int] = defaultdict(int)
    for r in cmp.rows:
        counts[r.decision.value] += 1
    parts = ", ".join(f"{n} {d}" for d, n in sorted(counts.items()))
    verdict = "REGRESSION" if cmp.regressions else ("INCOMPLETE" if cmp.fails_on_missing else (
        "INCONCLUSIVE (not decided within the noise: exit 3)" if cmp.inconclusive else "no regression"))
    how = f"threshold {percent(cmp.threshold)}, {percent(cmp.confidence)} CI" + (", normalised by calibration"
                                                                        if cmp.normalized else "")
    how += ", paired rounds of both sides in one job" if cmp.context else ""
    missing = len(cmp.missing)
    others = len(cmp.unmatched_baseline) + len(cmp.unmatched_current) - missing
    tail = ""
    if missing:
        tail += (f"; {missing} baseline trial(s) missing from current"
                 + (" (allowed: --allow-missing)" if cmp.allow_missing else " (--allow-missing accepts that)"))
    if others:
        tail += f"; {others} other unmatched trial(s)"
    return f"{verdict}: {parts or 'nothing compared'} ({how}){tail}"


def to_markdown(cmp) -> str:
    """A Markdown report: summary, metric table, environment differences, unmatched trials, warnings; every
    value from the rows or the environment through md_cell."""
    how = ("Ratios are current / baseline" + (", paired round by round" if cmp.context else "") +
           "; regression: the whole interval below 1 - threshold; no change: the whole interval above it; "
           "inconclusive: the interval contains it" + (
               # a lower-is-better metric's rule is the mirror image (decide.decide): memory 1.2x is worse
               ". A lower-is-better metric (" + ", ".join(sorted({r.metric for r in cmp.rows if not
                                                                  r.higher_is_better})) +
               ") the other way round: regression, the whole interval above 1 + threshold; no change, the whole "
               "interval below it; inconclusive, the interval contains it"
               if any(not r.higher_is_better for r in cmp.rows) else "") + ".")
    lines = [f"## vitbench {'ab' if cmp.context else 'compare'}", "", f"**{summary_line(cmp)}**", "", how, "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    if cmp.context:
        lines[4:4] = [f"- **{md_cell(k)}**: {md_cell(v)}" for k, v in cmp.context] + [""]
    for r in cmp.rows:
        cells = row_cells(r)
        if r.decision in REGRESSING:
            cells["decision"] = f"**{cells['decision']}**"
        lines.append("| " + " | ".join(md_cell(cells[c]) for c in COLUMNS) + " |")
    if cmp.env_diff:
        lines += ["", "### Environment differences", "", "| field | baseline | current |", "|---|---|---|"]
        lines += [f"| {md_cell(k)} | {md_cell(b)} | {md_cell(c)} |" for k, b, c in cmp.env_diff]
    for title, items in (("Only in baseline (not compared)", cmp.unmatched_baseline),
                         ("Only in current (not compared)", cmp.unmatched_current),
                         ("Matched, no metric to compare (see --metric)", cmp.not_compared)):
        if items:
            lines += ["", f"### {title}", ""] + [f"- {md_cell(lbl)}: {md_cell(why)}" for lbl, why in items]
    if cmp.warnings:
        lines += ["", "### Warnings", ""] + [f"- {md_cell(w)}" for w in cmp.warnings]
    return "\n".join(lines) + "\n"


def to_benchmark_json(cmp) -> list[dict]:
    """github-action-benchmark's `customBiggerIsBetter` entries: name, unit, value (current), range, extra.

    Only bigger-is-better metrics are emitted (that tool reads every entry as bigger-is-better); names are
    '<trial> - <metric>', stable across runs of the same study.
    """
    out = []
    for r in cmp.rows:
        if not r.higher_is_better or r.current is None or r.metric == "status":
            continue
        entry = {"name": f"{r.trial} - {r.metric}", "unit": r.unit, "value": r.current}
        if r.ci_low is not None and r.ratio:
            # half-width of the ratio's CI, relative: the spread a dashboard should expect between runs
            entry["range"] = f"± {(r.ci_high - r.ci_low) / 2 / r.ratio:.1%}"
        extra = [f"decision: {r.decision.value}",
                 f"baseline: {side_value(r.baseline, r.repeats[0], r.at_least[0], r.shown_as[0])}"]
        if r.repeats[1] > 1 or r.at_least[1] or r.shown_as[1]:  # `value` too is a mean, or a bound: said here
            extra.insert(1, "value: " + ", ".join(filter(None, (
                "a lower bound (\u2265)" if r.at_least[1] else "",
                r.shown_as[1] or (f"mean of {r.repeats[1]} runs" if r.repeats[1] > 1 else "")))))
        if r.ratio is not None:
            extra.append(f"ratio: {_ratio(r.ratio)} [{_ratio(r.ci_low)}, {_ratio(r.ci_high)}]"
                         + (" (normalised)" if r.machine_ratio is not None else ""))
        extra.append(f"repeats: {r.repeats[0]}/{r.repeats[1]}, samples: {r.samples[0]}/{r.samples[1]}")
        entry["extra"] = "; ".join(extra)
        out.append(entry)
    return out
