"""Scaling-law fits: does the backtest choose well, does it tell the truth, how fast is it (docs/scaling-laws.md).

    python benchmarks/bench_fit.py synthetic [--curves 6] [--noise 0.02]   # choice and calibration
    python benchmarks/bench_fit.py families [--curves 20] [--seed 5000] [--noise-kind iid|correlated]
    python benchmarks/bench_fit.py speed [--curves 72] [--points N (default 10-70)] [--workers N]
    python benchmarks/bench_fit.py csv FILE --compute COL (--error COL | --accuracy COL) --group COL [--reach 1]
                                  [--min-points 12] [--min-fit-decades 1]
                                  [--where QUERY] [--split COL] [--half dev|test|all]
    (synthetic, families, csv: --weight-power P scores the combination with weights score^-P instead of
    vitbench.fit.backtest.WEIGHT_POWER, as docs/scaling-laws-evidence.md compares them)

synthetic: curves drawn from each form (TRUTH, 5 decades, log-normal noise); every form is fitted on the first 4
decades and predicts the last one, which no fit sees. Prints, per generating form, the RMSE of the log prediction
of the combined law (what predictions are made with, vitbench.fit.combine) and of each single form on that last
decade, how often the generating form was chosen, and the backtest's reported error against that real error.
families: curves with random parameters from five families (m4, m4late: the floor reached late, saturating, offset,
power), 10-70 points over 3-5 decades, 1-4 % noise (`--noise-kind correlated`: AR(1), a slow drift and a late
change of slope, bench_fit.correlated_noise); fitted on all but the last 0.5 or 1 decade, judged there:
median RMSE of the log prediction of the combined law, of the chosen form and of each single form, and how often
the 95 % prediction intervals held the held-out points (beside the coverage the backtest reported). Seeds 0-39
tuned the choice
(vitbench.fit.backtest cut-offs, RECENCY, RICHER); seeds 5000-5019 and 9000-9011 then compared two candidates;
--seed 20000 (48 curves) and 13000 (16) draw curves none of that saw. With --noise-kind correlated, seeds
30000-30019 developed the intervals' evidence count (issue 33, third round: vitbench.fit.interval) and seeds 40000
on validate it.
csv: the same on published curves (fit on all but the last `reach` decades of each group's budgets; with --split
COL on the rows whose COL is 1, judged on the others: the published benchmark's own `Training` split), e.g.
Alabdulmohsin et al. 2022's vision curves (google-research/google-research, revisiting_neural_scaling_laws/data/
benchmark.vision.csv; not in this repository):
    python benchmarks/bench_fit.py csv benchmark.vision.csv --compute "Seen Examples" --error Loss \
        --group Task --group Model --split Training
ColPret's 192 pre-training curves (NSL-PFN's data/colpret.npz, turned into a csv by benchmarks/colpret_csv.py),
the set the combined law was judged on once, by a protocol committed before (docs/scaling-laws-evidence.md):
    python benchmarks/bench_fit.py csv colpret.csv --compute tokens --error loss --group model --split context
LCDB 1.1's learning curves of tabular learners (benchmarks/lcdb11_csv.py), the second and third pre-registered
sets (its `test` half scored once in issue 33's fifth round, its `dev` half once in the sixth; both development
sets since):
    python benchmarks/bench_fit.py csv lcdb11.csv --compute n_train --error error --group curve --half test \
        --reach 0.5
Each csv run ends with the paired per-curve ratios (`paired`) and the criterion's ratio against the best single
law with bootstrap intervals over curves (`against_best`).
--half (pre-registered before any change to the choice or the intervals of issue 33's third round, and never
changed after): the groups' first --group column's values sorted by name, the first half (rounded down) is `dev`,
the rest `test`. On the published vision curves: dev = bird_10, bird_25, bird_5, c_10, c_25, c_5 (36 curves),
test = cal_10, cal_25, cal_5, inet_10, inet_25, inet_5 (36 curves). A rule may be developed looking at `dev`;
`test` is scored once, at the end, with the final rule (docs/scaling-laws-evidence.md says how often each was
scored).
speed: `curves` curves of 10 to 70 points (or `--points` each) fitted with the default settings (1000 bootstrap
replicates, 4 forms, the backtest).
"""

from __future__ import annotations

import argparse
import os
import time
from enum import Enum

import numpy as np
import pandas as pd

from vitbench.fit import FORMS, FitSpec, FormName, Job, Prior, fit_group, fit_groups

# One truth per form, chosen so that the forms differ over the decade predicted (compute 1 .. 1e5)
TRUTH = {FormName.POWER: {"a": 0.6, "b": 0.25},
         FormName.OFFSET: {"e_inf": 0.12, "a": 0.6, "b": 0.5},
         FormName.SATURATING: {"e_inf": 0.05, "a": 2.0, "b": 0.6, "c0": 30.0},
         FormName.M4: {"a": 3.0, "b": 0.7, "e_inf": 0.03, "e0": 0.9, "alpha": 1.5}}


def curve(form: FormName, seed: int, noise: float, n: int = 50, decades: float = 5.0):
    c = np.geomspace(1, 10**decades, n)
    e = FORMS[form].predict(TRUTH[form], c) * np.exp(np.random.default_rng(seed).normal(0, noise, n))
    return c, e


def judge(curves: list[tuple], spec: FitSpec, workers: int | None = None) -> list[dict]:
    """Each curve (c, e, reach[, seen]) fitted on C <= max / 10^reach (or on the points `seen` marks), all in one
    fit (vitbench.fit.fit_groups: with spec.prior, each curve's choice also weighs the others' backtests); per
    curve the chosen form, its backtest error, every form's real error on the other points and the combined law's
    (`law`: what predictions are made with, vitbench.fit.combine); with spec.bootstrap > 0 also whether each
    held-out point fell in its prediction interval, and the coverage the backtest reported."""
    jobs, held_out = [], []
    for c, e, reach, *seen in curves:
        seen = seen[0] if seen else c <= c.max() / 10**reach * (1 + 1e-9)
        held = {"predict": list(c[~seen])} if spec.bootstrap > 0 else {}
        one = spec.model_copy(update={"reach": reach} | held)
        jobs.append(Job({}, c[seen], e[seen], [""] * int(seen.sum()), one))
        held_out.append((c[~seen], e[~seen]))
    groups, _ = fit_groups(jobs, workers, spec.prior)
    return [_judged(g, c, e) for g, (c, e) in zip(groups, held_out)]


def _judged(g, c: np.ndarray, e: np.ndarray) -> dict:
    """judge's row for one fitted group `g` and its held-out points (c, e)."""
    def rmse(law) -> float:
        return float(np.sqrt(np.mean((law.log_predict(c) - np.log(e)) ** 2)))

    real = {f.form.name: rmse(f) for f in g.fits if f.ok}
    bt = g.backtest.get(FORMS[g.chosen])
    held = [p.ci_low <= y <= p.ci_high for p, y in zip(g.predictions, e)]
    at = {}  # the same intervals at other levels: calibrated, not only wide enough (issue 49)
    if g.predictions and g.predictions[0].ci_low is not None:
        for level in LEVELS:
            _, lo, hi = g.band(c, level)
            at[level] = list((lo <= e) & (e <= hi))
    return {"chosen": g.chosen, "reported": bt.rmse_log if bt else None, "real": real, "law": rmse(g.law()),
            "held": held, "held_at": at,
            "bt_coverage": g.law_error.coverage if g.law_error else None}


LEVELS = (0.5, 0.8)  # interval levels reported besides the spec's (its 0.95): a calibrated interval holds each


def held_at(rows: list[dict]) -> str:
    """How often the intervals at LEVELS held the held-out points, pooled over the curves."""
    return ", ".join(f"{level:.0%}: {np.mean([h for r in rows for h in r['held_at'].get(level, [])]):.1%}"
                     for level in LEVELS if any(r["held_at"].get(level) for r in rows))


def _m4(rng, lo, hi):  # the sigmoid's knee (s = 1/2) in the first 60 % of the range
    e0, e_inf = rng.uniform(0.5, 1.0), np.exp(rng.uniform(np.log(0.005), np.log(0.2)))
    alpha, b = rng.uniform(0, 3), np.exp(rng.uniform(np.log(0.2), np.log(1.5)))
    knee = 10 ** rng.uniform(lo, lo + 0.6 * (hi - lo))
    return {"a": knee**b * (e0 - e_inf) ** (1 - alpha), "b": b, "e_inf": e_inf, "e0": e0, "alpha": alpha}


def _m4late(rng, lo, hi):  # falling from the first budget on, the floor reached 0.3-1.5 decades before the end
    e0, e_inf = rng.uniform(0.6, 1.0), np.exp(rng.uniform(np.log(0.01), np.log(0.2)))
    alpha, b = rng.uniform(0, 2), np.exp(rng.uniform(np.log(0.3), np.log(1.2)))
    xf = 10 ** (hi - rng.uniform(0.3, 1.5))
    return {"a": e_inf * xf**b / (e0 - e_inf) ** alpha, "b": b, "e_inf": e_inf, "e0": e0, "alpha": alpha}


def _saturating(rng, lo, hi):
    b, c0 = np.exp(rng.uniform(np.log(0.2), np.log(1.5))), 10 ** rng.uniform(lo, lo + 0.5 * (hi - lo))
    e_inf, top = np.exp(rng.uniform(np.log(0.005), np.log(0.2))), rng.uniform(0.4, 0.9)
    return {"e_inf": e_inf, "a": (top - e_inf) * c0**b, "b": b, "c0": c0}


def _offset(rng, lo, hi):
    b, e_inf = np.exp(rng.uniform(np.log(0.1), np.log(0.8))), np.exp(rng.uniform(np.log(0.005), np.log(0.2)))
    return {"e_inf": e_inf, "a": (rng.uniform(0.4, 0.9) - e_inf) * (10**lo) ** b, "b": b}


def _power(rng, lo, hi):
    b = np.exp(rng.uniform(np.log(0.05), np.log(0.5)))
    return {"a": rng.uniform(0.3, 0.9) * (10**lo) ** b, "b": b}


FAMILIES = {"m4": (FormName.M4, _m4), "m4late": (FormName.M4, _m4late),
            "saturating": (FormName.SATURATING, _saturating), "offset": (FormName.OFFSET, _offset),
            "power": (FormName.POWER, _power)}


class Noise(str, Enum):
    """--noise-kind of `families`: independent log-normal noise, or noise whose neighbours miss together."""

    IID = "iid"
    CORRELATED = "correlated"


def correlated_noise(rng: np.random.Generator, logc: np.ndarray, sigma: float) -> np.ndarray:
    """Log-error residuals that miss together, as a learning curve's do (one run's evaluations share its
    randomness, and a schedule bends the curve): AR(1) in the point order with lag-1 correlation phi in
    [0.5, 0.95] and marginal sd `sigma`; a slow drift, one sinusoid over the log-compute range of amplitude
    [0, 1.5] sigma; and a change of slope in log-log of delta in [-0.02, 0.02] from a point in the last 40 % of
    the range (past the fit's end on some curves: a law change no fit can see)."""
    n = len(logc)
    phi = rng.uniform(0.5, 0.95)
    ar = np.empty(n)
    ar[0] = rng.normal(0, sigma)
    for i in range(1, n):  # stationary: the innovation's sd keeps the marginal sd at sigma
        ar[i] = phi * ar[i - 1] + rng.normal(0, sigma * np.sqrt(1 - phi**2))
    span = logc[-1] - logc[0]
    u = (logc - logc[0]) / span
    drift = rng.uniform(0, 1.5) * sigma * np.sin(2 * np.pi * rng.uniform(0.5, 1.5) * u + rng.uniform(0, 2 * np.pi))
    knee = logc[0] + rng.uniform(0.6, 1.0) * span
    bend = -rng.uniform(-0.02, 0.02) * np.log(10) * np.maximum(logc - knee, 0.0)
    return ar + drift + bend


def family_curve(family: str, seed: int, noise: Noise = Noise.IID):
    """(compute, error, reach): 10-70 points over 3-5 decades from a random law of `family`, 1-4 % noise
    (independent, or `correlated_noise`)."""
    rng = np.random.default_rng(seed)
    span, n, lo = rng.uniform(3, 5), int(rng.integers(10, 71)), rng.uniform(-2, 6)
    form, params = FAMILIES[family]
    p = params(rng, lo, lo + span)
    c = np.geomspace(10**lo, 10 ** (lo + span), n)
    sigma = rng.uniform(0.01, 0.04)
    reach = float(rng.choice([0.5, 1.0]) if span > 3.5 else 0.5)
    eps = rng.normal(0, sigma, n) if noise == Noise.IID else correlated_noise(rng, np.log10(c), sigma)
    e = FORMS[form].predict(p, c) * np.exp(eps)
    return c, e, reach


def families(curves: int, seed: int, bootstrap: int, workers: int | None, noise: Noise = Noise.IID,
             prior: Prior = Prior.GROUPS) -> None:
    drawn = [(f, seed + i) for i in range(curves) for f in FAMILIES]
    judged = judge([family_curve(f, s, noise) for f, s in drawn], FitSpec(bootstrap=bootstrap, prior=prior),
                   workers)
    rows = [(f, r) for (f, _), r in zip(drawn, judged)]
    print(f"{curves} curves per family, {noise.value} noise, seeds {seed}-{seed + curves - 1}, prior "
          f"{prior.value}; median RMSE of the log prediction on "
          f"the held-out decade(s); {bootstrap} bootstrap replicates for the intervals")
    print(f"{'family':11s} {'law':>8s} {'chosen':>8s} " + " ".join(f"{f.value:>10s}" for f in FORMS)
          + f" {'95% held':>9s} {'bt said':>8s}")
    for fam in [*FAMILIES, "all"]:
        rs = [r for f, r in rows if f == fam or fam == "all"]
        held = [h for r in rs for h in r["held"]]
        said = [r["bt_coverage"] for r in rs if r["bt_coverage"] is not None]
        law, chosen = np.median([r["law"] for r in rs]), np.median([r["real"][r["chosen"]] for r in rs])
        print(f"{fam:11s} {law:8.4f} {chosen:8.4f} "
              + " ".join(f"{np.median([r['real'][f] for r in rs if f in r['real']]):10.4f}" for f in FORMS)
              + (f" {np.mean(held):9.1%}" if held else f" {'-':>9s}")
              + (f" {np.mean(said):8.1%}" if said else f" {'-':>8s}"))
    print("chosen: " + ", ".join(f"{f.value} {sum(r['chosen'] == f for _, r in rows)}" for f in FORMS))
    print(f"intervals at other levels, all curves: {held_at([r for _, r in rows])}")


def synthetic(curves: int, noise: float, prior: Prior = Prior.GROUPS) -> None:
    spec = FitSpec(bootstrap=0, reach=1.0, prior=prior)
    print(f"{curves} curves per form, 50 points over 5 decades, {noise:.0%} noise; fit on 4 decades, predict the "
          f"5th. RMSE of log prediction on the 5th decade (real), the chosen form's backtest error (reported)")
    print(f"{'truth':11s} {'law':>8s} " + " ".join(f"{f.value:>10s}" for f in FORMS) +
          f" {'truth chosen':>13s} {'reported':>9s} {'real':>7s}")
    all_rep, all_real = [], []
    judged = judge([(*curve(truth, s, noise), 1.0) for truth in FORMS for s in range(curves)], spec)
    for i, truth in enumerate(FORMS):
        rows = judged[i * curves:(i + 1) * curves]
        rms = {f: np.sqrt(np.mean([r["real"][f] ** 2 for r in rows if f in r["real"]])) for f in FORMS}
        chosen = np.sqrt(np.mean([r["law"] ** 2 for r in rows]))
        rep = np.sqrt(np.mean([r["reported"] ** 2 for r in rows]))
        hits = sum(r["chosen"] == truth for r in rows)
        all_rep.append(rep)
        all_real.append(chosen)
        print(f"{truth.value:11s} {chosen:8.4f} " + " ".join(f"{rms[f]:10.4f}" for f in FORMS) +
              f" {hits:>6d} of {len(rows):<4d} {rep:9.4f} {chosen:7.4f}")
    ratio = np.sqrt(np.mean(np.square(all_rep))) / np.sqrt(np.mean(np.square(all_real)))
    print(f"reported / real, all curves: {ratio:.2f}")


def _is_fit_row(values: pd.Series, column: str) -> np.ndarray:
    """The published files' split column: 1/0, true/false (any case), or yes/no; anything else is refused."""
    text = values.astype(str).str.strip().str.lower()
    fit, judged = text.isin(["1", "1.0", "true", "yes"]), text.isin(["0", "0.0", "false", "no"])
    if not (fit | judged).all():
        raise SystemExit(f"csv: --split column {column!r} must hold 1/0 (or true/false): found "
                         f"{sorted(set(text[~(fit | judged)]))[:5]}")
    return fit.to_numpy()


HALVES = ("dev", "test", "all")  # --half: the pre-registered split of a published file's curves (docstring)


def half_of(values, half: str) -> set:
    """The values of the first --group column in `half`: sorted by name, the first half (rounded down) `dev`, the
    rest `test`; `all`: every value. Pre-registered (module docstring), never tuned."""
    names = sorted({str(v) for v in values})
    cut = len(names) // 2
    return set(names if half == "all" else names[:cut] if half == "dev" else names[cut:])


def published(path: str, compute: str, error: str | None, accuracy: str | None, group: list[str], reach: float,
              min_points: int, min_fit_decades: float, where: str | None, bootstrap: int = 0,
              split: str | None = None, half: str = "all", workers: int | None = None,
              prior: Prior = Prior.GROUPS) -> None:
    """Fit each group on all but its last `reach` decades, predict those (with `split`: fit on the rows whose
    `split` column is 1, predict the others, the file's own split); per curve and in summary."""
    df = pd.read_csv(path, low_memory=False)
    if where:
        df = df.query(where)  # a benchmark script over the user's own file, not a study string
    if (error is None) == (accuracy is None):
        raise SystemExit("csv: give exactly one of --error COL or --accuracy COL")
    df = df[df[group[0]].astype(str).isin(half_of(df[group[0]], half))]
    print(f"half {half}: {group[0]} in {sorted(set(df[group[0]].astype(str)))}")
    err = df[error] if error else 1 - df[accuracy]
    fit_rows = _is_fit_row(df[split], split) if split else np.zeros(len(df), bool)
    df = pd.concat([df[[compute, *group]], err.rename("_error"), pd.Series(fit_rows, df.index, name="_fit")],
                   axis=1)
    spec = FitSpec(bootstrap=bootstrap, reach=reach, prior=prior)
    print(f"{'curve':28s} {'pts':>4s} {'chosen':>10s} {'combined':>10s} "
          + " ".join(f"{f.value:>10s}" for f in FORMS)
          + f" {'reported':>9s}")
    curves, names = [], []
    for key, part in df.groupby(group, dropna=False):
        part = part.sort_values(compute)
        c, e = part[compute].to_numpy(float), part["_error"].to_numpy(float)
        ok = (c > 0) & (e > 0)  # any positive lower-is-better value (a loss may exceed 1)
        c, e, seen = c[ok], e[ok], part["_fit"].to_numpy()[ok]
        if split:  # the file's split: judged at the reach of its furthest held-out budget
            if seen.all() or not seen.any() or len(np.unique(c[seen])) < min_points:
                print(f"{str(key):28s} {len(c):4d} skipped: no held-out rows, or fewer than {min_points} "
                      "budgets to fit")
                continue
            far = float(np.log10(c[~seen].max() / c[seen].max()))
            curves.append((c, e, max(far, 0.1), seen))
        elif len(np.unique(c)) < min_points or np.log10(c.max() / c.min()) < reach + min_fit_decades:
            print(f"{str(key):28s} {len(c):4d} skipped: fewer than {min_points} budgets or under "
                  f"{reach + min_fit_decades:g} decades")
            continue
        else:
            curves.append((c, e, reach))
        names.append(str(key))
    rows = judge(curves, spec, workers)
    for name, (c, *_), r in zip(names, curves, rows):
        print(f"{name:28s} {len(c):4d} {r['chosen'].value:>10s} {r['law']:10.4f} "
              + " ".join(f"{r['real'][f]:10.4f}" if f in r["real"] else f"{'-':>10s}" for f in FORMS)
              + (f" {r['reported']:9.4f}" if r["reported"] is not None else f" {'-':>9s}"))
    if not rows:
        return
    print(f"{len(rows)} curves, prior {prior.value}; median over curves of the RMSE of the log prediction "
          + (f"on the rows whose {split} is 0" if split else f"over the last {reach} decade(s)"))
    print("combined law", f"{np.median([r['law'] for r in rows]):.4f}",
          f"(mean, each curve capped at 3: {np.mean(np.minimum([r['law'] for r in rows], 3)):.4f})")
    print("chosen form", f"{np.median([r['real'][r['chosen']] for r in rows]):.4f}")
    for f in FORMS:
        vals = [r["real"][f] for r in rows if f in r["real"]]
        wins = sum(min(r["real"], key=r["real"].get) == f for r in rows)
        print(f"{f.value:10s}", f"{np.median(vals):.4f}" if vals else "-", f"best in {wins}")
    print("chosen: " + ", ".join(f"{f.value} {sum(r['chosen'] == f for r in rows)}" for f in FORMS))
    print("per curve, the combined law's error over each's: " + paired(rows))
    print(against_best(rows))
    reported = [r["reported"] for r in rows if r["reported"] is not None]
    if reported:
        print(f"backtest reported (median) {np.median(reported):.4f}")
    held = [h for r in rows for h in r["held"]]
    if held:
        said = [r["bt_coverage"] for r in rows if r["bt_coverage"] is not None]
        print(f"{spec.ci:.0%} prediction intervals held {np.mean(held):.1%} of {len(held)} held-out points"
              + (f" (the backtest said {np.mean(said):.1%})" if said else "")
              + f"; at other levels {held_at(rows)}")


SAME = 1e-3  # |log ratio| counted as no difference: 0.1 %, far above the float rounding of a weight-1 combination


def paired(rows: list[dict]) -> str:
    """The paired comparison beside the medians (design.md: they can disagree): per curve, the combined law's error
    over the chosen form's and over each form's; the geometric mean of that ratio and on how many curves it is
    below / above 1 by more than SAME (the rest: the same law, e.g. a form with all the weight)."""
    def ratio(name: str, of) -> str:
        r = np.log([row["law"] / of(row) for row in rows if of(row) is not None and of(row) > 0])
        if not len(r):
            return f"{name} -"
        return (f"{name} {np.exp(np.mean(r)):.3f} ({(r < -SAME).sum()} below / {(r > SAME).sum()} above / "
                f"{(abs(r) <= SAME).sum()} same)")

    return ", ".join([ratio("chosen", lambda row: row["real"][row["chosen"]]),
                      *(ratio(f.value, lambda row, f=f: row["real"].get(f)) for f in FORMS)])


RESAMPLES = 2000  # bootstrap resamples of the curves: an interval's ends moved by up to 0.02 between seeds 0-3
# (LCDB 1.1's and the vision curves; a median of a resample moves in steps, so more resamples gain little)


def against_best(rows: list[dict], seed: int = 0) -> str:
    """The criterion's ratio (the combined law's median over the best single law's, that law named by its median
    on these curves) and the paired geometric mean over curves (those with an error above 0), each with a 95 %
    bootstrap interval over curves (RESAMPLES resamples of the curves, with replacement, the same for both): how
    far a ratio of medians can move with the curves drawn, on the curves the best law predicted."""
    meds = {f: np.median([r["real"][f] for r in rows if f in r["real"]]) for f in FORMS
            if any(f in r["real"] for r in rows)}
    best = min(meds, key=meds.get)
    law = np.array([r["law"] for r in rows if best in r["real"]])
    one = np.array([r["real"][best] for r in rows if best in r["real"]])
    both = (law > 0) & (one > 0)  # a curve every law predicts exactly (a constant) has no ratio: left out
    logs = np.where(both, np.log(np.where(both, law, 1.0) / np.where(both, one, 1.0)), 0.0)
    idx = np.random.default_rng(seed).integers(0, len(law), (RESAMPLES, len(law)))
    med = np.median(law[idx], axis=1) / np.median(one[idx], axis=1)
    geo = np.exp((logs[idx] * both[idx]).sum(axis=1) / np.maximum(both[idx].sum(axis=1), 1))
    return (f"against the best single law ({best.value}, {len(law)} curves): ratio of medians "
            f"{np.median(law) / np.median(one):.3f} [{np.quantile(med, 0.025):.3f}, "
            f"{np.quantile(med, 0.975):.3f}], "
            f"paired geometric mean {np.exp(logs[both].mean()):.3f} [{np.quantile(geo, 0.025):.3f}, "
            f"{np.quantile(geo, 0.975):.3f}] (95 % bootstrap over curves)")


def speed(curves: int, points: int, workers: int | None) -> None:
    from pathlib import Path

    from vitbench.fit import Source, SourceKind, fit_source

    rows = []
    forms = list(FORMS)
    sizes = [points] * curves if points else np.linspace(10, 70, curves).round().astype(int).tolist()
    for i in range(curves):
        c, e = curve(forms[i % 4], i, 0.02, n=sizes[i])
        rows += [{"curve": i, "compute": x, "error": y} for x, y in zip(c, e)]
    src = Source(SourceKind.CSV, Path("<synthetic>"), pd.DataFrame(rows))
    t, cpu = time.perf_counter(), os.times()
    fit_source(src, FitSpec(compute="compute", error="error", group=["curve"]), workers=workers)
    done = os.times()
    used = (done.user + done.system + done.children_user + done.children_system
            - cpu.user - cpu.system - cpu.children_user - cpu.children_system)
    shown = f"{points}" if points else "10-70"
    print(f"{curves} curves x {shown} points, 1000 bootstrap replicates, 4 forms: {time.perf_counter() - t:.1f} s"
          " "
          f"wall, {used:.1f} s CPU (workers={workers or 'all cores'})")
    c, e = curve(FormName.SATURATING, 0, 0.02, n=10)
    t, cpu = time.perf_counter(), time.process_time()
    fit_group({}, c, e, [""] * 10, FitSpec())
    print(f"one 10-point curve, 1000 replicates, 4 forms: {time.perf_counter() - t:.2f} s wall, "
          f"{time.process_time() - cpu:.2f} s CPU")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("synthetic", "families", "speed", "csv"))
    ap.add_argument("file", nargs="?")
    ap.add_argument("--curves", type=int, default=None)
    ap.add_argument("--points", type=int, default=None, help="speed: points per curve (default: 10 to 70, spread)")
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=20000,
                    help="families: first seed (20000: curves the tuning never saw)")
    ap.add_argument("--bootstrap", type=int, default=200,
                    help="families, csv: bootstrap replicates of the prediction intervals (0: none)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--noise-kind", type=Noise, choices=list(Noise), default=Noise.IID,
                    help="families: independent noise, or correlated (AR(1), a slow drift, a late bend)")
    ap.add_argument("--compute")
    ap.add_argument("--error")
    ap.add_argument("--accuracy", help="csv: an accuracy column, fitted as 1 - accuracy (instead of --error)")
    ap.add_argument("--min-points", type=int, default=12, help="csv: skip curves with fewer budgets")
    ap.add_argument("--group", action="append", help="csv: group by this column (repeatable)")
    ap.add_argument("--where", help="csv: only the rows where this pandas query holds")
    ap.add_argument("--min-fit-decades", type=float, default=1.0, help="csv: skip curves whose fitted part is shorter")
    ap.add_argument("--reach", type=float, default=1.0)
    ap.add_argument("--half", choices=HALVES, default="all",
                    help="csv: the pre-registered half of the curves, by the first --group column (docstring)")
    ap.add_argument("--weight-power", type=float, default=None,
                    help="a form's weight is score^-P (default: vitbench.fit.backtest.WEIGHT_POWER); to compare P")
    ap.add_argument("--prior", type=Prior, choices=list(Prior), default=Prior.GROUPS,
                    help="synthetic, families, csv: each curve's choice also weighs the other curves' backtests "
                         "(groups), or not (none): vitbench fit --prior")
    ap.add_argument("--split", help="csv: fit on the rows where this column is 1, judge on the others (e.g. the "
                                    "published benchmark's `Training`); else the last --reach decades are judged")
    a = ap.parse_args()
    if a.weight_power is not None:  # read by backtest.choose at each call; forked workers inherit it
        from vitbench.fit import backtest

        backtest.WEIGHT_POWER = a.weight_power
    if a.what == "synthetic":
        synthetic(a.curves or 6, a.noise, a.prior)
    elif a.what == "families":
        families(a.curves or 20, a.seed, a.bootstrap, a.workers, a.noise_kind, a.prior)
    elif a.what == "speed":
        speed(a.curves or 72, a.points, a.workers)
    else:
        published(a.file, a.compute, a.error, a.accuracy, a.group, a.reach, a.min_points, a.min_fit_decades,
                  a.where, a.bootstrap, a.split, a.half, a.workers, a.prior)
