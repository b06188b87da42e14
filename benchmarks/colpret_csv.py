"""ColPret's pre-training loss curves as a csv that `bench_fit.py csv` reads (docs/scaling-laws-evidence.md,
"Judged on real curves no choice saw").

    python benchmarks/colpret_csv.py colpret.npz > colpret.csv
    python benchmarks/bench_fit.py csv colpret.csv --compute tokens --error loss --group model --split context \
        --bootstrap 200

colpret.npz: the collection of 192 language-model pre-training curves (Choshen et al. 2024, "A Hitchhiker's Guide
to Scaling Law Estimation") as NSL-PFN released it (DongWooLee-Eli/nslpfn, data/colpret.npz; not in this
repository): one array per model, row 0 the tokens seen, row 1 the loss. `context` is 1 on the points NSL-PFN fits
and 0 on those it judges, by its own rule (data/get_test_data.py, get_colpret_data: the first
max(3, min(round(len / 2), len - 1)) points).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd


def context_points(n: int) -> int:
    """NSL-PFN's number of fitted points of an n-point curve (int(0.5 * n + 0.5), at least 3, at most n - 1)."""
    return max(3, min(int(0.5 * n + 0.5), n - 1))


def curves(path: str) -> pd.DataFrame:
    with np.load(path, allow_pickle=False) as npz:  # arrays of numbers only: never unpickle a downloaded file
        parts = []
        for model in sorted(npz.files):
            tokens, loss = npz[model]
            fitted = np.arange(len(tokens)) < context_points(len(tokens))
            parts.append(pd.DataFrame({"model": model, "tokens": tokens, "loss": loss, "context": fitted.astype(int)}))
    return pd.concat(parts, ignore_index=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("npz", help="NSL-PFN's data/colpret.npz")
    curves(ap.parse_args().npz).to_csv(sys.stdout, index=False)
