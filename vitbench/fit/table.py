"""Where fit points come from: a vitbench results directory (or .jsonl) or any CSV, as one pandas table.

Results (read with `vitbench.tidy.load`) keep their `ok` rows and gain derived columns:
- `family` of the row's model (vitbench.models.specs), so `--group family` works on any study;
- `inference_gflops`: analytic forward GFLOPs per image at the row's resolution (1 MAC = 2 FLOPs), one of
  the compute axes besides `pretrain_exaflops`, `images_seen` and `params_m` that transfer rows carry.
A CSV is taken as it is (published tables, other tools' output). Either way a column the fit needs must
exist and hold numbers; otherwise a ConfigError names the column and lists the columns there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import pandas as pd

from vitbench.errors import ConfigError, shorten

# The columns that say which benchmark a results row measures (Figure 5's panels): a fit never mixes them.
BENCHMARK_COLUMNS: tuple[str, ...] = ("kind", "dataset", "shots")
# The columns that say how an upstream was trained beyond its budget (a distillation teacher): another recipe,
# fitted apart from the plain one (vitbench.tasks.upstream.TeacherFields).
RECIPE_COLUMNS: tuple[str, ...] = ("teacher", "distillation")


class SourceKind(str, Enum):
    RESULTS = "results"
    CSV = "csv"


@dataclass
class Source:
    # source_kind, not kind: a results table's `kind` column is the record kind (BENCHMARK_COLUMNS); the name is
    # the fit report's field `source_kind` (issue 52 item 5)
    source_kind: SourceKind
    path: Path
    frame: pd.DataFrame

    @property
    def benchmark_columns(self) -> list[str]:
        """Columns a results source is always split by (none for a CSV: its rows are what the user gave)."""
        if self.source_kind != SourceKind.RESULTS:
            return []
        return [c for c in (*BENCHMARK_COLUMNS, *RECIPE_COLUMNS)
                if c in self.frame.columns and self.frame[c].notna().any()]


def _family(model) -> str | None:
    from vitbench.errors import UnknownModelError
    from vitbench.models.specs import get_spec

    if not isinstance(model, str):
        return None
    try:
        return get_spec(model).family
    except UnknownModelError:
        return "other"


def _inference_gflops(model, resolution) -> float:
    from vitbench.errors import VitbenchError
    from vitbench.models.analytic import analytic_counts
    from vitbench.models.specs import get_spec

    try:
        return analytic_counts(get_spec(model), int(resolution)).gflops
    except (VitbenchError, TypeError, ValueError):  # a model or resolution this table does not know
        return float("nan")


def results_frame(df: pd.DataFrame) -> pd.DataFrame:
    """`ok` rows of a results DataFrame (vitbench.tidy.load) with the derived `family` and
    `inference_gflops` columns."""
    if df.empty or "status" not in df.columns:
        return df.copy()
    out = df[df["status"] == "ok"].copy()
    if "model" in out.columns:
        families: dict = {}  # once per model name, not per row (a sweep's 100,000 rows name a few models)
        out["family"] = out["model"].map(lambda m: families[m] if m in families else
                                         families.setdefault(m, _family(m)))
        if "resolution" in out.columns:
            res = [r if pd.notna(r) else None for r in out["resolution"]]  # NaN: a row without one
            lut = {(m, r): _inference_gflops(m, r) for m, r in set(zip(out["model"], res))}
            out["inference_gflops"] = [lut[(m, r)] for m, r in zip(out["model"], res)]
    return out.reset_index(drop=True)


def load_source(path: str | Path) -> Source:
    """A results directory or .jsonl file (vitbench.tidy.load), or a .csv file."""
    p = Path(path)
    if p.is_dir() or p.suffix == ".jsonl":
        from vitbench.tidy import load

        return Source(SourceKind.RESULTS, p, results_frame(load(p)))
    if p.suffix.lower() == ".csv":
        if not p.is_file():
            raise ConfigError(f"{str(p)!r} does not exist")
        try:
            # the whole file typed at once: read in chunks (pandas' default), a column of mixed values got a type
            # per chunk, so its type, and a DtypeWarning on the terminal, depended on the file's size
            # only an empty cell is missing: pandas' default also took "NaN", "NA", "NULL", "N/A"... for one, so a
            # cell spelling NaN was dropped as empty (numeric_column refuses it) and a family named "NA" had none
            frame = pd.read_csv(p, low_memory=False, keep_default_na=False, na_values=[""])
            # the header as written: pandas renames a repeated name ("error" twice: error, error.1)
            header = pd.read_csv(p, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0].tolist()
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise ConfigError(f"{str(p)!r} is not a readable CSV file: {str(e).splitlines()[0]}") from None
        seen: set[str] = set()
        twice = next((c for c in header if c != "" and (c in seen or seen.add(c))), None)
        if twice is not None:
            raise ConfigError(f"{str(p)!r}: column {shorten(twice, 60)} is named twice in the header (each column "
                              f"needs its own name); columns: {columns_text(header)}")
        return Source(SourceKind.CSV, p, frame)
    raise ConfigError(f"SOURCE {str(p)!r}: expected a results directory, a results .jsonl file or a .csv file")


def columns_text(columns, limit: int = 20) -> str:
    """The first `limit` column names, each quoted (a name's leading or trailing space shows: `' accuracy'`),
    and how many more (an error message never lists 100 columns)."""
    names = [shorten(str(c), 40) for c in columns]
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _around(name: str) -> str:
    """What surrounds `name`: "a leading space", "trailing whitespace", "leading and trailing spaces"..."""
    def side(ws: str, where: str) -> str:
        return f"a {where} space" if ws == " " else f"{where} {'spaces' if set(ws) == {' '} else 'whitespace'}"

    lead, trail = name[:len(name) - len(name.lstrip())], name[len(name.rstrip()):]
    return " and ".join(side(ws, w) for ws, w in ((lead, "leading"), (trail, "trailing")) if ws)


def column_hint(columns, column: str) -> str:
    """Why `column` is not among `columns` where the reason does not show (empty: none found): a column of that
    name but for spaces around it (a header written "compute, accuracy"), or one column whose name holds ';' or a
    tab (a file not comma separated). Names are never stripped or renamed: the hint says how to name them."""
    names = [str(c) for c in columns]
    near = [c for c in names if c != column and c.strip() == column.strip()]
    if near and not _around(near[0]):  # the name asked for has the spaces
        return f"; column {shorten(near[0], 60)} has no spaces around its name"
    if near:
        return (f"; column {shorten(near[0], 60)} has {_around(near[0])} (a header with a space after each "
                "comma?): remove it from the file's header, or name the column with it")
    spaced = [c for c in names if c != c.strip()]
    if spaced:
        shown = ", ".join(shorten(c, 40) for c in spaced[:5]) + (f", ... ({len(spaced) - 5} more)"
                                                                  if len(spaced) > 5 else "")
        which = "a column name has spaces around it" if len(spaced) == 1 else \
            f"{len(spaced)} column names have spaces around them"
        return f"; {which} ({shown}): a header with a space after each comma?"
    if len(names) == 1 and (";" in names[0] or "\t" in names[0]):
        sep = "';'" if ";" in names[0] else "tabs"
        return (f"; the file has a single column, {shorten(names[0], 60)}: it seems separated by {sep}, not by "
                "commas (a CSV file must be comma separated)")
    return ""


def no_column(columns, column: str, option: str, where: str) -> str:
    """The message for a column `option` names that is not there: the columns there are, and column_hint's why."""
    return f"{where}: no column {shorten(column, 60)} ({option}){column_hint(columns, column)}; columns: " \
           f"{columns_text(columns)}"


def numeric_column(frame: pd.DataFrame, column: str, option: str, where: str) -> pd.Series:
    """`frame[column]` as floats (missing cells NaN); a missing column or a non-numeric cell is a ConfigError
    naming the column, the option that chose it, and the columns there are."""
    if column not in frame.columns:
        raise ConfigError(no_column(frame.columns, column, option, where))
    raw = frame[column]
    values = pd.to_numeric(raw, errors="coerce")
    text = raw.astype(str).str.strip()
    bad = values.isna() & raw.notna() & text.str.lower().isin(("nan", "+nan", "-nan"))
    if bad.any():  # a cell spelling NaN: not a number and not an empty cell (a missing value), refused like inf
        i = int(np.flatnonzero(bad.to_numpy())[0])
        label = raw.index[i]  # the file's data row, as `inf`'s message says it, also after --where
        row = label + 1 if isinstance(label, (int, np.integer)) else label
        raise ConfigError(f"{where}: column {shorten(column, 60)} ({option}) is not finite: row {row} holds "
                          f"{shorten(raw.iloc[i], 60)} (leave a missing value's cell empty)")
    bad = values.isna() & raw.notna() & (text != "")
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(f"{where}: column {shorten(column, 60)} ({option}) is not numeric: row {i + 1} holds "
                          f"{shorten(raw.iloc[i], 60)}; columns: {columns_text(frame.columns)}")
    return values.astype(float)
