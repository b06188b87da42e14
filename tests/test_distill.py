"""Distillation in pre-training (DeiT): the losses against a direct numpy computation on both backends, lambda = 0
is plain training, torch and JAX take the same steps, the teacher's compute is counted, studies and keys."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vitbench.backends.base import get_backend
from vitbench.errors import ConfigError
from vitbench.models.analytic import analytic_counts
from vitbench.models.specs import get_spec
from vitbench.transfer.data import load_splits
from vitbench.transfer.distill import Distill, Distillation
from vitbench.protocols.pretrain import PretrainConfig, ensure_upstream
from vitbench.transfer.schedules import OptimConfig
from tolerances_fp import EPS32
from tolerances_stat import f64, f64_std

pytestmark = pytest.mark.usefixtures("one_torch_thread")
RES = 16
BACKENDS = ("torch", pytest.param("jax", marks=pytest.mark.jax))


def _engine(name: str):
    if name == "jax":
        pytest.importorskip("jax")
        pytest.importorskip("optax")
    be = get_backend(name)
    be.setup("cpu")
    return be


@pytest.fixture(scope="module")
def data():
    return load_splits({"classes": "0-4"})


# ---- the losses against numpy -------------------------------------------------------------------------------
def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


def numpy_loss(cls, dist, y, teacher, kind: Distillation, lam: float, tau: float, smoothing: float) -> float:
    """DeiT eq. 2 / 3 written out in float64 (CE with label smoothing y(1 - a) + a / K on the true labels)."""
    k = cls.shape[1]
    target = np.eye(k)[y] * (1 - smoothing) + smoothing / k
    base = -(target * _log_softmax(cls)).sum(1).mean()
    if kind is Distillation.HARD:
        kd = -_log_softmax(dist)[np.arange(len(y)), teacher.argmax(1)].mean()
    else:
        log_t, log_s = _log_softmax(teacher / tau), _log_softmax(dist / tau)
        kd = tau**2 * (np.exp(log_t) * (log_t - log_s)).sum(1).mean()
    return (1 - lam) * base + lam * kd


def _backend_loss(name: str, cls, dist, y, teacher, d: Distill, smoothing: float) -> float:
    if name == "torch":
        import torch

        from vitbench.backends.torch.training import distillation_loss

        t = torch.from_numpy
        return float(distillation_loss(t(cls), t(dist), t(y), t(teacher), d, smoothing))
    pytest.importorskip("jax")
    import jax
    import optax

    from vitbench.backends.jax.training import distillation_loss

    targets = optax.smooth_labels(jax.nn.one_hot(y, cls.shape[1]), smoothing) if smoothing else \
        jax.nn.one_hot(y, cls.shape[1])
    return float(distillation_loss(cls, dist, targets, teacher, d.kind, d.lam, d.tau))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", list(Distillation))
@pytest.mark.parametrize("lam,tau,smoothing", [(0.5, 1.0, 0.0), (0.3, 3.0, 0.1), (1.0, 0.5, 0.0)])
def test_losses_match_a_direct_numpy_computation(backend, kind, lam, tau, smoothing):
    rng = np.random.default_rng(7)
    cls, dist, teacher = (rng.normal(0, 2, (6, 5)).astype(np.float32) for _ in range(3))
    y = rng.integers(0, 5, 6)
    d = Distill(kind, lam, tau, lambda idx: teacher)
    want = numpy_loss(cls.astype(np.float64), dist.astype(np.float64), y, teacher.astype(np.float64), kind, lam,
                      tau, smoothing)
    # fp32 against float64: a log-softmax entry is ~K + 4 roundings, the sums over K classes and B images K + B
    # more (~20); the KL's terms have mixed signs (error relative to sum |terms|, within 3x of the KL on this
    # seeded draw): 100 EPS32. The loss (>= 0.5 on this draw) never nears zero.
    assert _backend_loss(backend, cls, dist, y, teacher, d, smoothing) == pytest.approx(want, rel=100 * EPS32)
    # the teacher's term really enters: another teacher, another loss, beyond the comparison's bound (so the
    # check above tells the two teachers apart)
    other = numpy_loss(cls, dist, y, np.roll(teacher, 1, axis=1), kind, lam, tau, smoothing)
    assert abs(other - want) > 10 * 100 * EPS32 * want


@pytest.mark.parametrize("backend", BACKENDS)
def test_soft_loss_is_zero_kl_when_student_is_the_teacher(backend):
    """KL(p || p) = 0: with lam = 1 and the distillation head equal to the teacher the soft loss vanishes."""
    rng = np.random.default_rng(1)
    z = rng.normal(0, 3, (4, 5)).astype(np.float32)
    d = Distill(Distillation.SOFT, 1.0, 2.0, lambda idx: z)
    # 0 up to the rounding of both log-softmaxes (K + 4 roundings of |log p| each), times tau^2, summed over K
    bound = 2.0**2 * 5 * (5 + 4) * EPS32 * np.abs(_log_softmax(z / 2.0)).max()
    assert abs(_backend_loss(backend, z, z, rng.integers(0, 5, 4), z, d, 0.0)) <= bound


# ---- training ---------------------------------------------------------------------------------------------------
def _table_teacher(n: int, k: int, seed: int = 3):
    """A teacher given as fixed logits per training image (the same on both backends)."""
    table = np.random.default_rng(seed).normal(0, 2, (n, k)).astype(np.float32)
    return lambda idx: table[idx]


OPT = OptimConfig(optimizer="adam", lr=3e-3, steps=4, warmup_steps=1, weight_decay=0.3, label_smoothing=0.1)
# The equivalences run SGD (lr as the paper's fine-tuning grid's top, App. B.1.1): its update is linear in
# the gradient, so the two programs' rounding stays rounding (tests/tolerances_fp.py: why not Adam).
SGD = OPT.model_copy(update={"optimizer": "sgd", "lr": 0.1})


@pytest.mark.parametrize("backend,kind", [("torch", Distillation.HARD), ("torch", Distillation.SOFT),
                                          pytest.param("jax", Distillation.SOFT, marks=pytest.mark.jax)])
def test_lambda_zero_is_plain_training(backend, kind, data):
    """A student without a distillation token, lam = 0: the same updates as plain cross-entropy training, to
    within the rounding of two fp32 programs (XLA fuses the distillation graph otherwise: issue 30, 2.2e-5 apart
    after 4 Adam steps on one CPU, 0 on another)."""
    from tolerances_fp import clipped_gradient_error, model_roundings, sgd_weight_bound

    be = _engine(backend)
    spec = get_spec("ViT-Nano/4")
    roundings = model_roundings(spec, RES, 16)
    bound = sgd_weight_bound(SGD, clipped_gradient_error(SGD, roundings))
    w0 = be.weights(be.init_model(spec, RES, 5, seed=0))
    plain, lp = be.train(be.load_weights(be.init_model(spec, RES, 5, 0), w0), data.train, RES, SGD, 16, seed=1)
    d = Distill(kind, 0.0, 2.0, _table_teacher(len(data.train), 5))
    dist, ld = be.train(be.load_weights(be.init_model(spec, RES, 5, 0), w0), data.train, RES, SGD, 16, seed=1,
                        distill=d)
    np.testing.assert_allclose(ld, lp, rtol=roundings * EPS32)  # a mean CE (~log 5): never near zero
    wp, wd = be.weights(plain), be.weights(dist)
    assert max(float(np.abs(wp[k] - wd[k]).max()) for k in wp) <= bound
    assert max(float(np.abs(wp[k] - w0[k]).max()) for k in wp) > 10 * bound  # moved: the bound resolves 10 %
    moved = be.train(be.load_weights(be.init_model(spec, RES, 5, 0), w0), data.train, RES, SGD, 16, seed=1,
                     distill=Distill(kind, 0.5, 2.0, d.teacher_logits))[0]
    assert max(float(np.abs(be.weights(moved)[k] - wp[k]).max()) for k in wp) > 10 * bound  # lam > 0 is not


@pytest.mark.jax
@pytest.mark.parametrize("kind", list(Distillation))
def test_distillation_matches_between_torch_and_jax_step_for_step(kind, data):
    """A distilled student (two heads), same weights, batches, schedule and teacher => the same run. SGD, as the
    lam = 0 equivalence: linear in the gradient, so the bound is the two programs' rounding
    (tests/tolerances_fp.py); Adam's own arithmetic across the frameworks is test_transfer_jax's
    test_adam_update_matches_torch_given_the_same_gradients (with this model: both heads, the distillation
    token)."""
    from tolerances_fp import clipped_gradient_error, model_roundings, sgd_weight_bound

    jx, th = _engine("jax"), _engine("torch")
    spec = get_spec("DeiT-Nano/4-dist")
    roundings = model_roundings(spec, RES, 16)
    bound = sgd_weight_bound(SGD, clipped_gradient_error(SGD, roundings))
    rng = np.random.default_rng(0)
    w = {k: (v + rng.normal(0, 0.02, v.shape).astype(np.float32) if k.startswith("head") else v)
         for k, v in th.weights(th.init_model(spec, RES, 5, seed=0)).items()}  # heads not zero: both heads learn
    d = Distill(kind, 0.5, 2.0, _table_teacher(len(data.train), 5))
    mt, lt = th.train(th.load_weights(th.init_model(spec, RES, 5, 0), w), data.train, RES, SGD, 16, 1, distill=d)
    mj, lj = jx.train(jx.load_weights(jx.init_model(spec, RES, 5, 0), w), data.train, RES, SGD, 16, 1, distill=d)
    # the first loss, from the same weights: the forward's rounding (half a CE ~log 5 at least: never near
    # zero); the later ones follow from the weights, compared next
    assert lj[0] == pytest.approx(lt[0], rel=roundings * EPS32)
    wt, wj = th.weights(mt), jx.weights(mj)
    assert max(float(np.abs(wt[k] - wj[k]).max()) for k in wt) <= bound
    for head in ("head.weight", "head_dist.weight"):
        assert float(np.abs(wt[head] - w[head]).max()) > 10 * bound  # both heads trained: the bound resolves 10 %


# ---- pre-training with a teacher --------------------------------------------------------------------------------
def _cfg(**kw) -> PretrainConfig:
    base = {"model": "DeiT-Nano/4-dist", "resolution": RES, "steps": 12, "warmup_steps": 2, "batch_size": 16}
    return PretrainConfig(**{**base, **kw})


@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=[pytest.mark.jax, pytest.mark.slow])])
def test_pretrain_with_a_teacher_counts_its_forward(tmp_path, backend):
    """The teacher is pre-trained first (cached), runs on the student's backend, and its forward per image seen
    is in the row's compute. (JAX: ~50 s of compiling on a loaded 2-core machine, hence slow; its training
    path is in the default suite through the two tests above.)"""
    _engine(backend)
    teacher_up = {"model": "R-Nano", "resolution": 32, "steps": 6, "warmup_steps": 1, "batch_size": 16,
                  "backend": backend}
    cfg = _cfg(backend=backend, teacher={"upstream": teacher_up, "distillation": "soft", "tau": 2.0})
    ckpt, rec = ensure_upstream(cfg, directory=tmp_path)
    m = rec.metrics
    images = 12 * 16
    student = 3 * 2 * analytic_counts(get_spec("DeiT-Nano/4-dist"), RES, 5).macs  # fwd + bwd, 2 FLOPs per MAC
    teacher = 2 * analytic_counts(get_spec("R-Nano"), 32, 5).macs  # forward only
    # exact: FLOP counts are integers (exact in float64 below 2**53) and the run divides them by 1e18 once, in the
    # same order as here
    assert m["exaflops"] == (student + teacher) * images / 1e18
    assert m["teacher_exaflops"] == teacher * images / 1e18
    assert m["student_exaflops"] == student * images / 1e18
    assert m["teacher_model"] == "R-Nano" and 0 <= m["teacher_agreement"] <= 1
    # the teacher was pre-trained through the cache first and is reused from there
    t_ckpt, t_rec = ensure_upstream(cfg.teacher.upstream, directory=tmp_path)
    # a stored number read back: exact
    assert t_rec is None and m["teacher_pretrain_exaflops"] == t_ckpt.meta["metrics"]["exaflops"]
    assert len(list(tmp_path.glob("*.safetensors"))) == 2
    assert ckpt.meta["config"]["teacher"]["distillation"] == "soft"


def test_teacher_is_part_of_the_checkpoint_key(tmp_path):
    up = {"model": "R-Nano", "resolution": 32, "steps": 10, "warmup_steps": 2}
    plain = _cfg()
    assert "teacher" not in plain.key_data()  # a config without a teacher hashes as it did before teachers
    keys = {plain.key(), _cfg(teacher={"upstream": up}).key(),
            _cfg(teacher={"upstream": up, "distillation": "soft"}).key(),
            _cfg(teacher={"upstream": up, "lam": 0.25}).key(),
            _cfg(teacher={"upstream": {**up, "steps": 20}}).key()}
    assert len(keys) == 5
    # tau means nothing to hard distillation: the same student
    assert _cfg(teacher={"upstream": up, "tau": 4.0}).key() == _cfg(teacher={"upstream": up}).key()
    f = tmp_path / "t.safetensors"
    f.write_bytes(b"one")
    a = _cfg(teacher={"checkpoint": str(f)}).key()
    f.write_bytes(b"two")
    assert _cfg(teacher={"checkpoint": str(f)}).key() != a  # the file's content, not its name


def test_bad_teacher_settings_are_config_errors(tmp_path):
    from vitbench.transfer.config import validated

    base = {"model": "DeiT-Nano/4-dist", "resolution": RES}
    for teacher, words in [
        ({}, "exactly one of teacher.upstream"),
        ({"checkpoint": str(tmp_path / "none.safetensors")}, "does not exist"),
        ({"upstream": {"model": "R-Nano"}, "distillation": "warm"}, "teacher.distillation"),
        ({"upstream": {"model": "R-Nano"}, "lam": 1.5}, "teacher.lam"),
        ({"upstream": {"model": "R-Nano", "data": {"classes": "5-9"}}}, "student's upstream data"),
    ]:
        with pytest.raises(ConfigError, match=words):
            validated(PretrainConfig, {**base, "teacher": teacher}, "pretrain")


def test_a_teacher_from_its_file_teaches_as_the_pre_trained_one(tmp_path):
    """The same teacher weights given as a checkpoint file: the same student, bit for bit."""
    up = {"model": "R-Nano", "resolution": 32, "steps": 4, "warmup_steps": 1, "batch_size": 16}
    a, rec = ensure_upstream(_cfg(teacher={"upstream": up, "distillation": "soft", "tau": 2.0}),
                             directory=tmp_path)
    t_ckpt, _ = ensure_upstream(PretrainConfig(**up), directory=tmp_path)
    b, rec_b = ensure_upstream(_cfg(teacher={"checkpoint": str(t_ckpt.path), "distillation": "soft", "tau": 2.0}),
                               directory=tmp_path / "other")
    assert a.path != b.path
    for k, v in a.weights.items():
        np.testing.assert_array_equal(b.weights[k], v)
    assert rec_b.metrics["exaflops"] == rec.metrics["exaflops"]
    assert rec_b.metrics["teacher_pretrain_exaflops"] == t_ckpt.meta["metrics"]["exaflops"]  # read back: exact


def test_a_teacher_for_other_classes_is_refused(tmp_path):
    other = PretrainConfig(model="R-Nano", resolution=32, steps=2, warmup_steps=0, batch_size=8,
                           data={"classes": "0-3"})
    ckpt, _ = ensure_upstream(other, directory=tmp_path)
    with pytest.raises(ConfigError, match="4 classes"):
        ensure_upstream(_cfg(teacher={"checkpoint": str(ckpt.path)}), directory=tmp_path)
    assert len(list(tmp_path.glob("DeiT*.safetensors"))) == 0  # nothing half-written


# ---- studies ----------------------------------------------------------------------------------------------------
STUDY = """
name: distill-test
calibration: false
defaults:
  model: DeiT-Nano/4-dist
  task: pretrain
  pretrain_resolution: 16
axes:
  teacher: [null, R-Nano]
"""


def test_study_fields_without_a_teacher_leave_the_trial_config():
    from vitbench.study import parse_study
    from vitbench.tasks.upstream import TEACHER_FIELDS

    trials = parse_study(STUDY, "s.yaml").trials
    plain, distilled = sorted(trials, key=lambda t: "teacher" in t.config)
    assert not set(TEACHER_FIELDS) & set(plain.config)  # so trials without a teacher keep their keys
    assert distilled.config["teacher"] == "R-Nano" and "distill_tau" not in distilled.config  # hard: no tau
    # distillation settings without a teacher mean nothing: from `defaults`, the same trial as none at all;
    # anywhere else refused, as every field that does not apply (session 31: `pretrain --distill-tau 3` without
    # a teacher ran, and dropped it)
    same = parse_study(STUDY.replace("[null, R-Nano]", "[null]").replace("defaults:\n", "defaults:\n  "
                                                                         "distill_lambda: 0.1\n"), "s.yaml").trials
    assert {t.key for t in same} == {plain.key}
    with pytest.raises(ConfigError, match=r"axes.distill_lambda\[0\]: for task 'pretrain': distill_lambda applies "
                       r"only with teacher set \(a model, or a teacher checkpoint\) \(here teacher None\)"):
        parse_study(STUDY.replace("[null, R-Nano]", "[null]") + "  distill_lambda: [0.1, 0.9]\n", "s.yaml")


@pytest.mark.parametrize("args, says", [
    (("--distill-tau", "3"), "--distill-tau applies only with --teacher set"),
    (("--teacher-steps", "3"), "--teacher-steps applies only with --teacher set"),
    (("--teacher", "R-Nano", "--distill-tau", "3"), "--distill-tau applies only with --distillation soft"),
    (("--mask-rate", "0.3"), "--mask-rate applies only with --objective masked_patch (here --objective "
                             "supervised)"),
    (("--objective", "none", "--mask-target", "pixels_l2"), "--mask-target applies only with --objective"),
])
def test_pretrain_options_that_do_not_apply_are_refused(cli, args, says):
    """`pretrain --distill-tau 3` without a teacher, or `--mask-rate 0.3` of a supervised upstream, ran and
    dropped the option from the trial (session 30's Left list): refused, exit 2, before any training."""
    r = cli("pretrain", "ViT-Nano/4", "--steps", "2", "-r", "8", *args)
    assert r.exit_code == 2 and says in r.output, r.output


def test_study_with_an_unknown_teacher_fails_when_parsed():
    from vitbench.study import parse_study

    with pytest.raises(ConfigError, match="R-Nan.*R-Nano"):
        parse_study(STUDY.replace("R-Nano]", "R-Nan]"), "s.yaml")


def test_study_teacher_checkpoint_without_a_teacher_is_never_dropped(cli, tmp_path, monkeypatch):
    """A study's teacher_checkpoint without a teacher: a vitbench checkpoint's model is the teacher (the same
    trial as naming it); any other file exits 2 naming the file and the fields (before, the checkpoint was
    dropped and the student trained without a teacher)."""
    from vitbench.study import parse_study

    t_ckpt, _ = ensure_upstream(PretrainConfig(model="R-Nano", resolution=32, steps=2, warmup_steps=0,
                                               batch_size=8), directory=tmp_path)
    body = STUDY.replace("  teacher: [null, R-Nano]\n", "  seed: [0]\n")
    (trial,) = parse_study(body + f"  teacher_checkpoint: ['{t_ckpt.path}']\n", "s.yaml").trials
    assert trial.config["teacher"] == "R-Nano" and trial.config["teacher_checkpoint"] == str(t_ckpt.path)
    (named,) = parse_study(body + f"  teacher_checkpoint: ['{t_ckpt.path}']\n  teacher: [R-Nano]\n",
                           "s.yaml").trials
    assert named.key == trial.key
    odd = tmp_path / "odd.safetensors"
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(2, np.float32)}, str(odd))  # weights that do not say their model
    study = tmp_path / "s.yaml"
    study.write_text(body + f"  teacher_checkpoint: ['{odd}']\n")
    r = cli("sweep", str(study), "--dry-run")
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"teacher_checkpoint {odd}" in out and "name it with teacher NAME" in out, out


def test_shipped_distillation_study_compares_teachers_at_equal_student_compute():
    from vitbench.study import load_study

    study = load_study("studies/distill-digits.yaml")
    students = [t.config for t in study.trials
                if t.task == "pretrain" and t.config["model"] == "DeiT-Micro/4-dist"]
    arms = {(c.get("teacher"), c.get("distillation")) for c in students}
    assert {(None, None), ("R-Nano", "hard"), ("R-Nano", "soft")} <= arms
    assert any(get_spec(t).family == "vit" for t, _ in arms if t)  # a transformer teacher too
    budgets = {(c["pretrain_steps"], c["pretrain_batch_size"], c["pretrain_resolution"]) for c in students}
    assert len(budgets) == 1  # equal student compute
    assert len({c["seed"] for c in students}) >= 3  # a spread over seeds
    assert {"fewshot", "finetune", "infer"} <= {t.task for t in study.trials}
    assert all(t.config["threads"] == 1 for t in study.trials)


def test_transfer_start_of_a_distilled_model_drops_both_heads():
    """The paper's fine-tuning swap removes the whole head: a DeiT's distillation head too (zero-initialised
    like the class head), also for another number of classes."""
    from vitbench.transfer import ops

    be = _engine("torch")
    spec = get_spec("DeiT-Nano/4-dist")
    rng = np.random.default_rng(0)
    up = {k: rng.normal(0, 0.1, v.shape).astype(np.float32)
          for k, v in be.weights(be.init_model(spec, RES, 5, seed=0)).items()}
    for k in (3, 5):
        w = be.weights(ops.from_weights(be, spec, up, RES, k, seed=1))
        for head in ("head.weight", "head.bias", "head_dist.weight", "head_dist.bias"):
            assert w[head].shape[0] == k and not w[head].any()
        np.testing.assert_array_equal(w["dist_token"], up["dist_token"])  # the body, its token included, kept


# ---- report -----------------------------------------------------------------------------------------------------
def _store_with_distilled_rows(path, with_speed: bool = True) -> dict:
    """Fine-tuning rows of a plain and a distilled upstream of one model over 3 seeds (known accuracies), and
    inference speed rows; returns the accuracies per arm."""
    from records import record

    from vitbench.store import Store
    from vitbench.study import trial_key

    acc = {None: [0.80, 0.84, 0.88], "R-Nano": [0.70, 0.75, 0.95]}
    with Store(path) as st:
        for teacher, values in acc.items():
            for seed, a in enumerate(values):
                cfg = {"model": "DeiT-Nano/4-dist", "backend": "torch", "task": "finetune", "device": "cpu",
                       "resolution": 16, "seed": seed, "pretrain_steps": 100,
                       **({"teacher": teacher, "distillation": "hard", "distill_lambda": 0.5} if teacher else {})}
                st.append(record("finetune", cfg, metrics={"accuracy": a, "pretrain_exaflops": 1e-7},
                                 key=trial_key(cfg), study="d", run_id="r", trial=cfg))
        if with_speed:
            cfg = {"model": "DeiT-Nano/4-dist", "backend": "torch", "task": "infer", "device": "cpu",
                   "resolution": 16, "batch_size": 64, "precision": "fp32", "compile": False}
            st.append(record("bench", cfg, metrics={"img_per_s": 1000.0}, key=trial_key(cfg), study="d",
                             run_id="r", trial=cfg))
    return acc


def test_report_keeps_distilled_rows_apart_with_their_spread(tmp_path):
    from vitbench.report import build_report

    acc = _store_with_distilled_rows(tmp_path / "res")
    rep = build_report(tmp_path / "res", tmp_path / "out", formats=("csv",))
    table = rep.tables["distillation"]
    assert len(table) == 2
    for teacher, values in acc.items():
        row = table[table["teacher"].isna()] if teacher is None else table[table["teacher"] == teacher]
        assert int(row["seeds"].iloc[0]) == 3
        # the store reads the same doubles back; pandas and numpy sum 3 of them and divide (3 roundings each)
        assert row["accuracy_mean"].iloc[0] == f64(np.mean(values), roundings=3)
        assert row["accuracy_std"].iloc[0] == f64_std(values)
        assert (row["accuracy_min"].iloc[0], row["accuracy_max"].iloc[0]) == (min(values), max(values))
    gain = table[table["teacher"] == "R-Nano"]  # seed by seed against the plain upstream: -0.10, -0.09, +0.07
    # 3 differences (1 rounding each, at the accuracies' size: they cancel), their sum (2) and / 3 (1)
    assert gain["gain_vs_no_teacher"].iloc[0] == f64(np.mean(np.subtract(acc["R-Nano"], acc[None])), roundings=4,
                                                     scale=max(acc["R-Nano"] + acc[None]))
    assert gain["gain_wins"].iloc[0] == "1/3"
    assert len(rep.tables["accuracy"]) == 2  # not merged into one median
    assert {"distilled_accuracy_vs_throughput", "accuracy_vs_compute"} <= set(rep.figures)


def test_report_without_teachers_or_speed_has_no_distillation_parts(tmp_path):
    from vitbench.report import build_report

    _store_with_distilled_rows(tmp_path / "res", with_speed=False)
    rep = build_report(tmp_path / "res", tmp_path / "out", formats=("csv",))
    assert "distilled_accuracy_vs_throughput" not in rep.figures  # no speed measured: nothing to place
    from records import record

    from vitbench.store import Store

    with Store(tmp_path / "plain") as st:
        cfg = {"model": "ViT-Nano/4", "task": "finetune", "backend": "torch", "seed": 0}
        st.append(record("finetune", cfg, metrics={"accuracy": 0.5, "pretrain_exaflops": 1e-7}, key="a",
                         study="p", run_id="r", trial=cfg))
    rep = build_report(tmp_path / "plain", tmp_path / "out2", formats=("csv",))
    assert rep.tables["distillation"].empty and "distilled_accuracy_vs_throughput" not in rep.figures


# ---- a timm teacher from its file -----------------------------------------------------------------------------
TIMM_RESOLUTION = 160  # timm's native size for test_resnet, which a CNN's state dict does not state


@pytest.fixture(scope="module")
def timm_teacher(tmp_path_factory, data):
    """A timm model's state dict on disk (timm's tiny test_resnet, 5 classes: the student's upstream), with
    weights only this file has, the timm model itself, and its own logits and labels of the test images at
    TIMM_RESOLUTION (computed once for the tests below; nothing writes to the file or the model)."""
    import timm
    import torch
    from safetensors.torch import save_file

    from vitbench.transfer import ops

    torch.manual_seed(3)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=5)
    with torch.no_grad():
        model.fc.weight.normal_()
    path = tmp_path_factory.mktemp("timm-teacher") / "teacher.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    model.eval()
    with torch.inference_mode():
        logits, labels = ops.outputs(lambda x: model(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()).numpy(),
                                     data.test, TIMM_RESOLUTION)
    return path, logits, labels


def test_a_timm_teacher_from_its_file_gives_the_timm_models_logits(timm_teacher, data):
    """The teacher read from a timm state dict named by its model (as --checkpoint FILE --model timm:NAME) gives
    the logits of timm's model loaded from the file, bit for bit (the same model, weights and images)."""
    from vitbench.protocols.pretrain import TeacherConfig
    from vitbench.protocols.teacher import load_teacher
    from vitbench.transfer import ops

    path, want, _ = timm_teacher
    be = _engine("torch")
    teacher = load_teacher(TeacherConfig(checkpoint=str(path), model="timm:test_resnet"), be,
                           data.train.class_names)
    assert teacher.spec.name == "timm:test_resnet" and teacher.num_classes == 5
    assert teacher.resolution == TIMM_RESOLUTION  # a CNN's file says no size: timm's native one
    got = ops.predict_all(be, teacher.model, data.test, teacher.resolution, "the teacher")
    assert got.shape == (len(data.test), 5) and np.array_equal(got, want)


def test_a_timm_teacher_on_the_command_line(cli, timm_teacher, tmp_path, monkeypatch):
    """`--teacher timm:NAME --teacher-checkpoint FILE` distils from the file; without --teacher (a timm state
    dict does not say its model) or with another model: exit 2 naming the way out, nothing trained."""
    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path / "cache"))
    path, logits, labels = timm_teacher  # the timm model's own logits of the test images (classes 0-4)
    student = ("pretrain", "ViT-Nano/4", "-r", "16", "--steps", "2", "-b", "8", "--threads", "1")
    r = cli(*student, "--teacher", "timm:test_resnet", "--teacher-checkpoint", str(path), "--json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["metrics"]
    assert m["teacher_model"] == "timm:test_resnet" and m["teacher_resolution"] == TIMM_RESOLUTION
    # the teacher's test accuracy is the timm model's own
    assert m["teacher_accuracy"] == float(np.mean(logits.argmax(1) == labels))
    for extra, says in ((("--teacher-checkpoint", str(path)), "--teacher timm:NAME"),
                        (("--teacher", "timm:test_convnext", "--teacher-checkpoint", str(path)),
                         "do not fit timm:test_convnext")):
        r = cli(*student, *extra)
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "Traceback" not in r.output and says in out, out
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 1  # the refused runs wrote nothing


def test_a_vitbench_teacher_file_names_its_own_model(cli, tmp_path, monkeypatch):
    """`--teacher-checkpoint FILE` without --teacher: a vitbench checkpoint's model comes from its header (before,
    the file was ignored and the student trained without a teacher)."""
    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path / "cache"))
    t_ckpt, _ = ensure_upstream(PretrainConfig(model="R-Nano", resolution=32, steps=2, warmup_steps=0,
                                               batch_size=8), directory=tmp_path)
    r = cli("pretrain", "ViT-Nano/4", "-r", "16", "--steps", "2", "-b", "8", "--threads", "1",
            "--teacher-checkpoint", str(t_ckpt.path), "--json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["metrics"]
    assert m["teacher_model"] == "R-Nano" and m["teacher_resolution"] == 32


def test_the_distillation_table_lists_an_upstream_before_its_transfers_in_the_tasks_order():
    """Rows of every kind, given in reverse: the table orders kinds as the tasks are registered (pretrain, then
    fewshot, then finetune), read from the registry rather than a list of kind names in the report."""
    import pandas as pd

    from vitbench.report.tables import distillation
    from vitbench.tasks import kind_metrics

    kinds = [k for k in kind_metrics() if k in ("pretrain", "fewshot", "finetune")]
    df = pd.DataFrame({"model": "m", "teacher": "t", "kind": kinds[::-1], "accuracy": [0.5, 0.6, 0.7],
                       "seed": 0})
    assert list(distillation(df)["kind"]) == kinds == ["pretrain", "fewshot", "finetune"]
