"""compare at scale (issue 51): labels and why_unmatched give what the direct, quadratic definitions give (written
out here as they were before), on random trial sets with few and with many varying fields; the bootstrap's
counting medians give np.median's, bit for bit; compare's batch draws each replicate's median from its exact
distribution."""

from __future__ import annotations

import itertools
import json
import random
from collections import defaultdict

import numpy as np
import pytest

from vitbench import stats
from vitbench.compare.match import LABEL_FIELDS, MAX_SUBSETS, Trial, labels, why_unmatched


def labels_direct(configs):
    """The definition: a field joins a task's labels when its JSON text differs between two configs of the task."""
    by_task = defaultdict(list)
    for c in configs:
        by_task[str(c.get("task"))].append(c)
    varying_in = {task: sorted({k for c in grp for k in c if k not in LABEL_FIELDS
                                and len({json.dumps(d.get(k), sort_keys=True, default=str) for d in grp}) > 1})
                  for task, grp in by_task.items()}
    out = []
    for c in configs:
        parts = [{"batch_size": f"bs{v}", "resolution": f"{v}px", "compile": "compile"}.get(k, str(v))
                 for k in LABEL_FIELDS if (v := c.get(k)) is not None and v is not False]
        varying = varying_in[str(c.get("task"))]
        out.append(" ".join(parts + [f"{k}={c[k]}" for k in varying if c.get(k) is not None]))
    return out


def closest_direct(t, other):
    """The definition: the first trial of `other` with the fewest differing fields (kind and config)."""
    def diff(o):
        d = [k for k in sorted({*t.config, *o.config}) if t.config.get(k) != o.config.get(k)]
        return (["kind"] if o.kind != t.kind else []) + d

    return min(other.values(), key=lambda o: len(diff(o)))


def why_direct(t, other):
    o = closest_direct(t, other)
    fields = [k for k in sorted({*t.config, *o.config}) if t.config.get(k) != o.config.get(k)]
    fields = (["kind"] if o.kind != t.kind else []) + fields
    if not fields:
        return f"method_version {t.method_version} vs {o.method_version}"
    if len(fields) > 3 or {"kind", "model", "task", "backend"} & set(fields):
        return "no trial with this configuration on the other side"
    shown = ", ".join(f"{k} ({t.config.get(k)!r} vs {o.config.get(k)!r})" for k in fields if k != "kind")
    return f"the closest trial differs in {shown}"


# Values that JSON and Python equality tell apart differently: 1, 1.0 and True are equal in Python and not in JSON
VALUES = [None, 0, 1, 1.0, True, False, "1", "a", [1, 2], [1, 2.0], {"x": 1}, {"x": [1]}, 0.5]


def random_trials(rng: random.Random, n: int, fields: list[str], p_missing: float = 0.2) -> dict[str, Trial]:
    out = {}
    for i in range(n):
        cfg = {"task": rng.choice(["infer", "train"]), "model": rng.choice(["A", "B"])}
        for f in fields:
            if rng.random() > p_missing:
                cfg[f] = rng.choice(VALUES)
        out[f"t{i}"] = Trial(rng.choice(["bench", "bench", "other"]), rng.choice([1, 2]), cfg)
    return out


@pytest.mark.parametrize("n_fields", [3, 12])  # 12 varying fields: C(12, 2) > MAX_SUBSETS, the scan
def test_labels_and_why_unmatched_match_the_direct_definitions(n_fields):
    assert n_fields * (n_fields - 1) // 2 > MAX_SUBSETS or n_fields == 3
    rng = random.Random(n_fields)
    fields = [f"f{i}" for i in range(n_fields)]
    for _ in range(30):
        side = random_trials(rng, rng.randint(1, 25), fields)
        other = random_trials(rng, rng.randint(1, 25), fields[: rng.randint(1, n_fields)])
        configs = [t.config for t in side.values()]
        assert labels(configs) == labels_direct(configs)
        for t in side.values():
            assert why_unmatched(t, other).startswith(why_direct(t, other))


def test_why_unmatched_names_the_one_differing_field_among_many_trials():
    """A grid of 400 trials against the same grid at another thread count: each finds its twin."""
    grid = {f"{m}{b}": Trial("bench", 1, {"model": m, "task": "infer", "batch_size": b, "threads": 1})
            for m in ("A", "B") for b in range(200)}
    other = {k: Trial("bench", 1, {**t.config, "threads": 2}) for k, t in grid.items()}
    assert why_unmatched(grid["A7"], other) == ("the closest trial differs in threads (1 vs 2); --ignore threads "
                                                "would match them")
    moved = {k: Trial("bench", 2, dict(t.config)) for k, t in grid.items()}
    assert why_unmatched(grid["B3"], moved).startswith("method_version 1 vs 2")


def boot_medians_direct(x, n_boot, rng):
    """The definition (boot_medians as it was): np.median of each resample, drawn in chunks of rows."""
    a = np.asarray(x, dtype=float)
    a = a[np.isfinite(a)]
    n = a.size
    out = np.empty(n_boot)
    rows = max(1, stats._CHUNK_ELEMENTS // n)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        out[start:stop] = np.median(a[rng.integers(0, n, size=(stop - start, n))], axis=1)
    return float(np.median(a)), out


@pytest.mark.parametrize("n", [2, 3, 5, 6, 7, 40, 41, 2500])  # 2500: more than one chunk of rows
def test_boot_medians_are_the_direct_definitions_bit_for_bit(n):
    """The counting medians (issue 51) give np.median's replicates exactly, from the same draws: a comparison's
    decisions for a fixed seed are unchanged. Samples with ties, zeros and a non-finite value; with a -0.0 beside
    0.0 (no time or speed is one) the same values, a zero's sign aside (np.median's partition picks either)."""
    gen = np.random.default_rng(n)
    for trial in range(5):
        x = gen.lognormal(0, 0.3, n)
        if trial % 2:
            x = np.round(x, 1)  # ties
        if trial >= 3:
            x[: n // 2 + 1] = 0.0
            x[-1] = np.nan
        if trial == 4:
            x[0] = -0.0
        got = stats.boot_medians(x, 2000, np.random.default_rng(trial))
        want = boot_medians_direct(x, 2000, np.random.default_rng(trial))
        assert got[0] == want[0]
        if trial == 4:
            assert np.array_equal(got[1], want[1])
        else:
            assert got[1].tobytes() == want[1].tobytes()  # bit for bit


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_median_table_is_the_count_over_every_resample(n):
    """stats.median_table(n), the bootstrap distribution of the median MedianBatch draws from (issue 51), is the
    count over all n**n resamples of the sorted positions np.median takes: the same pairs in the same order, and
    each cdf value == its running count / n**n (both sides divide the same two integers, one correct rounding)."""
    counts = defaultdict(int)
    for draw in itertools.product(range(n), repeat=n):
        s = sorted(draw)
        counts[(s[(n - 1) // 2], s[n // 2])] += 1
    pairs = sorted(counts)
    running = list(itertools.accumulate(counts[p] for p in pairs))
    cdf, lo, hi = stats.median_table(n)
    assert list(zip(lo.tolist(), hi.tolist())) == pairs
    assert cdf.tolist() == [c / n**n for c in running]
    with pytest.raises(ValueError):
        stats.median_table(stats.EXACT_MAX + 1)


def test_the_grid_lookup_finds_searchsorteds_bins():
    """_searchsorted_grid gives np.searchsorted's bin for uniforms anywhere, on a cdf step and just below one."""
    gen = np.random.default_rng(5)
    for n in (2, 5, 6, 7, 40, stats.EXACT_MAX):
        cdf = stats.median_table(n)[0]
        steps = cdf[cdf < 1]
        u = np.concatenate([gen.random(20_000), [0.0, np.nextafter(1.0, 0.0)], steps, np.nextafter(steps, 0.0)])
        assert np.array_equal(stats._searchsorted_grid(n, u[None, :]), np.searchsorted(cdf, u[None, :], "right"))


def test_a_median_batch_draws_each_replicate_from_the_exact_table():
    """stats.MedianBatch (compare's bootstrap, BLOCK trials at a time): samples of several sizes interleaved (ties,
    a non-finite value, one value, more than EXACT_MAX), the repeats' picks drawn between them. A sample of 2 to
    EXACT_MAX values: per replicate one uniform from the rng, its median_table pair's median of the sorted sample,
    bit for bit; the others boot_medians' replicates; the rng's state after them that of the calls in order."""
    gen = np.random.default_rng(1)
    samples = [gen.lognormal(0, 0.2, n) for n in (5, 7, 5, 1, 6, 2500, 7, 2, stats.EXACT_MAX, stats.EXACT_MAX + 1)]
    samples[2] = np.round(samples[2], 1)  # ties
    samples[4][0] = np.nan
    one, batch = np.random.default_rng(9), stats.MedianBatch(np.random.default_rng(9), 2000)
    want, handles = [], []
    for i, x in enumerate(samples):
        a = np.sort(x[np.isfinite(x)])
        if 2 <= a.size <= stats.EXACT_MAX:
            cdf, lo, hi = stats.median_table(a.size)
            pick = np.searchsorted(cdf, one.random(2000), side="right")
            want.append((float(np.median(a)), np.median(np.stack([a[lo[pick]], a[hi[pick]]]), axis=0)))
        else:
            want.append(stats.boot_medians(x, 2000, one))
        handles.append(batch.draw(x))
        if i == 2:  # combine_repeats' draw between two samples
            assert stats.repeat_picks(3, 2000, one).tobytes() == stats.repeat_picks(3, 2000, batch.rng).tobytes()
    batch.run()
    for h, (point, reps) in zip(handles, want):
        got = batch.result(h)
        assert got[0] == point and got[1].tobytes() == reps.tobytes()
    assert one.integers(0, 2**62) == batch.rng.integers(0, 2**62)


def test_compare_rows_do_not_depend_on_how_many_trials_are_batched(monkeypatch):
    """compare_trials in blocks of BLOCK trials gives, bit for bit, the rows of one trial at a time (BLOCK = 1):
    one run a side, several (the repeats' picks drawn between the samples), a failed side, samples of 1-3 steps."""
    from records import record

    from vitbench.compare import decide
    from vitbench.compare.comparison import metrics
    from vitbench.compare.match import DEFAULT_IGNORE, group

    gen = np.random.default_rng(2)

    def recs(run, trials=40):
        out = []
        for i in range(trials):
            cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "infer", "batch_size": i + 1}
            steps = (gen.lognormal(0, 0.2, 1 + i % 3) if i % 5 == 0 else gen.lognormal(0, 0.2, 5 + i % 4)) / 100
            failed = (i % 7 == 3 and run <= 1) or (i % 11 == 4 and run == 3)
            out.append(record("bench", cfg, status="error" if failed else "ok",
                              error={"type": "E", "message": "x"} if failed else None,
                              metrics=None if failed else {"img_per_s": float(8 / np.median(steps))},
                              raw=None if failed else {"step_s": steps.tolist()}, key=f"k{i}-{run}",
                              run_id=f"run{run}", repeat=run, trial=cfg,
                              started_at=f"2026-01-0{run + 1}T00:00:00"))
        return out

    base = group(recs(0) + recs(1), DEFAULT_IGNORE)
    cur = group(recs(2) + [r for r in recs(3) if r.trial["batch_size"] % 2], DEFAULT_IGNORE)
    pairs = [(k, base[k], cur[k]) for k in base if k in cur]

    def rows(block):
        monkeypatch.setattr(decide, "BLOCK", block)
        got = decide.compare_trials(pairs, [metrics()["img_per_s"]], 0.05, 0.95, None, 2000,
                                    np.random.default_rng(4))
        return [[(r.decision, repr(r.ratio), repr(r.ci_low), repr(r.ci_high), r.method, r.note) for r in t]
                for t in got]

    batched = rows(decide.BLOCK)
    assert batched == rows(1) == rows(7)
    methods = {r[4].split(":")[0] for t in batched for r in t}
    assert {"runs", "one run on a side", "status"} <= methods, methods


def test_compare_pauses_the_cyclic_garbage_collector_and_restores_it():
    """compare_paths reads and compares with gc paused (issue 51: its collections walked every parsed row): inside
    it is off, after it is as it was (on, or off when the caller had turned it off), an error included."""
    import gc

    from vitbench.compare.comparison import _cyclic_gc_paused

    assert gc.isenabled()
    try:
        with pytest.raises(KeyError), _cyclic_gc_paused():
            assert not gc.isenabled()
            raise KeyError("x")
        assert gc.isenabled()
        gc.disable()
        with _cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
