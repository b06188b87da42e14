"""Which rows a fit takes: `--where` (a pandas query, restricted to comparisons) and the check for pooled curves.

`--where EXPR` is `DataFrame.query(EXPR, engine="python")` after the expression has been parsed and found to hold
only column names, constants, comparisons, arithmetic and boolean operators (`and`, `or`, `not`, `&`, `|`, `~`,
`in`): no calls, attributes, subscripts, `@` variables or lambdas, so nothing beyond a row filter is evaluated.
Backticks quote a column name with spaces, as in pandas (`` `Seen Examples` > 1e6 ``). The expression is checked
as pandas reads it: each backticked name outside a string literal (`_split_backticks`, pandas' own rule) made a
placeholder name, then tokenised (`_check_tokens`: no `.`, no call, only the allowed operators) and parsed, so a
backtick inside a string cannot hide a part of the expression from the check that pandas then runs. The
expression is bounded before it is parsed or evaluated (MAX_WHERE_CHARS, MAX_WHERE_DEPTH): a deep one would
overflow the parser's or pandas' stack.

Pooling: a group that holds rows of several curves (two models, two benchmarks, two tasks at the same compute)
is fitted as one curve, which is rarely what was meant (a forgotten `--group`). A column pools curves in a group
when it has several values there, a compute budget carries rows of two of them, and it is not a per-row label
(fewer distinct values than half the rows). Such columns are named with their values in a warning. The columns
looked at: text ones, those of _IDENTITY, and the numeric settings of the group's kinds
(vitbench.tasks.setting_columns, as the report's medians split on them): finetune rows at 32 and 64 px were one
curve without a word, the gap between them taken for noise. Seeds and bookkeeping are no settings (repeats of one
curve), and the columns that set the pre-training budget (_BUDGET) are the compute axis, never a curve's label;
nor is a vitbench row's envelope (its trial key, study, run, repeat, times: _ENVELOPE).

A row whose group column (`--group`, default `family`) is empty is in no group: it is left out with a note
naming the column and the rows (it was fitted as a group of its own, titled "all rows"); a group column empty in
every row is a ConfigError, never all rows pooled as one curve.
"""

from __future__ import annotations

import ast
import io
import keyword
import shlex
import token
import tokenize

import numpy as np
import pandas as pd

from vitbench.errors import ConfigError, clip, shorten
from vitbench.fit.table import column_hint, columns_text
from vitbench.record import INCOMPARABLE, JOB_FIELDS

_OK_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd, ast.Invert,
             ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr,
             ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Name,
             ast.Load, ast.Constant, ast.List, ast.Tuple)
MAX_WHERE_DEPTH = 100  # nesting levels of a --where expression: a filter a person writes nests a few; pandas'
# python-engine evaluator recurses several frames a level and overflows Python's stack (1000 frames) between 300
# and 500 levels of unary minus (measured, pandas 2), ast.parse near 1000
MAX_WHERE_CHARS = 10_000  # a --where expression's length: room for an `in [...]` list of several hundred names
# columns that name a curve whatever their dtype (a results row's benchmark, model and recipe)
_IDENTITY = ("model", "kind", "dataset", "shots", "task", "backend", "precision", "teacher", "distillation")


MAX_WHERE_EXPONENT = 1000  # a power's exponent in --where: a literal up to this (10 ** 10 ** 10 would never end)
MAX_WHERE_BASE = 2 ** 63  # a power's integer literals in --where: (2**63) ** 1000 has 19,000 digits, a millisecond


def _cheap(node: ast.BinOp) -> bool:
    """Arithmetic whose cost is bounded: no text or list operand (`'a' * 10**9` would take gigabytes), and a
    power only to a literal exponent of at most MAX_WHERE_EXPONENT, of a base that holds no power and no integer
    above MAX_WHERE_BASE (`((9**999)**999)**999` ran for minutes: each power of a Python integer multiplies its
    digits by the exponent)."""
    def literal(n):
        return isinstance(n, (ast.List, ast.Tuple)) or (isinstance(n, ast.Constant) and isinstance(n.value, str))

    if literal(node.left) or literal(node.right):
        return False
    if isinstance(node.op, ast.Pow):
        exp = node.right.operand if isinstance(node.right, ast.UnaryOp) else node.right
        inside = list(ast.walk(node.left))
        return isinstance(exp, ast.Constant) and isinstance(exp.value, (int, float)) \
            and not isinstance(exp.value, bool) and abs(exp.value) <= MAX_WHERE_EXPONENT \
            and not any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) for n in inside) \
            and not any(isinstance(n, ast.Constant) and type(n.value) is int and abs(n.value) > MAX_WHERE_BASE
                        for n in inside)
    return True


def where(frame: pd.DataFrame, expr: str, where_text: str) -> pd.DataFrame:
    """The rows of `frame` for which `expr` holds; anything else than a row filter over its columns is a
    ConfigError naming --where."""
    shown = shorten(expr, 120)
    if len(expr) > MAX_WHERE_CHARS:
        raise ConfigError(f"--where {shown}: {len(expr)} characters; at most {MAX_WHERE_CHARS} (a row filter)")
    names: dict[str, str] = {}  # placeholder -> the backticked column name it stands for
    checked = "".join(_hold(names, part[1:-1]) if quoted else part
                      for quoted, part in _split_backticks(expr)).strip()
    try:
        tree = ast.parse(checked, mode="eval")
    except SyntaxError as e:
        raise ConfigError(f"--where {shown}: not an expression ({clip(e.msg, 100)}); e.g. "
                          "--where \"model == 'ViT-B/16' and steps >= 100\"") from None
    except (RecursionError, MemoryError):  # the parser's own stack: nested far past MAX_WHERE_DEPTH
        tree = None
    if tree is None or _depth(tree) > MAX_WHERE_DEPTH:
        raise ConfigError(f"--where {shown}: nested more than {MAX_WHERE_DEPTH} levels deep (each operator is a "
                          "level, and each operand past the second of a chained and/or or comparison); write a "
                          "shorter filter, e.g. `col in [...]` for many values")
    _check_tokens(checked, shown)
    for node in ast.walk(tree):
        if not isinstance(node, _OK_NODES):
            raise ConfigError(f"--where {shown}: {type(node).__name__.lower()} is not allowed; {_ALLOWED}")
        if isinstance(node, ast.BinOp) and not _cheap(node):
            raise ConfigError(f"--where {shown}: arithmetic on text or lists, or a power whose exponent is not a "
                              f"number of at most {MAX_WHERE_EXPONENT} or whose base holds a power or an integer "
                              f"above 2**63 (it could run for hours); e.g. `compute >= 1e12`")
        if isinstance(node, ast.Name):
            col = names.get(node.id, node.id)
            if col not in frame.columns and col != "index":
                raise ConfigError(f"--where {shown}: no column {shorten(col, 60)} in {where_text}"
                                  f"{column_hint(frame.columns, col)}; columns: {columns_text(frame.columns)}")
    def fail(e: Exception) -> ConfigError:
        return ConfigError(f"--where {shown}: {clip(str(e).splitlines()[0] if str(e) else type(e).__name__, 200)}")

    # with arithmetic, integer columns as floats: int64 arithmetic wraps without a word (`compute ** 10 >= 1e12`
    # dropped compute = 128, 2**70 wrapping to 0), a float's goes to inf; a comparison alone stays exact on them
    if any(isinstance(node, ast.BinOp) for node in ast.walk(tree)):
        frame_for = frame.astype({c: "float64" for c in frame.columns
                                  if pd.api.types.is_integer_dtype(frame[c].dtype)})
    else:
        frame_for = frame
    try:  # frame.query is eval, then .loc: a value that is not a row mask (a column of numbers, `1 == 1`) made
        # .loc raise pandas' own words ("[2.68, 7.19] not in index": the column's values)
        mask = frame_for.eval(expr, engine="python")
    except Exception as e:  # pandas raises many kinds for a well-formed but meaningless filter
        raise fail(e) from None
    if not (isinstance(mask, pd.Series) and mask.index.equals(frame.index)
            and (pd.api.types.is_bool_dtype(mask)
                 or (mask.dtype == object and all(isinstance(v, (bool, np.bool_)) for v in mask)))):
        raise ConfigError(f"--where {shown}: does not select rows (it must be true or false per row)")
    try:  # (a boolean Series on the frame's index: a DataFrame comes back)
        return frame.loc[mask]
    except Exception as e:  # a row neither true nor false (a missing value of a nullable boolean column)
        raise fail(e) from None


_ALLOWED = "use column names, constants, comparisons, arithmetic, and/or/not and `in [...]`"
# what a --where expression's tokens may be: operators of comparisons, arithmetic, and/or/not, `in [...]` lists
_OK_OPS = frozenset({"(", ")", "[", "]", ",", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "//", "%",
                     "**", "&", "|", "~"})
_OK_WORDS = frozenset({"and", "or", "not", "in", "True", "False", "None"})
_LAYOUT = frozenset({tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                     tokenize.ENDMARKER})


def _split_backticks(s: str) -> list[tuple[bool, str]]:
    """`s` cut into (backtick-quoted, text) parts as pandas cuts it (pandas.core.computation.parsing
    ._split_by_backtick, pandas 3): a backtick opens a quoted name only outside a '...' or "..." literal (a quote
    ends one unless a backslash precedes it), a doubled backtick inside a name is one backtick; an unclosed one
    stays text (a syntax error)."""
    parts: list[tuple[bool, str]] = []
    buf: list[str] = []
    state, i = None, 0  # state: None, "`", "'" or '"' (inside a name or a literal)
    while i < len(s):
        c = s[i]
        if c == "`" and state is None:
            if buf:
                parts.append((False, "".join(buf)))
            buf, state = [c], "`"
            i += 1
            continue
        if c == "`" and state == "`":
            if s[i + 1:i + 2] == "`":
                buf += "``"
                i += 2
                continue
            parts.append((True, "".join(buf) + c))
            buf, state = [], None
            i += 1
            continue
        if c in "'\"" and state is None:
            state = c
        elif c == state and s[i - 1] != "\\":
            state = None
        buf.append(c)
        i += 1
    if buf:
        parts.append((False, "".join(buf)))
    return parts


def _hold(names: dict[str, str], name: str) -> str:
    """A placeholder identifier for the backticked column `name` (kept in `names`)."""
    key = f"__col{len(names)}__"
    names[key] = name.replace("``", "`")
    return key  # identifier characters, as pandas puts in its place


def _check_tokens(text: str, shown: str) -> None:
    """Refuse a --where expression (backticked names already placeholders) whose tokens are anything but names,
    numbers, strings (no f-strings), the and/or/not/in words and the operators of _OK_OPS: no attribute (`.`),
    no call (a name, `)`, `]` or a string followed by `(`), no `@`, `:`, `=`, `;`, `lambda`, `if`."""
    try:
        toks = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in _LAYOUT]
    except (tokenize.TokenError, SyntaxError) as e:
        raise ConfigError(f"--where {shown}: not an expression ({clip(str(e), 100)})") from None
    prev = None
    for t in toks:
        what = None
        if t.type == token.OP and t.string == ".":
            what = "attribute (`.`)"
        elif t.type == token.OP and t.string == "(" and prev is not None and (
                prev.type in (token.NAME, token.STRING) and prev.string not in _OK_WORDS
                or prev.string in (")", "]")):
            what = "call"
        elif t.type == token.OP and t.string not in _OK_OPS:
            what = f"operator {t.string!r}"
        elif t.type == token.NAME and keyword.iskeyword(t.string) and t.string not in _OK_WORDS:
            what = f"keyword {t.string!r}"
        elif t.type == token.STRING and "f" in t.string.split(t.string[-1], 1)[0].lower():
            what = "f-string"
        elif t.type not in (token.OP, token.NAME, token.NUMBER, token.STRING):
            what = f"token {shorten(t.string, 20)}"
        if what:
            raise ConfigError(f"--where {shown}: {what} is not allowed; {_ALLOWED}")
        prev = t


def _depth(tree: ast.AST) -> int:
    """The nesting depth of `tree` as pandas evaluates it, walked without recursion (the expression may be deep):
    `a and b and c` (one node in Python's tree) is nested pairwise there, as is a chained comparison, so a boolean
    operator or a comparison of k operands counts k - 1 levels."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        d += (len(node.values) - 2 if isinstance(node, ast.BoolOp) else
              len(node.ops) - 1 if isinstance(node, ast.Compare) else 0)
        deepest = max(deepest, d)
        stack += [(child, d + 1) for child in ast.iter_child_nodes(node)]
    return deepest


# The settings that make a row's pre-training budget: the fit's compute axis (pretrain_exaflops is 3 x forward
# FLOPs x images x epochs of them; images_seen, steps x batch), so their values at one compute are one curve's
# points, never two curves. Only pooling settings beside them are flagged (vitbench.tasks.setting_columns).
_BUDGET = frozenset({"pretrain_steps", "checkpoint_images", "checkpoint_epochs", "exaflops_images",
                     "exaflops_epochs"})
# A vitbench row's envelope (vitbench.tidy): which trial, run, repeat, directory and time it was, never what it
# measured. Text, so the check took them for labels: a curve's repeats over seeds, the second repeat of each in
# another run or study (a resumed sweep), read as two pooled curves ("2 values of 'run_id'").
_ENVELOPE = (*JOB_FIELDS, "started_at", "finished_at", "source")


def _columns(part: pd.DataFrame) -> tuple[frozenset[str], frozenset[str]]:
    """(the settings, the columns never a label) of `part`'s rows. Settings: those of the rows' kinds (any kind's
    where it has no `kind` column, as the report's split_keys), less the pre-training budget (_BUDGET). Never a
    label: the budget, and for vitbench rows (a `kind` column) the envelope and the bookkeeping fields
    (vitbench.tasks.fields.BOOKKEEPING; another tool's CSV may name a curve `study`)."""
    from vitbench.tasks import setting_columns  # here: the fit's command-line help does not import the tasks
    from vitbench.tasks.fields import BOOKKEEPING

    kinds = part["kind"].dropna().astype(str).unique() if "kind" in part.columns else None
    never = _BUDGET | (frozenset((*_ENVELOPE, *BOOKKEEPING)) if kinds is not None else frozenset())
    return setting_columns(kinds) - never, never


def _label_like(s: pd.Series, settings: frozenset[str] = frozenset()) -> bool:
    """Whether column `s` may name a curve: text, one of _IDENTITY, a setting of the rows' kinds whatever its
    dtype (a numeric one, resolution or batch size, was never looked at: two resolutions fitted as one curve), or
    a field whose values are incomparable (vitbench.record.INCOMPARABLE: two method versions)."""
    return s.name in _IDENTITY or s.name in settings or s.name in INCOMPARABLE \
        or not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s)


def pooled(part: pd.DataFrame, skip: set[str], compute: str = "_compute") -> list[tuple[str, list[str]]]:
    """[(column, its values)] for every column that pools several curves in this group's rows (module doc)."""
    out = []
    settings, never = _columns(part)
    for col in part.columns:
        if col in skip or col in never or str(col).startswith("_") or not _label_like(part[col], settings):
            continue
        vals = part[col]
        try:
            vals = vals.dropna()
            distinct = vals.nunique()
        except TypeError:  # dicts or lists in the cells: not a label
            continue
        if distinct < 2 or distinct > len(part) / 2:
            continue
        shared = part.loc[vals.index].groupby(compute)[col].nunique().max()
        if shared >= 2:
            out.append((str(col), _values(vals)))
    return out


def _values(vals: pd.Series) -> list[str]:
    """A pooling column's distinct values as a note shows them: numbers in their order, whole ones without a
    decimal point (resolutions 32, 64, 128 read 32, 64, 128, not '128', '32', '64' or 32.0 where a cell is
    empty); anything else sorted as text."""
    if pd.api.types.is_numeric_dtype(vals) and not pd.api.types.is_bool_dtype(vals):
        return [str(int(v)) if float(v).is_integer() else str(v) for v in sorted(vals.unique())]
    return sorted(map(str, vals.unique()))


def pooled_note(title: str, pools: list[tuple[str, list[str]]]) -> str:
    parts = []
    for col, vals in pools:
        shown = ", ".join(shorten(v, 30).strip("'\"") for v in vals[:5]) + (
            f", ... ({len(vals) - 5} more)" if len(vals) > 5 else "")
        parts.append(f"{len(vals)} values of {shorten(col, 40)} ({shown})")
    cols = " ".join(f"--group {shlex.quote(clip(c, 40))}" for c, _ in pools)
    return clip(f"{title}: one curve pools rows of {'; '.join(parts)} at the same compute; "
                f"fit them apart with {cols}, or select rows with --where", 600)


def no_group(frame: pd.DataFrame, group: list[str]) -> pd.Series:
    """Per row: whether a group column's cell is empty (NaN, None, or only spaces): the row is in no group."""
    out = pd.Series(False, index=frame.index)
    for g in group:
        col = frame[g]
        out |= col.isna() | col.map(lambda v: isinstance(v, str) and not v.strip()).astype(bool)
    return out


def rows_text(index: pd.Index, limit: int = 10) -> str:
    """"rows 3, 7, ... (N more)": a CSV's data rows, 1 the first after the header (as a bad value's row is
    said)."""
    shown = [str(i + 1 if isinstance(i, (int, np.integer)) else i) for i in index[:limit]]
    return f"row{'s' if len(index) > 1 else ''} {', '.join(shown)}" + (
        f", ... ({len(index) - limit} more)" if len(index) > limit else "")


def no_group_note(frame: pd.DataFrame, group: list[str], empty: pd.Series, kept: pd.Series, given: bool,
                  values: str, where: str) -> str:
    """The note on the `empty` rows of the `kept` ones (those with `values`) left out for an empty group cell,
    naming the columns and the rows; a ConfigError where every kept row is (a group column that holds nothing:
    no group to fit, never its rows pooled as one). `given`: the columns are --group's, not its default."""
    option = "--group" if given else "--group's default"
    cols = [g for g in group if (kept & no_group(frame, [g])).any()]
    one = len(cols) == 1
    named = f"{'column' if one else 'columns'} {' and '.join(shorten(g, 60) for g in cols)} ({option})"
    if empty.sum() == kept.sum():
        fix = "group by another column (--group COL)" if given else \
            "remove the column to fit every row as one group, or group by another (--group COL)"
        raise ConfigError(f"{where}: {named} {'is' if one else 'are'} empty in every row with {values}: no group "
                          f"to fit; fill {'it' if one else 'them'}, or {fix}")
    n = int(empty.sum())
    return f"{n} row{'s' if n > 1 else ''} with an empty {named}: {rows_text(frame.index[empty])}"
