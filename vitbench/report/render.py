"""Writers: Markdown, one self-contained HTML page (plots embedded as base64 PNG), CSV and Parquet."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import pandas as pd

from vitbench.numfmt import fmt, md_cell
from vitbench.report.parts import NotDrawn


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_none_\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(md_cell(c) for c in cols) + " |",
             "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(df[c]) else "---" for c in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(md_cell(fmt(v)) for v in row) + " |")
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, title: str, meta: list[str], tables: dict[str, tuple[str, pd.DataFrame]],
                   figures: dict[str, tuple[str, Path | NotDrawn]],
                   notes: dict[str, list[str]] | None = None) -> None:
    """`tables` and `figures`: name -> (title, table / PNG path, or NotDrawn: its reason in the figure's place),
    in the order shown; `notes`: table name -> lines shown under it (a legend). Every text through md_cell."""
    notes = notes or {}
    parts = [f"# {md_cell(title)}\n", *(f"- {md_cell(m)}" for m in meta), ""]
    for name, (heading, png) in figures.items():
        parts += [f"## {md_cell(heading)}\n", f"_Not drawn: {md_cell(png.reason)}._\n" if isinstance(png, NotDrawn)
                  else f"![{name}]({Path(png).name})\n"]
    for name, (heading, df) in tables.items():
        parts += [f"## {md_cell(heading)}\n", markdown_table(df),
                  *(f"_{md_cell(n)}_\n" for n in notes.get(name, ()))]
    path.write_text("\n".join(parts))


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;max-width:1400px;color:#222}
h1{font-size:1.5rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.82rem;margin:.5rem 0}
th,td{padding:.25rem .5rem;border-bottom:1px solid #eee}
th{background:#f6f6f6;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto;border:1px solid #eee} .meta{color:#555;font-size:.85rem}
.none{color:#888;font-style:italic} .note{color:#555;font-size:.82rem;font-style:italic;max-width:1100px}
"""


def html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return '<p class="none">none</p>'
    numeric = {c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])}
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False):
        cells = "".join(f'<td class="num">{html.escape(fmt(v))}</td>' if c in numeric
                        else f"<td>{html.escape(fmt(v))}</td>" for c, v in zip(df.columns, row))
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def write_html(path: Path, title: str, meta: list[str], tables: dict[str, tuple[str, pd.DataFrame]],
               figures: dict[str, tuple[str, Path | NotDrawn]], notes: dict[str, list[str]] | None = None) -> None:
    """One file, no external resources: images are inlined as data: URIs (arguments as write_markdown's)."""
    notes = notes or {}
    body = [f"<h1>{html.escape(title)}</h1>", '<ul class="meta">',
            *(f"<li>{html.escape(m)}</li>" for m in meta), "</ul>"]
    for name, (heading, png) in figures.items():
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if isinstance(png, NotDrawn):
            body.append(f'<p class="note">Not drawn: {html.escape(png.reason)}.</p>')
        else:
            data = base64.b64encode(Path(png).read_bytes()).decode()
            body.append(f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">')
    for name, (heading, df) in tables.items():
        body += [f"<h2>{html.escape(heading)}</h2>", html_table(df),
                 *(f'<p class="note">{html.escape(n)}</p>' for n in notes.get(name, ()))]
    path.write_text(html_page(title, body))


def html_page(title: str, body: list[str], css: str = "", script: str = "") -> str:
    """A whole self-contained HTML document: the report's style (plus `css`), `body`'s lines, and `script`
    inline at the end (no external resource: it opens offline, from file://)."""
    tail = f"<script>{script}</script>\n" if script else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}{css}</style></head><body>\n" + "\n".join(body) + f"\n{tail}</body></html>\n")


def arrow_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Columns Parquet can store: dict/list cells (raw timings) as JSON text, mixed-type columns as text."""
    import pyarrow as pa

    out = df.copy()
    for c in out.columns:
        if out[c].dtype != object:
            continue
        if out[c].map(lambda v: isinstance(v, (dict, list))).any():
            out[c] = out[c].map(lambda v: None if v is None else json.dumps(v, default=str))
            continue
        try:
            pa.array(out[c], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            out[c] = out[c].map(lambda v: str(v) if pd.notna(v) else None)
    return out
