"""Learning curves generated on this machine, offline: scikit-learn learners on generated classification tasks and
on load_digits, held-out error rate against training-set size, as a csv that `bench_fit.py csv` reads. A set of
real learners' curves that no choice of `vitbench fit`'s rule saw (docs/scaling-laws-evidence.md, issue 33's
seventh round); nothing is downloaded.

    python benchmarks/learner_curves.py --workers 2 > learner_curves.csv
    python benchmarks/bench_fit.py csv learner_curves.csv --compute n_train --error error --group curve ...

Tasks (TASKS): eight `make_classification` variants (informative features, class separation, label noise and
classes varied), `make_hastie_10_2`, `make_gaussian_quantiles`, `make_moons`, `make_circles`, and load_digits.
Each generated task draws TEST + max(ANCHORS) rows with its own seed, its index in TASKS + SEED_STRIDE x
`--seed` (default 0, the seventh round's set); the last TEST rows are the held-out set. Another `--seed` draws
every task's data afresh: a new set of curves no rule has seen.
load_digits: 1797 rows, shuffled with seed len(TASKS) + SEED_STRIDE x `--seed`, the first DIGITS_TEST held out,
anchors up to the rest.
Learners (LEARNERS): twelve, default settings except where the row says (n_jobs 1, one BLAS/OpenMP thread).
Anchors: 16 * 2^(k/2), k = 0..20 (16 to 16384, three decades, 21 points); SVC (kernel, O(n^2)) stops at 8192.
Each point is the mean error rate over REPEATS training subsets, drawn without replacement from the task's training
rows with seed (repeat, anchor): the same subsets for every learner.

Subsets: `--tasks` and `--learners` draw only those tasks' and learners' curves (default: every one). A curve
depends only on its task, learner and `--seed`, so a subset's curves are exactly those of the full draw (rows in
the same order within a curve): a draw too slow for a busy machine can be made a few learners at a time.
`--seed 3`, ridge, lda, gnb, qda, logreg, tree and knn (91 curves; 39 min wall, one learner at a time with 2
workers, at load 21-28 on 2 cores) judged issue 49's second interval rule once: its 95 % intervals held 96.9 % of
356 points half a decade out and 92.2 % of 574 a decade out (docs/scaling-laws-evidence.md, "The next interval
rule").
`--seed 11`, the same 7 learners (91 curves, none dropped; 6.5 min wall, one learner at a time with 1 worker, at
load 0.3-8 on 2 cores) judged the third rule once: its 95 % intervals held 98.6 % of 360 points half a decade out
and 99.1 % of 574 a decade out, above the 90-97 % asked (docs/scaling-laws-evidence.md, "The parameter error
counted once").
`--seed 19` and `--seed 23`, the same 7 learners (182 curves, none dropped; 10 min wall for both, one learner at a
time with 1 worker, at load 0.8-3.3) judged the fourth rule once, the two files concatenated with each curve
prefixed by its seed: 99.0 % of 712 points half a decade out, 96.4 % of 1148 a decade out; the third rule, which
stays, 98.7 % and 96.8 % (docs/scaling-laws-evidence.md, "The noise where predictions are made").

Rows: one per (curve, anchor): `curve` ("<task>:<learner>"), `task`, `learner`, `n_train`, `error` (the mean
held-out error rate), `error_sd` (over the repeats). A curve whose error reaches 0 at any anchor is dropped (the
laws are fitted in log error), and said on stderr with the counts. A fit that fails (e.g. QDA on fewer rows of
a class than it needs, a subset holding one class) leaves that repeat out of its point's mean, and an anchor where
every repeat failed out of the curve.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits
from sklearn import datasets as ds
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis, QuadraticDiscriminantAnalysis
from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression, RidgeClassifier
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

ANCHORS = np.round(16 * 2 ** (np.arange(21) / 2)).astype(int)  # 16 .. 16384
TEST = 5000  # held-out rows of a generated task
DIGITS_TEST = 500
REPEATS = 3
SVC_MAX = 8192
SEED_STRIDE = 1000  # --seed k draws task i's data with seed i + 1000 k

TASKS = {  # name: (generator, keyword arguments); seeds are the task's index in this table
    "cls-easy": (ds.make_classification, dict(n_features=20, n_informative=10, class_sep=1.0, flip_y=0.01)),
    "cls-hard": (ds.make_classification, dict(n_features=20, n_informative=10, class_sep=0.5, flip_y=0.01)),
    "cls-noisy": (ds.make_classification, dict(n_features=20, n_informative=10, class_sep=1.0, flip_y=0.1)),
    "cls-sparse": (ds.make_classification, dict(n_features=50, n_informative=5, class_sep=1.0, flip_y=0.02)),
    "cls-5class": (ds.make_classification, dict(n_features=20, n_informative=10, n_classes=5, class_sep=1.0,
                                                flip_y=0.02)),
    "cls-10class": (ds.make_classification, dict(n_features=30, n_informative=15, n_classes=10, class_sep=1.5,
                                                 flip_y=0.02)),
    "cls-clusters": (ds.make_classification, dict(n_features=10, n_informative=6, n_clusters_per_class=4,
                                                  class_sep=1.0, flip_y=0.02)),
    "cls-wide": (ds.make_classification, dict(n_features=100, n_informative=20, class_sep=1.0, flip_y=0.02)),
    "hastie": (ds.make_hastie_10_2, {}),
    "quantiles": (ds.make_gaussian_quantiles, dict(n_features=6, n_classes=3)),
    "moons": (ds.make_moons, dict(noise=0.35)),
    "circles": (ds.make_circles, dict(noise=0.25, factor=0.6)),
}

LEARNERS = {
    "logreg": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
    "ridge": lambda: make_pipeline(StandardScaler(), RidgeClassifier()),
    "lda": LinearDiscriminantAnalysis,
    "qda": lambda: QuadraticDiscriminantAnalysis(reg_param=0.1),
    "gnb": GaussianNB,
    "knn": lambda: make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=5)),
    "tree": lambda: DecisionTreeClassifier(random_state=0),
    "forest": lambda: RandomForestClassifier(n_estimators=50, random_state=0, n_jobs=1),
    "extra": lambda: ExtraTreesClassifier(n_estimators=50, random_state=0, n_jobs=1),
    "hgb": lambda: HistGradientBoostingClassifier(random_state=0),
    "mlp": lambda: make_pipeline(StandardScaler(), MLPClassifier((64,), max_iter=200, random_state=0)),
    "svc": lambda: make_pipeline(StandardScaler(), SVC()),
}


def task_data(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test) of a task, the same on every call."""
    if name == "digits":
        x, y = ds.load_digits(return_X_y=True)
        order = np.random.default_rng(len(TASKS) + SEED_STRIDE * seed).permutation(len(y))
        x, y = x[order], y[order]
        return x[DIGITS_TEST:], y[DIGITS_TEST:], x[:DIGITS_TEST], y[:DIGITS_TEST]
    make, kwargs = TASKS[name]
    x, y = make(n_samples=TEST + ANCHORS[-1], random_state=list(TASKS).index(name) + SEED_STRIDE * seed, **kwargs)
    return x[:-TEST], y[:-TEST], x[-TEST:], y[-TEST:]


def curve(task: str, learner: str, seed: int = 0) -> list[dict]:
    x, y, xt, yt = task_data(task, seed)
    rows = []
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence and collinearity warnings: the error rate says it
        for k, n in enumerate(ANCHORS):
            if n > len(y) or (learner == "svc" and n > SVC_MAX):
                break
            errs = []
            for r in range(REPEATS):
                pick = np.random.default_rng([r, k]).choice(len(y), n, replace=False)
                try:
                    model = LEARNERS[learner]().fit(x[pick], y[pick])
                except ValueError:  # e.g. a subset holding one class only, or too few rows for QDA
                    continue
                errs.append(float(np.mean(model.predict(xt) != yt)))
            if errs:
                rows.append(dict(curve=f"{task}:{learner}", task=task, learner=learner, n_train=int(n),
                                 error=float(np.mean(errs)), error_sd=float(np.std(errs))))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="another draw of every task's data (module docstring)")
    ap.add_argument("--tasks", nargs="*", default=[*TASKS, "digits"], choices=[*TASKS, "digits"],
                    help="only these tasks' curves (module docstring, \"Subsets\")")
    ap.add_argument("--learners", nargs="*", default=list(LEARNERS), choices=list(LEARNERS),
                    help="only these learners' curves (module docstring, \"Subsets\")")
    args = ap.parse_args(argv)
    pairs = [(t, lrn) for t in args.tasks for lrn in args.learners]
    with ProcessPoolExecutor(args.workers) as pool:
        curves = [pd.DataFrame(rows) for rows in pool.map(curve, *zip(*pairs), [args.seed] * len(pairs)) if rows]
    kept = [c for c in curves if (c["error"] > 0).all()]
    if not kept:
        raise SystemExit("learner_curves: no curve left to write (every one empty or reaching an error of 0)")
    print(f"learner_curves: {len(pairs)} curves, {len(pairs) - len(curves)} empty, "
          f"{len(curves) - len(kept)} dropped (an error of 0), {len(kept)} written", file=sys.stderr)
    pd.concat(kept).to_csv(sys.stdout, index=False, float_format="%.6g")


if __name__ == "__main__":
    main()
