"""Regression decision between two result sets: match trials, compare metrics, decide with the raw samples.

`compare(baseline_records, current_records)` matches trials by their measured configuration (the runner's
normalised trial config, or the record's config), never by environment, and for every matched metric reports
baseline, current, their ratio with a bootstrap confidence interval, and a Decision (vitbench.compare.decide).

Metrics and their units, directions and samples are the tasks' declarations (vitbench.tasks.Metric): throughput
(img_per_s) is decided from the raw per-step times, repeats of a trial pooled with a two-level bootstrap
(vitbench.stats); metrics without per-step samples (max_batch_size, peak_mem_mib, accuracy) are bootstrapped
over repeats, or compared as single values when there is only one. `normalize=True` divides each speed metric by
the calibration (the task with the calibration role) of its own sweep run, the one measured nearest in time, so
a slower or busier machine is not called a regression; with one calibration per repeat round its noise shows up
in the interval too.

Results are read through vitbench.rows (the one reader: the same rules as `report` and `sweep`).
"""

from vitbench.compare.comparison import (EXIT_INCONCLUSIVE, Comparison, compare, compare_paths, default_metrics,
                                         env_differences, inject_slowdown, load_records, metrics)
from vitbench.compare.decide import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD, Decision, Row
from vitbench.compare.render import COLUMNS, row_cells, summary_line, to_benchmark_json, to_markdown

__all__ = ["COLUMNS", "Comparison", "DEFAULT_CONFIDENCE", "DEFAULT_THRESHOLD", "Decision", "EXIT_INCONCLUSIVE",
           "Row", "compare", "compare_paths", "default_metrics", "env_differences", "inject_slowdown",
           "load_records", "metrics", "row_cells", "summary_line", "to_benchmark_json", "to_markdown"]
