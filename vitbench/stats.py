"""Resampling statistics for speed comparisons: a two-level bootstrap of the median, numpy only.

Why a bootstrap confidence interval on the ratio of medians (and not a Mann-Whitney U test):
- The decision `vitbench compare` needs is "is current slower than baseline by MORE than the threshold?".
  A CI on the ratio answers that directly, in the threshold's own units. A rank test answers "are the two
  samples different at all?": with hundreds of steps it calls a 0.5 % shift significant, and combined with a
  point-estimate threshold it flags a true 3 % slowdown that happened to measure 5.5 %.
- Steps of one run are not independent draws (the run shares one machine state); repeats are. Resampling
  repeats first, then steps inside each repeat (cluster bootstrap, Davison & Hinkley 1997, "Bootstrap Methods
  and their Application", sec. 3.8) lets run-to-run drift widen the interval, which a per-step test ignores.
- The median is robust to the occasional slow step (GC, a noisy neighbour) that would drag a mean.

Also the compute-optimal envelope (`frontier_mask`) that the scaling fits and the report's figures share.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

# Bootstrap replicates: enough for a stable 2.5 % / 97.5 % percentile interval (Efron & Tibshirani 1993,
# "An Introduction to the Bootstrap", ch. 13: >= 1000 for percentile intervals).
N_BOOT = 2000
# Largest index matrix resampled at once (elements), to bound memory for runs with many thousand steps.
_CHUNK_ELEMENTS = 4_000_000
# Draws whose medians boot_medians counts in one pass: some 1 MB of each working array, which stays in a core's
# cache (the whole 4,000,000 made compare of 10,000 trials 3x slower, measured with cProfile, issue 51).
_BATCH_ELEMENTS = 1 << 17


def boot_medians(x: Sequence[float], n_boot: int = N_BOOT, rng: np.random.Generator | None = None
                 ) -> tuple[float, np.ndarray]:
    """Median of the 1-D sample `x` and `n_boot` medians of resamples of it (with replacement, same size).

    Non-finite values are dropped; a single value gives `n_boot` copies of itself (no spread to resample).
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    a = np.asarray(x, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        raise ValueError("no finite samples")
    n = a.size
    if n == 1:
        return float(a[0]), np.full(n_boot, a[0])
    out = np.empty(n_boot)
    rows = max(1, _CHUNK_ELEMENTS // n)
    order = np.argsort(a, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)  # a[i] is the rank[i]-th smallest
    ordered = a[order]
    for start in range(0, n_boot, rows):  # the draws as before: the same replicates for the same rng
        stop = min(n_boot, start + rows)
        out[start:stop] = _middle(ordered, *_median_ranks(rank[rng.integers(0, n, size=(stop - start, n))]), n)
    return float(np.median(a)), out


def _median_ranks(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `ranks` (n draws, each the rank of the value it draws in its sorted sample), the ranks of the
    row's lower and upper middle draws (the same for odd n): np.median of the values drawn is the value of that
    rank, or the mean (x + y) / 2 of the two, bit for bit as np.median gives it (only a zero's sign may differ,
    where -0.0 and 0.0 tie). By counting: the k-th smallest draw of a row is rank j for the first j whose running
    count of the row's draws exceeds k. Linear in the draws, a few passes over them, without np.median's
    partition of every short row (issue 51: 0.9 ms a trial in `vitbench compare`)."""
    m, n = ranks.shape
    key = ranks * np.int64(m)
    key += _rows(m, n)  # (written out, not broadcast: numpy's loops over rows of n are several times slower)
    below = np.bincount(key.ravel(), minlength=n * m).reshape(n, m)
    for j in range(1, n):  # below[j, r]: draws of row r of rank <= j (np.cumsum along axis 0 is 5x slower)
        below[j] += below[j - 1]
    return _rank_of(below, (n - 1) // 2), (_rank_of(below, n // 2) if n % 2 == 0 else None)


def _rows(m: int, n: int) -> np.ndarray:
    """Each element's row number, in an m x n array (kept when it is a batch's: some 1 MB)."""
    return _batch_rows(m, n) if m * n <= _BATCH_ELEMENTS else np.repeat(np.arange(m), n).reshape(m, n)


@functools.lru_cache(maxsize=8)
def _batch_rows(m: int, n: int) -> np.ndarray:
    return np.repeat(np.arange(m), n).reshape(m, n)


def _rank_of(below: np.ndarray, k: int) -> np.ndarray:
    """Per column r, the first j with below[j, r] > k: how many j have below[j, r] <= k (below rises along j)."""
    out = (below[0] <= k).astype(np.int64)
    for row in below[1:]:
        out += row <= k
    return out


def _middle(values: np.ndarray, lo, hi, n: int) -> np.ndarray:
    """np.median's middle of sorted values: values[lo], or (values[lo] + values[hi]) / 2 for even n."""
    return values[lo] if n % 2 else (values[lo] + values[hi]) / 2


def combine_repeats(points: Sequence[float], replicates: Sequence[np.ndarray],
                    rng: np.random.Generator | None = None) -> tuple[float, np.ndarray]:
    """Mean over repeats of a per-repeat statistic, with replicates that also resample the repeats.

    `points[i]` / `replicates[i]` are repeat i's estimate and its bootstrap replicates (from `boot_medians`,
    possibly rescaled). Each output replicate draws the repeats with replacement and averages their replicate
    of the same index: the two-level (cluster) bootstrap. One repeat: returned unchanged.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    if not points:
        raise ValueError("no repeats")
    reps = np.stack([np.asarray(r, dtype=float) for r in replicates])  # (repeats, n_boot)
    point = float(np.mean(points))
    if len(points) == 1:
        return point, reps[0]
    return point, picked(reps, repeat_picks(len(points), reps.shape[1], rng))


def repeat_picks(repeats: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """The repeats each of `n_boot` replicates of combine_repeats draws (with replacement)."""
    return rng.integers(0, repeats, size=(n_boot, repeats))


def picked(reps: np.ndarray, pick: np.ndarray) -> np.ndarray:
    """Replicate i: the mean of the picked repeats' replicate i (reps: repeats x n_boot)."""
    return reps[pick, np.arange(reps.shape[1])[:, None]].mean(axis=1)


# Samples of 2 to EXACT_MAX values (a run's timed steps) have their resamples' medians drawn from the median's
# exact bootstrap distribution (median_table), one uniform number per replicate; larger ones resample values as
# boot_medians does. The table of n values takes O(n**2) integer sums, under a second at 128 (measured, issue 51).
EXACT_MAX = 128


@functools.lru_cache(maxsize=64)
def median_table(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact bootstrap distribution of the median of n values: (cdf, lo, hi), where a resample (n draws with
    replacement) has np.median at the sorted positions lo[i] and hi[i] (the mean of the two; lo == hi for odd n)
    with probability cdf[i] - cdf[i - 1]. Counted over the n**n equally likely resamples in integers: with
    N_a the draws at positions <= a (binomial), the lower middle draw (index k = (n - 1) // 2) is at <= a when
    N_a >= k + 1; for even n both middle draws are at <= a when N_a >= k + 2, and the lower at <= a with the
    upper at <= b > a when, besides, N_a = k + 1 with one of the other n - k - 1 draws in (a, b]. Each pair's count
    is the difference of those cumulative counts; cdf is each running sum over n**n as the nearest float (a pair
    less likely than 2**-53 may never be drawn: a bias below 1e-16)."""
    if not 2 <= n <= EXACT_MAX:
        raise ValueError(f"median_table: n must be in [2, {EXACT_MAX}], got {n}")
    k = (n - 1) // 2
    comb = [math.comb(n, i) for i in range(n + 1)]

    def at_least(a: int, t: int) -> int:  # resamples with at least t draws at positions <= a
        p, q = a + 1, n - a - 1
        return sum(comb[i] * p**i * q ** (n - i) for i in range(t, n + 1))

    if n % 2:
        below = [at_least(a, k + 1) for a in range(n)]
        pairs = [(a, a, below[a] - (below[a - 1] if a else 0)) for a in range(n)]
    else:
        r = n - k - 1  # the draws beyond the k + 1 at positions <= a
        both = [at_least(a, k + 2) for a in range(n)]
        lower = [comb[k + 1] * (a + 1) ** (k + 1) for a in range(n)]
        rest = [x**r for x in range(n + 1)]

        def cum(a: int, b: int) -> int:  # resamples with the lower middle draw at <= a and the upper at <= b
            if a < 0 or b < 0:
                return 0
            if a >= b:
                return both[b]
            return both[a] + lower[a] * (rest[n - a - 1] - rest[n - b - 1])

        pairs = [(a, b, cum(a, b) - cum(a - 1, b) - cum(a, b - 1) + cum(a - 1, b - 1))
                 for a in range(n) for b in range(a, n)]
    pairs = [p for p in pairs if p[2]]
    total, running, cdf = n**n, 0, []
    for _, _, c in pairs:
        running += c
        cdf.append(running / total)
    if running != total:
        raise AssertionError(f"median_table({n}): the counts sum to {running}, not {n}**{n}")
    lo, hi = (np.array(col, dtype=np.int64) for col in list(zip(*pairs))[:2])
    return np.array(cdf), lo, hi


_GRID = 1 << 12  # cells of [0, 1) in _searchsorted_grid: a power of two, so u * _GRID is exact


@functools.lru_cache(maxsize=64)
def _grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cell [c, c + 1) / _GRID of [0, 1): the bin of median_table(n)'s cdf of the cell's first and last value."""
    cdf = median_table(n)[0]
    edges = np.arange(_GRID + 1) / _GRID
    return np.searchsorted(cdf, edges[:-1], side="right"), np.searchsorted(cdf, edges[1:], side="left")


def _searchsorted_grid(n: int, u: np.ndarray) -> np.ndarray:
    """np.searchsorted(median_table(n)[0], u, side="right"), the same bins: a cell's bin looked up where the
    whole cell falls in one, searched for the few u in a cell holding a step of the cdf (2.5x faster, issue 51)."""
    first, last = _grid(n)
    cell = (u * _GRID).astype(np.intp)
    pick = first[cell]
    odd = np.flatnonzero(pick != last[cell])
    flat = pick.reshape(-1)
    flat[odd] = np.searchsorted(median_table(n)[0], u.reshape(-1)[odd], side="right")
    return pick


class MedianBatch:
    """boot_medians over many samples, computed together (issue 51: `vitbench compare` of 10,000 trials). `draw`
    draws from `rng` at once: for a sample of 2 to EXACT_MAX values, n_boot uniform numbers, each of which
    `run` maps through median_table to the sorted positions of one resample's median (the bootstrap of the median
    in law, without drawing the n values of every resample: 10,000 trials' draws and counting took 3.4 s of
    compare's CPU, issue 51); for one value or more than EXACT_MAX, boot_medians' replicates. `result` hands them
    out. The draws are made in the order of the `draw` calls (a seed gives the same replicates however many
    samples one batch holds)."""

    def __init__(self, rng: np.random.Generator, n_boot: int = N_BOOT):
        self.rng, self.n_boot = rng, n_boot
        self._out: list[tuple[float, np.ndarray] | None] = []
        self._todo: dict[int, list[tuple[int, np.ndarray, np.ndarray]]] = {}  # n -> (handle, sorted, uniforms)

    def draw(self, x: Sequence[float]) -> int:
        a = np.asarray(x, dtype=float)
        a = a[np.isfinite(a)]
        n = a.size
        if n <= 1 or n > EXACT_MAX:
            self._out.append(boot_medians(a, self.n_boot, self.rng))
            return len(self._out) - 1
        self._out.append(None)
        self._todo.setdefault(n, []).append((len(self._out) - 1, np.sort(a), self.rng.random(self.n_boot)))
        return len(self._out) - 1

    def run(self) -> None:
        for n, todo in self._todo.items():
            cdf, lo, hi = median_table(n)
            ordered = np.stack([o for _, o, _ in todo])  # samples x n, each sorted
            values = _middle(ordered.T, lo, hi, n).T  # samples x pairs: each pair's median of each sample
            pick = _searchsorted_grid(n, np.stack([u for _, _, u in todo]))  # samples x n_boot
            pick += (np.arange(len(todo)) * len(cdf))[:, None]
            meds = values.ravel()[pick]
            for (h, o, _), m in zip(todo, meds):
                self._out[h] = (float(_middle(o, (n - 1) // 2, n // 2, n)), m)  # np.median(o)
        self._todo.clear()

    def result(self, handle: int) -> tuple[float, np.ndarray]:
        """(median, replicates) of the sample `draw` returned `handle` for."""
        out = self._out[handle]
        if out is None:
            raise RuntimeError("MedianBatch.result before run")
        return out


def percentile_interval(replicates: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided percentile interval (Efron & Tibshirani 1993, eq. 13.5) of bootstrap replicates."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(replicates, [alpha, 1 - alpha])
    return float(lo), float(hi)


def percentile_intervals(replicates: np.ndarray, confidence: float = 0.95) -> list[tuple[float, float]]:
    """percentile_interval of each row of `replicates` (rows x n_boot), in one call: the same numbers."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not len(replicates):
        return []
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(replicates, [alpha, 1 - alpha], axis=1)
    return [(float(a), float(b)) for a, b in zip(lo, hi)]

def t_quantile(p: float, df: float) -> float:
    """Student-t quantile, exact for a fractional df (Welch's): scipy.special.stdtrit, imported here (not at
    vitbench's start). The Cornish-Fisher series used before (A&S 26.7.5) was too small where two runs a side put
    Welch's df: 1.2 % at df 1.8, 5.9 % at 1.2, 10.7 % at 1.01 (0.975), so the interval was too narrow (found by a
    mutation review)."""
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


def frontier_mask(compute: np.ndarray, error: np.ndarray) -> np.ndarray:
    """Points with lower error than every point of less (or equal) compute: the compute-optimal envelope."""
    order = np.lexsort((error, compute))
    keep = np.zeros(len(compute), dtype=bool)
    best = np.inf
    for i in order:
        if error[i] < best:
            keep[i], best = True, error[i]
    return keep
