"""`vitbench report`: results store -> summary tables, plots (PNG + SVG), Markdown, HTML, CSV, Parquet.

    build_report("results/smoke", out="results/smoke/report", formats=("md", "html", "csv", "parquet"))

Files written in `out` (default: <results>/report/):
    report.md, report.html (self-contained: plots inlined)          formats md, html
    trials.csv / trials.parquet (every trial, tidy; raw timings as JSON text) and one file per non-empty
    summary table (status, one per report section, failures)        formats csv, parquet
    <figure>.png and <figure>.svg for each figure that has data
    .vitbench-report.json: what the report wrote, with hashes: the only files a later report overwrites or
    removes (vitbench.outdir: a folder holding files of anyone else's is refused unless allowed)

The sections (a summary table and its figures per record kind) are registered by the report itself
(vitbench.report.views; plug-ins add theirs through vitbench.report.parts): the report iterates them and names no
task. Status and failures are its own.
"""
from vitbench.report.build import (BUDGET, FAILURES, FORMATS, SHARED, STATUS, Report, build_report, figure,
                                   parse_formats)

__all__ = ["BUDGET", "FAILURES", "FORMATS", "Report", "SHARED", "STATUS", "build_report", "figure",
           "parse_formats"]
