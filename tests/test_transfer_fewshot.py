"""Linear few-shot: the closed-form solver against direct least squares, k-shot draws, accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from vitbench.errors import ConfigError
from vitbench.protocols.fewshot import BIAS_CONSTANT, LeastSquares, evaluate_features, kshot_indices


def _direct(x, labels, k, l2):
    """Ridge solution by numpy.linalg.lstsq on the stacked system [X; sqrt(l2) I] W = [Y; 0]."""
    z = (x - x.mean(0)) / (x.std(0) + 1e-5)
    xa = np.hstack([z, np.full((len(x), 1), BIAS_CONSTANT)])
    y = 2.0 * np.eye(k)[labels] - 1.0
    d = xa.shape[1]
    a = np.vstack([xa, np.sqrt(l2) * np.eye(d)])
    b = np.vstack([y, np.zeros((d, k))])
    return np.linalg.lstsq(a, b, rcond=None)[0], xa, y


@pytest.mark.parametrize("n,d", [(60, 8), (6, 20)])  # primal (N >= D) and dual (D > N) branches
@pytest.mark.parametrize("l2", [1e-3, 1.0, 1024.0])
def test_solver_matches_direct_least_squares(n, d, l2):
    rng = np.random.default_rng(n * d)
    x = rng.normal(size=(n, d)) * rng.uniform(0.1, 10, size=d)
    labels = np.arange(n) % 3
    w_direct, xa, y = _direct(x, labels, 3, l2)
    ls = LeastSquares(x, labels, 3)
    # three float64 solvers of one ridge system: each solution is off by at most cond(A) times the relative
    # perturbation of forming and factoring A (n + d roundings of eps64), relative to the solution (Higham,
    # "Accuracy and Stability of Numerical Algorithms", ch. 7): 7e-7 to 1e-12 of |W| here, while l2 10 % off moves
    # W by 2e-6 to 9e-2 of it
    normal = xa.T @ xa + l2 * np.eye(xa.shape[1])
    atol = 2 * np.linalg.cond(normal) * (n + xa.shape[1]) * np.finfo(np.float64).eps * np.abs(w_direct).max()
    np.testing.assert_allclose(ls.weights(l2), w_direct, rtol=0, atol=atol)
    # and the explicit normal equations (X^T X + l2 I) W = X^T Y
    w_normal = np.linalg.solve(normal, xa.T @ y)
    np.testing.assert_allclose(ls.weights(l2), w_normal, rtol=0, atol=atol)
    np.testing.assert_array_equal(ls.predict(x, l2), (xa @ w_direct).argmax(1))


def test_kshot_draws_are_per_class_nested_and_checked():
    labels = np.repeat(np.arange(4), 30)
    a = kshot_indices(labels, 4, 5, seed=0)
    b = kshot_indices(labels, 4, 10, seed=0)
    assert np.bincount(labels[a], minlength=4).tolist() == [5] * 4
    assert set(a) <= set(b)  # larger k extends the smaller draw
    assert not np.array_equal(a, kshot_indices(labels, 4, 5, seed=1))
    with pytest.raises(ConfigError, match="31-shot needs 31"):
        kshot_indices(labels, 4, 31, seed=0)


def test_too_many_shots_name_the_class_and_the_most_allowed(tmp_path):
    """Checked before any pre-training; the class is named as the data names it, not by its relabelled index
    (digit '8' of classes 5-9 read 'class 3': found by a review), with the most shots the split allows."""
    from vitbench.protocols.fewshot import FewshotConfig, fewshot

    with pytest.raises(ConfigError, match=r"200-shot needs 200 training images per class; the train split of "
                                          r"digits classes=5-9 has \d+ for class '\d': shots up to \d+"):
        fewshot(FewshotConfig(checkpoint=str(tmp_path / "never-read.safetensors"), shots=[200]),
                cache=str(tmp_path))


def _blobs(n_per_class, k, d, sep, seed):
    centres = np.random.default_rng(0).normal(size=(k, d)) * sep  # the same classes in every split
    y = np.repeat(np.arange(k), n_per_class)
    return centres[y] + np.random.default_rng(seed).normal(size=(len(y), d)), y


def test_accuracy_rises_with_shots_and_is_chance_on_noise():
    tr, va, te = (_blobs(40, 5, 16, 1.0, s) for s in (1, 2, 3))
    m, raw = evaluate_features(tr, va, te, 5, [1, 5, 25], seeds=4)
    assert m["accuracy"] == m["accuracy_25shot"] and m["shots"] == 25
    assert m["accuracy_25shot"] > 0.9 and m["accuracy_25shot"] > m["accuracy_1shot"]
    assert len(raw["per_seed"]["5"]) == 4 and m["accuracy_5shot_std"] >= 0
    rng = np.random.default_rng(0)
    noise = [(rng.normal(size=(200, 16)), np.arange(200) % 5) for _ in range(3)]
    m, _ = evaluate_features(*noise, 5, [10], seeds=3, l2_reg=1.0)
    assert m["accuracy"] < 0.4  # chance is 0.2


def test_one_seed_has_no_spread_to_show():
    """A row of one seed said accuracy_std 0.0, which reads as "no spread"; one value has no sample spread."""
    from vitbench.protocols.fewshot import spread

    assert spread([0.8]) == (0.8, None)
    mean, sd = spread([0.8, 0.9])
    assert mean == pytest.approx(0.85) and sd == np.std([0.8, 0.9], ddof=1)
