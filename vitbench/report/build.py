"""The report built from a results store and written (`build_report`, its result `Report`, the formats it writes,
`figure` for one figure alone); the package docstring, vitbench.report, lists the files. Re-exported by
vitbench.report."""

from __future__ import annotations

import datetime as _dt
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from vitbench.errors import ConfigError, clip, shorten
from vitbench.outdir import Writer, removed_note
from vitbench.registry import ENV_PLUGINS

FORMATS = ("md", "html", "csv", "parquet")
# what a report writes into its folder (vitbench.outdir: its manifest, the suffixes of its files)
REPORT = Writer("report", ".vitbench-report.json", (".md", ".html", ".csv", ".parquet", ".png", ".svg"))


STATUS = ("status", "Trials by task and status")
FAILURES = ("failures", "Failed trials")
BUDGET = ("time_budget", "Time budget (s): start-up, compile, warm-up, timed steps, other (calibration included)")
SHARED = ("shared_host", "Rows measured while other trials ran on the same host (their speeds may be shared)")


@dataclass
class Report:
    """What `build_report` produced: the tidy trials, summary tables, figure files and every file written.

    tables: name -> table (status, the sections', failures); titles: name -> heading; columns: name -> the
    columns to show in a terminal (None: all); collapse: names whose equal-in-every-row columns may fold;
    notes: table name -> lines shown under it (a legend); not_drawn: figure name -> why it was not drawn (too
    few points, or its `make` raised), shown in its place; failed: section name -> why its table could not be
    made (its `table` raised: the table is empty, a note in its place)."""

    df: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    titles: dict[str, str] = field(default_factory=dict)
    columns: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    collapse: set[str] = field(default_factory=set)
    figures: dict[str, Path] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    title: str = ""
    meta: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    calibration: pd.DataFrame | None = None
    notes: dict[str, list[str]] = field(default_factory=dict)
    not_drawn: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def parse_formats(spec: str | Iterable[str]) -> tuple[str, ...]:
    items = [s.strip().lower() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    bad = [s for s in items if s not in FORMATS]
    if bad or not items:
        raise ConfigError(f"--format {','.join(items) or '(empty)'!s}: unknown {', '.join(bad) or 'value'}; "
                          f"allowed: {', '.join(FORMATS)} (comma separated)")
    return tuple(dict.fromkeys(items))


def _meta(df: pd.DataFrame, cal: pd.DataFrame) -> tuple[str, list[str]]:
    studies = sorted(str(s) for s in df["study"].dropna().unique()) if "study" in df else []
    title = f"vitbench report: {clip(', '.join(studies), 200)}" if studies else "vitbench report"
    meta = []
    n_ok = int((df["status"] == "ok").sum()) if "status" in df else 0
    runs = df["run_id"].nunique() if "run_id" in df else 0
    meta.append(f"{len(df)} trials ({n_ok} ok, {len(df) - n_ok} not ok) from {runs} sweep run(s)")
    from vitbench.env import backend_distributions

    versions = [(f"env.{d}", d) for d in backend_distributions()]
    for col, label in (("env.cpu_model", "CPU"), ("env.device_name", "device"), *versions,
                       ("env.git_sha", "vitbench git")):
        if col in df and df[col].notna().any():
            shown = sorted(map(str, df[col].dropna().unique()))[:4]
            meta.append(f"{label}: {', '.join(clip(v, 120) for v in shown)}")  # bounded: whatever the row holds
    from vitbench.report.caveats import calibration_line

    line = calibration_line(cal)
    if line:
        meta.append(line)
    meta.append(f"generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}")
    return title, meta


def _ab_side_commit(results: Path, df: pd.DataFrame) -> pd.DataFrame:
    """`df` with the commit of a `vitbench ab --results` side for rows that record none, where `results` is one
    side's folder (or a pair or leg in it): the archived baseline's code may not know its commit. An ab folder
    itself, or a folder holding one, is refused: its two sides are two code versions, which the report would
    pool as repeats of one trial."""
    from vitbench.rows import result_files
    from vitbench.store import AB_SIDES, ab_sides

    here = results if results.is_dir() else results.parent
    folders = {f.parent for f in result_files(results)} if results.is_dir() else set()
    # every folder from `results` down to one holding rows, each asked once
    for ab in sorted({p for f in folders for p in (f, *f.parents) if p == here or here in p.parents}):
        sides = ab_sides(ab)
        if sides is not None:
            named = "; ".join(f"{side}: {clip(sides[side].get('describe') or '?', 120)}" for side in AB_SIDES)
            raise ConfigError(f"{results}: holds a `vitbench ab --results` folder, {ab}, whose two sides are "
                              f"two code versions ({named}): a report would pool their rounds as repeats of "
                              "one trial. Report each side apart: " + ", ".join(
                                  f"`vitbench report {ab / side}`" for side in AB_SIDES)
                              + " (ab's own table compares them)")
    for ab in list(here.parents)[:3]:  # a side's folder, a pair in it, a leg in that
        sides = ab_sides(ab)
        if sides is None:
            continue
        sha = sides.get(here.relative_to(ab).parts[0], {}).get("commit")
        if sha:
            have = df["env.git_sha"] if "env.git_sha" in df else pd.Series(None, index=df.index, dtype=object)
            df = df.assign(**{"env.git_sha": have.where(have.notna(), sha)})
        break
    return df


def build_report(results: str | Path, out: str | Path | None = None, formats: Iterable[str] = FORMATS,
                 plots: bool = True, allow_other_files: bool = False) -> Report:
    """Load `results` (a store directory or .jsonl file) and write the report files into `out`: only files a
    report wrote there (vitbench.outdir); a folder holding anyone else's files is refused unless
    `allow_other_files` (the report is then written beside them, none touched)."""
    from vitbench.outdir import OutputFolder, writing
    from vitbench.rows import CorruptLineWarning
    from vitbench.tasks import Role, kinds_with_role
    from vitbench.tidy import load_each

    formats = parse_formats(formats)
    results = Path(results)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the trials and the calibration in one read, raw timings as the JSON text the trials files hold
        df, cal = load_each(results, (None, sorted(kinds_with_role(Role.CALIBRATION))), raw_json=True)
    if df.empty:
        skipped = [str(w.message) for w in caught if issubclass(w.category, CorruptLineWarning)]
        raise ConfigError(f"{results}: no trial records to report on ("
                          + (f"{len(skipped)} line(s) skipped, none a record; first: {clip(skipped[0], 200)}"
                             if skipped else "run `vitbench sweep` first") + ")")
    df = _ab_side_commit(results, df)
    chosen = bool(out)  # a --out the user typed may be a link they chose; the default one is not followed
    out = Path(out) if out else (results if results.is_dir() else results.parent) / "report"
    with writing(out, REPORT, "report directory", chosen=chosen):  # a failed report leaves no new empty folder, names `out`
        folder = OutputFolder(out, REPORT, allow_other=allow_other_files)
        folder.check()
        with folder.staging() as stage:
            rep = _write(df, cal, stage, formats, plots,
                         warnings_=list(dict.fromkeys(str(w.message) for w in caught)))
            removed = folder.publish(stage, [p.name for p in rep.files])
    if removed:
        rep.warnings.append(removed_note(REPORT, removed))
    rep.files = [out / p.name for p in rep.files]
    rep.figures = {k: out / p.name for k, p in rep.figures.items()}
    return rep


def figure(name: str, df: pd.DataFrame):
    """One registered report figure drawn from the rows of `df` as the report draws it (the ok rows of its
    kinds; all of them for a figure that draws failed rows, Figure.failed): a matplotlib Figure, NotDrawn (too
    little to draw it) or None (nothing to draw); `name` must be a registered figure's."""
    from vitbench.report import tables as tablemod
    from vitbench.report.views import report_parts

    for part in report_parts():
        for fig in part.figures:
            if fig.name == name:
                return fig.make(tablemod.ok_rows(df, fig.kinds or part.kinds, fig.failed))  # Figure/NotDrawn/None
    raise KeyError(f"no registered report figure {name!r}")


def units_note(columns: Iterable[str], kinds: Iterable[str]) -> str | None:
    """'Units: img_per_s img/s, mfu fraction': the unit of each column that a record kind of the section declares
    as a number (vitbench.tasks: the declaration, never a list of the report's); None where none is."""
    from vitbench.tasks import NOT_NUMBERS, kind_metrics

    declared: dict = {}
    for kind in kinds:
        declared.update(kind_metrics().get(kind, {}))
    units = [f"{c} {declared[c].unit}" for c in columns if c in declared and declared[c].unit not in NOT_NUMBERS]
    return f"Units: {', '.join(units)}" if units else None


def _unshown_kinds(df: pd.DataFrame, parts) -> list[str]:
    """A warning for ok rows of kinds no registered section shows (a plug-in's kind, the plug-in not loaded): they
    were counted in the status table and silently shown nowhere else."""
    from vitbench.report.parts import covered_kinds
    from vitbench.tasks import tasks

    if "kind" not in df or "status" not in df:
        return []
    counts = df.loc[df["status"] == "ok", "kind"].dropna().astype(str).value_counts()
    counts = counts[~counts.index.isin(covered_kinds(parts))]
    if counts.empty:
        return []
    known = {t.kind for t in tasks(include_hidden=True).values()}
    said = ", ".join(f"{n} of kind {shorten(k, 60)}" for k, n in counts.head(10).items())
    more = f" and {len(counts) - 10} more kind(s)" if len(counts) > 10 else ""
    why = ("the plug-ins defining them register no report section (docs/plugins.md)" if set(counts.index) <= known
           else f"load the plug-in that defines them (${ENV_PLUGINS} or its entry point, docs/plugins.md)")
    return [f"ok rows with no registered report section: {said}{more}; counted in '{STATUS[1]}' and shown "
            f"nowhere else: {why}"]


def _mixed_code(df: pd.DataFrame) -> list[str]:
    """A trial whose ok repeats were measured by different vitbench commits (a sweep resumed after an update, two
    runs of one study at two commits read together) pools two versions of the code as repeats of one: said."""
    from vitbench.env import short_sha
    from vitbench.report.tables import hashable
    from vitbench.tasks import setting_columns

    if df.empty or not {"kind", "status", "env.git_sha"} <= set(df.columns):
        return []
    ok = df[(df["status"] == "ok") & df["env.git_sha"].notna()]
    # rows equal in every setting are repeats of one measurement (tasks.setting_columns)
    keys = ["kind", *sorted(setting_columns(ok["kind"].dropna().unique()) & set(ok.columns))]
    per = ok.assign(**{k: hashable(ok[k]).astype(object).where(ok[k].notna(), "") for k in keys}).groupby(
        keys, sort=False)["env.git_sha"].unique()
    mixed = per[per.map(len) > 1]
    if mixed.empty:
        return []
    n = len(mixed)
    shas = sorted({str(s) for group in mixed for s in group})
    shown = ", ".join(short_sha(s) for s in shas[:4]) + (f" and {len(shas) - 4} more" if len(shas) > 4 else "")
    return [f"{n} trial(s) pool ok repeats measured by {len(shas)} vitbench commits ({shown}): each such "
            "median mixes versions of the code; to compare code, sweep each commit into a directory of its own "
            "and run `vitbench compare` (or `vitbench ab`)"]


def _write(df: pd.DataFrame, cal: pd.DataFrame, out: Path, formats: tuple[str, ...], plots: bool,
           warnings_: list[str]) -> Report:
    """Build the report's tables and figures from `df` and write its files into `out` (a staging folder)."""
    from vitbench.report import tables as tablemod
    from vitbench.report.caveats import CAVEAT, LEGEND, marked_rows
    from vitbench.report.parts import NotDrawn, failure, owner
    from vitbench.report.render import arrow_safe, write_html, write_markdown
    from vitbench.report.views import report_parts

    title, meta = _meta(df, cal)
    df = tablemod.flag_shared_host(df)
    shared = tablemod.shared_host(df)
    if not shared.empty:
        warnings_ = [*warnings_, f"{len(shared)} ok row(s) were measured while other trials ran on the same host: "
                                 f"see the table '{SHARED[0]}' (column shared_host in the trials)"]
    n_marked = marked_rows(df)
    if n_marked:
        warnings_ = [*warnings_, f"{n_marked} ok timed row(s) are flagged unstable or were measured beside other "
                                 f"trials: marked in the tables' {CAVEAT} column and ringed in the figures, never "
                                 "pooled with clean repeats"]
    rep = Report(df=df, tables={STATUS[0]: tablemod.status_counts(df)}, titles={STATUS[0]: STATUS[1]},
                 title=title, meta=meta, calibration=cal,
                 warnings=warnings_)
    figure_titles: dict[str, str] = {}
    parts = report_parts()
    rep.warnings += _unshown_kinds(df, parts) + _mixed_code(df)
    for part in parts:
        if part.table is not None:
            try:  # a section that raises (a plug-in's bug) is a note in its place, not the whole report lost
                table = part.table(tablemod.ok_rows(df, part.kinds))
                if not isinstance(table, pd.DataFrame):
                    raise TypeError(f"its table function returned {type(table).__name__}, not a DataFrame")
                rep.tables[part.name] = table
            except Exception as e:  # noqa: BLE001 - said in the report and as a warning
                rep.tables[part.name], rep.failed[part.name] = pd.DataFrame(), failure(e)
                rep.warnings.append(f"report section {part.name!r} ({owner(part)}) could not be made: "
                                    f"{failure(e)}; a note stands in its place, the rest of the report is written")
            rep.titles[part.name] = part.title
            rep.columns[part.name] = part.columns
            if part.collapse:
                rep.collapse.add(part.name)
    rep.tables[FAILURES[0]] = tablemod.failures(df)
    rep.titles[FAILURES[0]] = FAILURES[1]
    rep.columns[FAILURES[0]] = ("model", "task", "resolution", "batch_size", "repeat", "status", "error_message")
    rep.collapse.add(FAILURES[0])
    rep.tables[SHARED[0]] = shared
    rep.titles[SHARED[0]] = SHARED[1]
    from vitbench.report.budget import time_budget

    rep.tables[BUDGET[0]] = time_budget(pd.concat([df, cal], ignore_index=True) if cal is not None and not cal.empty
                                        else df)
    rep.titles[BUDGET[0]] = BUDGET[1]

    if plots:
        for part in parts:
            for figure in part.figures:
                saved = [out / f"{figure.name}.{ext}" for ext in ("png", "svg")]
                try:
                    fig = figure.make(tablemod.ok_rows(df, figure.kinds or part.kinds, figure.failed))
                    if fig is not None and not isinstance(fig, NotDrawn):
                        for p in saved:
                            fig.savefig(p, dpi=130 if p.suffix == ".png" else None, bbox_inches="tight")
                except Exception as e:  # noqa: BLE001 - as a section's table: a note in the figure's place
                    fig = NotDrawn(f"the figure could not be made: {failure(e)}")
                    rep.warnings.append(f"report figure {figure.name!r} of section {part.name!r} ({owner(part)}) "
                                        f"could not be made: {failure(e)}; a note stands in its place")
                    for p in saved:  # half a figure is no figure (the staging folder: nothing else is there)
                        p.unlink(missing_ok=True)
                if isinstance(fig, NotDrawn):  # a note in the figure's place
                    rep.not_drawn[figure.name] = fig.reason
                    figure_titles[figure.name] = figure.title
                    continue
                if fig is None:
                    continue
                rep.files += saved
                rep.figures[figure.name] = out / f"{figure.name}.png"
                figure_titles[figure.name] = figure.title

    shown = {k: v for k, v in rep.tables.items() if not v.empty}
    for part in parts:
        if part.name in shown:
            note = units_note(shown[part.name].columns, part.kinds)
            if note:
                rep.notes[part.name] = [note]
    for name, table in shown.items():
        if CAVEAT in table and (table[CAVEAT].fillna("") != "").any():
            rep.notes.setdefault(name, []).append(LEGEND)
    if "csv" in formats or "parquet" in formats:
        tidy = arrow_safe(df)
        named = {"trials": tidy, **{k: arrow_safe(v) for k, v in shown.items() if not v.empty}}
        for name, table in named.items():
            if "csv" in formats:
                p = out / f"{name}.csv"
                table.to_csv(p, index=False)
                rep.files.append(p)
            if "parquet" in formats:
                p = out / f"{name}.parquet"
                table.to_parquet(p, index=False)
                rep.files.append(p)
    titled = {k: (rep.titles[k], shown[k] if k in shown else pd.DataFrame(
        {"note": [f"This section could not be made: {rep.failed[k]}"]})) for k in rep.tables
              if k in shown or k in rep.failed}  # a failed section: a one-line note in its place
    figs = {k: (t, rep.figures.get(k) or NotDrawn(rep.not_drawn[k])) for k, t in figure_titles.items()}
    if "md" in formats:
        p = out / "report.md"
        write_markdown(p, title, meta, titled, figs, rep.notes)
        rep.files.append(p)
    if "html" in formats:
        p = out / "report.html"
        write_html(p, title, meta, titled, figs, rep.notes)
        rep.files.append(p)
    return rep
