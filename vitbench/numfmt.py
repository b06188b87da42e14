"""How vitbench shows a number to a person (terminal tables, Markdown, HTML, compare's table): one rule.

Integers as integers; a float with an integral value below 10^6 as an integer (a batch size read back as 8.0);
floats from 1,000 to 10^7 rounded to a whole number, never in exponent notation (14683, not 1.468e+04, beside
9218); other floats to 4 significant digits (0.004474, 2.577e-07); missing values (None, NaN, NA) blank.
Files meant for programs (CSV, Parquet, JSON) keep full precision.
"""

from __future__ import annotations

import math
import re


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


# C0 controls but tab and LF, DEL and C1: ESC [31m colours a terminal, ESC ] 0; ... BEL retitles it
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def percent(fraction: float) -> str:
    """A fraction a person set (a gate's threshold, confidence) as a percentage, to 4 significant digits: 0.025 is
    "2.5%" and 0.9999 "99.99%" (`:.0%` showed "2%" and "100%")."""
    return f"{fraction * 100:.4g}%"


def visible(text: str) -> str:
    """`text` with its control characters (tab and newline apart) written as \\xNN escapes: what a terminal or a
    Markdown reader shows of a value vitbench did not write."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def md_cell(text) -> str:
    """`text` (a value from the rows, a column's name, an environment value) safe in Markdown, in a table cell or a
    line (report.md, compare's PR comment): CR and LF (line breaks in CommonMark: a new row, heading or link) a
    space, control characters visible as \\xNN (an ESC sequence reaches a terminal), `|` escaped, `<` as &lt; (no
    raw HTML: a <script> or <img onerror> in a model name)."""
    s = visible(str(text).replace("\r\n", " ").replace("\r", " ").replace("\n", " "))
    return s.replace("|", "\\|").replace("<", "&lt;")
