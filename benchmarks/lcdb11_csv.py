"""LCDB 1.1's sample-wise learning curves (validation error rate vs training-set size) as a csv that
`bench_fit.py csv` reads, held out from every fitting choice (docs/scaling-laws-evidence.md, "Judged on a second
set no choice saw").

    python benchmarks/lcdb11_csv.py lcdb11 > lcdb11.csv
    python benchmarks/bench_fit.py csv lcdb11.csv --compute n_train --error error --group curve ...

Source: Yan, Mohr and Viering, "LCDB 1.1: A Database Illustrating Learning Curves Are More
Ill-Behaved Than Previously Thought" (NeurIPS 2025, arXiv:2505.15657; CC BY 4.0), the per-dataset arrays its
interactive explorer serves: repository learning-curve-research/LCDB-1.1, folder docs/data, snapshot commit
37c3d9a381f8ec55902c485637a7508ba0f95667 (docs/data last changed in 3ecfde3c781581d84f82d8177a7caee76ae2c8b3).
Getting the files (not in this repository):

    git clone https://github.com/learning-curve-research/LCDB-1.1 && G=LCDB-1.1
    C=37c3d9a381f8ec55902c485637a7508ba0f95667
    mkdir -p lcdb11/er
    git -C $G show $C:docs/data/meta.json > lcdb11/meta.json
    for f in $(git -C $G ls-tree --name-only $C docs/data/er/); do
        git -C $G show $C:$f > lcdb11/er/$(basename $f); done

meta.json names the 28 learners, the 265 OpenML dataset ids and the 137 anchors (training-set sizes 16 * 2^(k/8),
rounded up, k = 0..136); er/<dataset id>.json holds, per learner, [stat][anchor][split] with stat 0 the mean over
LCDB's outer x inner splits of the error rate and 1 its standard error, split 0/1/2 train/validation/test, null
where the anchor exceeds the dataset or the run failed. The explorer does not say which feature-scaling variant
it serves. Parsed with json only (never unpickled).

Rows: one per (curve, anchor): `curve` ("<dataset id>:<learner>"), `dataset`, `learner`, `n_train` (anchor) and
`error` (mean validation error rate, the split the authors recommend; lower is better). Rules, in this order:
  1. DummyClassifier's curves are left out (a constant predictor: no learning curve by construction).
  2. Every 2nd anchor is kept (k even: spacing 2^(1/4), at most 69 points), points with a null mean dropped.
  3. A curve is kept when it has >= 10 points, spans >= 1.5 decades of n_train and every error is > 0.
  4. Of the kept curves, sorted by (dataset id, learner's index in meta.json), every k-th from the first,
     k = ceil(count / 300), so that at most 300 remain.
Counts after each rule go to stderr. Output sorted by (dataset id, learner index, n_train).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

LEFT_OUT = {"DummyClassifier"}  # rule 1
ANCHOR_STEP = 2  # rule 2: every 2nd of the 16 * 2^(k/8) anchors
VALIDATION = 1  # meta.json tvt_labels: train, val, test
MEAN = 0  # meta.json stat_labels: mean, stderr
MIN_POINTS, MIN_DECADES = 10, 1.5  # rule 3
MAX_CURVES = 300  # rule 4


def eligible(folder: Path) -> list[tuple[int, int, str, np.ndarray, np.ndarray]]:
    meta = json.loads((folder / "meta.json").read_text())
    anchors = np.asarray(meta["anchors"], dtype=float)
    found = left_out = short = 0
    kept = []
    for dataset in sorted(int(d) for d in meta["dataset_ids"]):
        arrays = json.loads((folder / "er" / f"{dataset}.json").read_text())
        for index, learner in enumerate(meta["learners"]):
            found += 1
            if learner in LEFT_OUT:
                left_out += 1
                continue
            means = arrays[index][MEAN]
            pts = [(anchors[a], means[a][VALIDATION]) for a in range(0, len(anchors), ANCHOR_STEP)
                   if means[a] is not None and means[a][VALIDATION] is not None]
            x = np.array([p[0] for p in pts])
            y = np.array([p[1] for p in pts], dtype=float)
            if (len(x) < MIN_POINTS or np.log10(x.max() / x.min()) < MIN_DECADES
                    or not np.all(np.isfinite(y)) or np.any(y <= 0)):
                short += 1
                continue
            kept.append((dataset, index, learner, x, y))
    print(f"lcdb11: {found} curves, {left_out} left out (rule 1), {short} dropped (rule 3), "
          f"{len(kept)} eligible", file=sys.stderr)
    return kept


def curves(folder: Path) -> pd.DataFrame:
    kept = eligible(folder)
    step = max(1, math.ceil(len(kept) / MAX_CURVES))
    chosen = kept[::step]
    print(f"lcdb11: every {step}-th eligible curve -> {len(chosen)} curves, "
          f"{sum(len(c[3]) for c in chosen)} points", file=sys.stderr)
    parts = [pd.DataFrame({"curve": f"{dataset}:{learner}", "dataset": dataset, "learner": learner,
                           "n_train": x.astype(int), "error": y})
             for dataset, _, learner, x, y in chosen]
    return pd.concat(parts, ignore_index=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="folder holding LCDB 1.1's docs/data meta.json and er/*.json")
    curves(ap.parse_args().folder).to_csv(sys.stdout, index=False)
