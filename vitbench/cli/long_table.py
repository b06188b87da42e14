"""Long tables (more than LONG_ROWS rows: `vitbench compare` of two large sweeps, `vitbench sweep --dry-run` of a
large study) laid out in one pass over the cells, as plain aligned lines.

rich lays a table out by measuring every cell and then wrapping every cell, through its markup parser, at some
0.5-1 ms a row of eight columns (issue 51: two thirds of `vitbench compare`'s time at 1,000 trials, most of
`sweep --dry-run`'s at 10,000); here a row costs a few string operations. The rules of cli/common.py hold: the
same widths (`column_widths`), no word or number broken inside a cell (a cell longer than its column wraps
between words), the width exceeded rather than a word folded. What is dropped against rich's layout: the box
lines (a rule under the header instead), inline styles inside a cell that wraps (its row's style stays). Where
the console shows no styles (no terminal: a log, a pipe, a file) the lines are written as they are, without
passing through rich's markup and wrapping.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table
from rich.text import Text

# Rows above which a table is laid out here: below it rich's layout costs under a second.
LONG_ROWS = 1000
GAP = 2  # spaces between two columns


def column_widths(mins: list[int], maxs: list[int], avail: int) -> list[int]:
    """Column widths for `avail` columns of text: each column's widest cell where they all fit; else each its
    minimum (its longest word) where even the minimums do not fit; else the minimums plus the rest of the width
    shared in proportion to what each would still use."""
    if sum(maxs) <= avail:
        return list(maxs)
    if sum(mins) >= avail:
        return list(mins)
    spare, slack = avail - sum(mins), [hi - lo for lo, hi in zip(mins, maxs)]
    return [lo + spare * s // sum(slack) for lo, s in zip(mins, slack)]


def _cell(c) -> tuple[str, str]:
    """(markup, plain text) of a cell given as rich markup (the CLI's cells: escaped text, a status in colour)."""
    if isinstance(c, Text):
        return c.markup, c.plain
    c = str(c)
    return c, (Text.from_markup(c).plain if "[" in c else c)


def _longest_word(plain: str) -> int:
    return max(map(len, plain.split()), default=0)


def _wrap(plain: str, width: int) -> list[str]:
    """`plain` in lines of at most `width` columns, broken between words only (a longer word on its own line)."""
    out, cur = [], ""
    for word in plain.split():
        if cur and len(cur) + 1 + len(word) > width:
            out.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return [*out, cur]


def lines(table: Table, width: int, styled: bool = True) -> list[str]:
    """The table as lines of rich markup (`styled`) or of plain text: title, header, a rule, one line per row (more
    where a cell wraps), caption; every column as wide as `column_widths` gives it for `width` columns of text."""
    cols = table.columns
    cells = [[_cell(c) for c in col._cells] for col in cols]
    heads = [_cell(col.header) if table.show_header else ("", "") for col in cols]
    maxs, mins = [], []
    for col, head, column in zip(cols, heads, cells):
        longest = max(len(head[1]), max((len(p) for _, p in column), default=0))
        maxs.append(longest)
        mins.append(longest if col.no_wrap else max(_longest_word(head[1]),
                                                    max((_longest_word(p) for _, p in column), default=0)))
    widths = column_widths(mins, maxs, width - GAP * (len(cols) - 1))
    right = [col.justify == "right" for col in cols]
    wrapped: dict[tuple[str, int], list[str]] = {}  # a long cell's lines, once per text (notes repeat)

    def line(parts: list[tuple[str, str]], style) -> list[str]:
        """One row's lines: each cell padded to its column, wrapped between words where it is wider."""
        pieces = []
        for (markup, plain), w, r in zip(parts, widths, right):
            if len(plain) <= w:
                pad = " " * (w - len(plain))
                text = markup if styled else plain
                pieces.append([pad + text if r else text + pad])
            else:
                if (plain, w) not in wrapped:
                    wrapped[plain, w] = [x.rjust(w) if r else x.ljust(w) for x in _wrap(plain, w)]
                pieces.append([escape(x) for x in wrapped[plain, w]] if styled else wrapped[plain, w])
        depth = max(map(len, pieces))
        out = []
        for i in range(depth):
            text = (" " * GAP).join(p[i] if i < len(p) else " " * w for p, w in zip(pieces, widths)).rstrip()
            out.append(f"[{style}]{text}[/]" if styled and style and text else text)
        return out

    out = []
    if table.title:
        out.append(_cell(table.title)[0 if styled else 1])
    if table.show_header:
        out += line(heads, table.header_style or "bold")
        out.append("─" * (sum(widths) + GAP * (len(cols) - 1)))
    for i, row in enumerate(table.rows):
        out += line([column[i] for column in cells], row.style)
    if table.caption:
        out.append(_cell(table.caption)[0 if styled else 1])
    return out
