"""The groups' prior in the choice of form (vitbench.fit.backtest, "Prior"): each group's weights shrink toward
the forms that backtest best over all the fit's groups; one group, or `--prior none`, is the group's own
backtest."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from vitbench.fit import FitSpec, Job, Prior, fit_group, fit_groups, fit_path
from vitbench.fit.backtest import PRIOR_SHARE, WEIGHT_POWER, prior_scores, scores

from tolerances_stat import f64

C = np.geomspace(1, 1e4, 41)
SPEC = FitSpec(bootstrap=0, reach=1.0)
# a weight's roundings: the scores' chain (about 6) and the blend's two powers and product, x WEIGHT_POWER through
# the power, the normalising sum one per form (tests/test_fit_combine.py counts the same chain without the blend)
ROUNDINGS = int(12 * WEIGHT_POWER) + 4


def _curve(e_inf: float, b: float, seed: int) -> np.ndarray:
    """A saturating curve with 2 % log-normal noise: the forms disagree beyond it."""
    return (e_inf + 2.0 * (C + 30.0) ** -b) * np.exp(np.random.default_rng(seed).normal(0, 0.02, len(C)))


CURVES = {"a": _curve(0.05, 0.6, 0), "b": _curve(0.02, 0.4, 1), "c": _curve(0.1, 0.8, 2)}


def _jobs(names) -> list[Job]:
    return [Job({"curve": n}, C, CURVES[n], [""] * len(C), SPEC) for n in names]


@pytest.fixture(scope="module")
def pooled():
    return fit_groups(_jobs(CURVES), workers=1)


def test_the_prior_is_the_geometric_mean_of_the_groups_scores(pooled):
    groups, prior = pooled
    own = [scores(g.backtest, g.fits) for g in groups]
    assert set(prior) == set(own[0]) and len(prior) == 4
    for form, p in prior.items():
        assert p == f64(math.exp(np.mean([math.log(s[form]) for s in own])), roundings=4 * len(own))


def test_each_group_s_weights_shrink_toward_the_prior(pooled):
    """Per pair of forms, the log ratio of their weights is (1 - PRIOR_SHARE) x the group's own backtest's plus
    PRIOR_SHARE x the prior's: between the two, so a group's choice leans toward what the other groups measured."""
    groups, prior = pooled
    for g in groups:
        own = scores(g.backtest, g.fits)
        assert g.backtest.weight_power == WEIGHT_POWER  # a full reach: the power is not scaled down
        for f, h in itertools.combinations(own, 2):
            with_prior = math.log(g.weights[f.value] / g.weights[h.value])
            alone = -WEIGHT_POWER * math.log(own[f] / own[h])
            consensus = -WEIGHT_POWER * math.log(prior[f] / prior[h])
            expected = (1 - PRIOR_SHARE) * alone + PRIOR_SHARE * consensus
            # each weight off by ROUNDINGS relative roundings, the logs of the scores by one each: absolute in logs
            tol = ROUNDINGS * 2.0**-52 * (1 + abs(expected))
            assert with_prior == pytest.approx(expected, abs=tol)
            assert min(alone, consensus) - tol <= with_prior <= max(alone, consensus) + tol
        assert g.chosen.value == max(g.weights, key=g.weights.get)


def test_one_group_or_no_prior_is_the_group_s_own_backtest(pooled):
    groups, _ = pooled
    alone = [fit_group(j.key, j.compute, j.error, j.labels, j.spec) for j in _jobs(CURVES)]
    unpooled, prior = fit_groups(_jobs(CURVES), workers=1, prior=Prior.NONE)
    assert prior == {}
    assert [g.weights for g in unpooled] == [g.weights for g in alone]
    assert [g.weights for g in groups] != [g.weights for g in alone]  # the prior did change something
    one, prior = fit_groups(_jobs(["a"]), workers=1)
    assert prior == {} and prior_scores([scores(alone[0].backtest, alone[0].fits)]) == {}
    assert one[0].weights == alone[0].weights


def test_groups_that_agree_leave_each_other_unchanged():
    """Three groups with the same points: the prior is each one's own scores, so the weights are the group's
    alone (to rounding)."""
    same = [Job({"curve": n}, C, CURVES["a"], [""] * len(C), SPEC) for n in "xyz"]
    groups, _ = fit_groups(same, workers=1)
    alone = fit_group({}, C, CURVES["a"], [""] * len(C), SPEC)
    for g in groups:
        assert set(g.weights) == set(alone.weights)
        for k, w in g.weights.items():
            assert w == f64(alone.weights[k], roundings=ROUNDINGS)


def test_the_groups_order_does_not_change_any_group(pooled):
    groups, prior = pooled
    back, prior_back = fit_groups(_jobs(reversed(list(CURVES))), workers=1)
    assert prior_back == prior
    assert [g.weights for g in reversed(back)] == [g.weights for g in groups]


@pytest.fixture
def csv(tmp_path):
    p = tmp_path / "curves.csv"
    pd.DataFrame([{"model": n, "compute": x, "error": y} for n, e in CURVES.items() for x, y in zip(C, e)]
                 ).to_csv(p, index=False)
    return p


def test_the_json_says_the_prior_and_each_group_s_own_scores(cli, csv):
    args = ("fit", csv, "--compute", "compute", "--error", "error", "--group", "model", "--bootstrap", "0",
            "--workers", "1", "--json")
    r = cli(*args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["prior"]["kind"] == "groups" and doc["prior"]["share"] == PRIOR_SHARE
    own = [g["backtest_scores"] for g in doc["groups"]]
    assert len(own) == 3 and all(set(s) == set(doc["prior"]["scores"]) for s in own)
    for form, p in doc["prior"]["scores"].items():
        assert p == f64(math.exp(np.mean([math.log(s[form]) for s in own])), roundings=4 * len(own))
    r = cli(*args, "--prior", "none")
    assert r.exit_code == 0, r.output
    doc_none = json.loads(r.stdout)
    assert doc_none["prior"] == {"kind": "none", "share": 0.0, "scores": {}}
    assert [g["backtest_scores"] for g in doc_none["groups"]] == own
    spec = FitSpec(compute="compute", error="error", group=["model"], bootstrap=0, prior=Prior.NONE)
    assert [g["weights"] for g in doc_none["groups"]] == [g.weights for g in fit_path(csv, spec, workers=1).groups]
