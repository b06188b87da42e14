"""A DataFrame built from many flat rows (dicts) without holding them all: `Columns` gathers each row's values
into a list per column as it comes, and makes the frame `pd.DataFrame(rows)` would make of the rows (the same
columns in the same order, the same dtypes), from pandas' own conversion of an object column
(`convert_object_array`, what the list-of-dicts constructor calls: pandas 3.1). Used by vitbench.tidy.load,
which reads a results file one line at a time.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pandas as pd
from pandas.core.internals.construction import convert_object_array

_NANS = array("d", [np.nan])  # a missing cell of a float column


class Columns:
    """Flat rows gathered as columns: a list of values per column (np.nan where a row lacks the column, as
    pandas fills a list of dicts) or, while a column holds only floats, an array of doubles; equal strings held
    once; each row's column names as one shared tuple."""

    def __init__(self):
        self.columns: dict[str, list] = {}
        self.shapes: dict[tuple, tuple] = {}
        self.row_names: list[tuple] = []
        self.strings: dict[str, str] = {}
        self.n = 0
        self.integer_columns: list[str] = []

    def add(self, row: dict[str, Any]) -> None:
        n, strings = self.n, self.strings
        for k, v in row.items():
            col = self.columns.get(k)
            if col is None:  # a column of floats only is kept as machine floats (8 bytes, not a 32-byte object)
                col = self.columns[k] = _NANS * n if type(v) is float else [np.nan] * n
            elif len(col) < n:
                col.extend(_NANS * (n - len(col)) if type(col) is array else [np.nan] * (n - len(col)))
            if type(col) is array:
                if type(v) is float:
                    col.append(v)
                    continue
                col = self.columns[k] = [np.nan if x != x else x for x in col]  # a value of another type
            col.append(strings.setdefault(v, v) if type(v) is str else v)
        names = tuple(row)
        self.row_names.append(self.shapes.setdefault(names, names))
        self.n += 1

    def frame(self, rows: list[int] | None):
        """The DataFrame of `rows` (None: all), as pd.DataFrame(list of those rows' dicts) builds it: columns in
        order of first appearance, each column's dtype inferred by pandas' own conversion of an object column."""
        names = self.row_names if rows is None else [self.row_names[i] for i in rows]
        order, seen = [], set()
        for shape in dict.fromkeys(names):  # each distinct tuple once, in order of first appearance
            order += [k for k in shape if k not in seen]
            seen.update(shape)
        m = self.n if rows is None else len(rows)
        arrays, self.integer_columns = [], []
        for k in order:  # one column at a time, each list freed once converted
            col = self.columns.pop(k)
            if type(col) is array:  # floats and gaps: what pandas makes of them, float64
                col.extend(_NANS * (self.n - len(col)))
                values = np.frombuffer(col, dtype=np.float64)
                arrays.append(values.copy() if rows is None else values[rows])
                del values, col
                continue
            col.extend([np.nan] * (self.n - len(col)))
            # fromiter: each value one cell (a list value is not spread over cells, as slice assignment would)
            cells = np.fromiter(col if rows is None else (col[i] for i in rows), dtype=object, count=m)
            del col
            arrays.append(convert_object_array([cells], dtype=None)[0])
            # integers with gaps convert to float64 (or object past int64): only those columns are looked at
            if arrays[-1].dtype in (np.float64, object) and _integers_with_gaps(cells):
                self.integer_columns.append(k)
        return pd.DataFrame(dict(zip(order, arrays)), columns=order, copy=False)


def _integers_with_gaps(arr) -> bool:
    """All values present are integers (bools are not), at least one is, and some row lacks one (missing or
    None)."""
    gaps = ints = False
    for v in arr:
        if v is None or v is np.nan:
            gaps = True
        elif type(v) is int:
            ints = True
        else:
            return False
    return gaps and ints
