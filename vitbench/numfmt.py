"""How vitbench shows a number to a person (terminal tables, Markdown, HTML, compare's table): one rule.

Integers as integers; a float with an integral value below 10^6 as an integer (a batch size read back as 8.0);
floats from 1,000 to 10^7 rounded to a whole number, never in exponent notation (14683, not 1.468e+04, beside
9218); other floats to 4 significant digits (0.004474, 2.577e-07); missing values (None, NaN, NA) blank.
Files meant for programs (CSV, Parquet, JSON) keep full precision.
"""

from __future__ import annotations

import math


def fmt(v) -> str:
    """`v` as a person should read it (see the module docstring); booleans as yes/no, anything else as str."""
    if type(v) is str:  # most cells of a report's tables: at once (issue 51: 480,000 calls at 10,000 rows)
        return v
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if type(v).__name__ == "NAType":  # pandas.NA, without importing pandas
        return ""
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:  # numpy scalars
        v = v.item()
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == int(v) and abs(v) < 1e6:
            return str(int(v))
        if 1000 <= abs(v) < 1e7:
            return f"{v:.0f}"  # 4 significant digits would switch to exponent notation here
        return f"{v:.4g}"
    return str(v)
