"""Architecture overrides wherever a model is named: study fields folded into the model's name, `--set` on the
commands, checkpoints refused when their architecture is not the requested one; the named rows' keys unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from vitbench.errors import ConfigError
from vitbench.study import load_study, parse_study

REPO = Path(__file__).resolve().parents[1]
MAIN_KEYS = json.loads((REPO / "tests" / "data" / "study_keys_main.json").read_text())


@pytest.mark.parametrize("name", sorted(MAIN_KEYS["studies"]))
def test_named_rows_keep_their_trial_keys(name):
    """The shipped studies (named rows only) expand to exactly the trial keys main's code gave before overrides
    existed (tests/data/study_keys_main.json, computed on main)."""
    want = MAIN_KEYS["studies"][name]
    keys = sorted(t.key for t in load_study(REPO / "studies" / f"{name}.yaml", check_paths=False).trials)
    assert len(keys) == want["trials"]
    if "keys" in want:
        assert keys == want["keys"]
    assert hashlib.sha256("\n".join(keys).encode()).hexdigest() == want["sha256_of_sorted_keys"]


def _study(body: str, tmp_path: Path):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ndefaults: {threads: 1}\n" + body)
    return parse_study(p.read_text(), str(p), p)


def test_architecture_fields_fold_into_the_model_name(tmp_path):
    st = _study("axes:\n  task: [flops]\n  model: [ViT-Nano/4]\n  depth: [null, 2, 3]\n  posemb: [learned, none]\n"
                "include:\n  - {model: R-Nano, depth: null, posemb: null, blocks: [1x1x1x1, 2x1x1x1]}\n", tmp_path)
    models = [t.config["model"] for t in st.trials]
    # depth 2 is ViT-Nano/4's own: one trial with the row (null, 2 merged); the row's name keeps the row's key
    assert models == ["ViT-Nano/4", "ViT-Nano/4[posemb=none]", "ViT-Nano/4[depth=3]",
                      "ViT-Nano/4[depth=3,posemb=none]", "R-Nano", "R-Nano[blocks=2x1x1x1]"]
    assert all(k not in t.config for t in st.trials for k in ("depth", "posemb", "blocks"))
    plain = _study("axes:\n  task: [flops]\n  model: [ViT-Nano/4, 'ViT-Nano/4[posemb=none, depth=3]']\n", tmp_path)
    keys = {t.config["model"]: t.key for t in st.trials}
    assert {t.config["model"]: t.key for t in plain.trials} == {m: keys[m] for m in
                                                               ("ViT-Nano/4", "ViT-Nano/4[depth=3,posemb=none]")}


def test_architecture_fields_in_zip_exclude_and_defaults(tmp_path):
    st = _study("axes:\n  task: [flops]\n  model: [ViT-Nano/4]\n  posemb: [learned, none, sincos2d]\n"
                "  posemb_at: [input, every_layer_shared]\n"
                "zip:\n  - {width: [32, 48], heads: [2, 3]}\n"
                "exclude:\n  - {posemb: none, posemb_at: every_layer_shared}\n", tmp_path)
    assert len(st.trials) == 2 * 5
    assert "ViT-Nano/4[width=48,heads=3,posemb=sincos2d,posemb_at=every_layer_shared]" in \
        {t.config["model"] for t in st.trials}
    p = tmp_path / "d.yaml"
    p.write_text("name: d\ndefaults: {depth: 3, classifier: gap}\naxes:\n  task: [flops]\n"
                 "  model: [ViT-Nano/4, ViT-Micro/4]\n")
    assert [t.config["model"] for t in load_study(p).trials] == ["ViT-Nano/4[depth=3,classifier=gap]",
                                                                  "ViT-Micro/4[depth=3,classifier=gap]"]


@pytest.mark.parametrize("body, where, words", [
    ("axes:\n  task: [flops]\n  model: [ViT-Nano/4]\n  depth: [2, zero]\n", ":6: axes.depth[1]:",
     ["integer from 1 to"]),
    ("axes:\n  task: [flops]\n  model: [ViT-Nano/4]\n  heads: [3]\n", ":6: axes.heads[0]:",
     ["must divide width=32", "allowed heads: 1, 2, 4"]),
    ("axes:\n  task: [flops]\n  model: [ViT-Nano/4]\n  posemb: [abs]\n", ":6: axes.posemb[0]:",
     ["allowed: learned, none, learned_2d, sincos2d, relative"]),
    ("axes:\n  task: [flops]\n  model: [R-Nano]\n  patch: [2]\n", ":6: axes.patch[0]:",
     ["does not apply to a bit model", "allowed: width_factor, blocks"]),
    ("axes:\n  task: [flops]\n  model: [ViT-Nano/4]\n  patch: [3]\n", ":6: axes.patch[0]:",
     ["does not divide the native resolution"]),
    ("axes:\n  task: [flops]\n  model: [ViT-Nano/4]\n  posemb: [none]\n  posemb_at: [every_layer]\n",
     "axes.posemb", ["allowed: posemb_at=input"]),
    ("axes:\n  task: [flops]\n  model: [ViT-Nano/4]\n  dpeth: [3]\n", ":6: axes.dpeth:", ["Did you mean depth"]),
])
def test_bad_architecture_fields_name_file_line_field_and_allowed_values(tmp_path, body, where, words):
    with pytest.raises(ConfigError) as e:
        _study(body, tmp_path)
    msg = str(e.value)
    assert where in msg and all(w in msg for w in words), msg


# ---- the command line ------------------------------------------------------------------------------------------
def test_set_on_flops_names_the_variant(cli):
    r = cli("flops", "ViT-Nano/4", "--set", "depth=3", "--set", "posemb=none", "--no-count", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["model"] == "ViT-Nano/4[depth=3,posemb=none]"
    r = cli("flops", "ViT-Nano/4", "--set", "depth=3", "--no-count")
    assert r.exit_code == 0 and "ViT-Nano/4[depth=3]" in r.stdout  # not eaten as console markup


@pytest.mark.parametrize("cmd", [("flops", "ViT-Nano/4"), ("bench", "ViT-Nano/4"), ("max-batch", "ViT-Nano/4"),
                                 ("pretrain", "ViT-Nano/4"), ("fewshot", "--model", "ViT-Nano/4"),
                                 ("finetune", "--model", "ViT-Nano/4"), ("inspect", "ViT-Nano/4")])
@pytest.mark.parametrize("sets, words", [
    (["heads=3"], ["--set heads=3", "must divide width=32", "allowed heads"]),
    (["depht=3"], ["--set depht=3", "unknown architecture field", "allowed for vit: depth"]),
    (["posemb=abs"], ["--set posemb=abs", "allowed: learned, none"]),
    (["depth"], ["--set 'depth'", "KEY=VALUE"]),
])
def test_bad_set_exits_2_naming_the_option_on_every_command(cli, cmd, sets, words):
    r = cli(*cmd, *[a for s in sets for a in ("--set", s)])
    assert r.exit_code == 2, r.output
    assert all(w in r.stderr for w in words), r.stderr
    assert "Traceback" not in r.output


def test_set_on_a_resnet_takes_its_own_fields(cli):
    r = cli("flops", "R-Nano", "--set", "blocks=1x1x1", "--set", "width_factor=2", "--no-count", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["model"] == "R-Nano[width_factor=2,blocks=1x1x1]"
    r = cli("flops", "R-Nano", "--set", "depth=3", "--no-count")
    assert r.exit_code == 2 and "allowed: width_factor, blocks" in r.stderr


# ---- checkpoints -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def depth3_checkpoint(tmp_path_factory):
    """A vitbench checkpoint of ViT-Nano/4[depth=3] (random weights: what matters is its stored architecture)."""
    from vitbench.backends.base import get_backend
    from vitbench.models.specs import get_spec
    from vitbench.transfer.checkpoint import save_checkpoint

    spec = get_spec("ViT-Nano/4[depth=3]")
    be = get_backend("torch")
    be.setup("cpu", 1)
    weights = be.weights(be.init_model(spec, 16, 5, 0))
    meta = {"model": spec.name, "spec": spec.with_classes(5).to_dict(), "resolution": 16, "num_classes": 5,
            "backend": "torch", "config": None, "metrics": {}}
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano-depth3.safetensors", weights, meta)


def test_a_checkpoint_of_another_architecture_is_refused_in_a_study(tmp_path, depth3_checkpoint):
    body = f"axes:\n  task: [fewshot]\n  model: [ViT-Nano/4]\n  checkpoint: ['{depth3_checkpoint}']\n"
    with pytest.raises(ConfigError) as e:
        _study(body, tmp_path)
    assert "not the requested ViT-Nano/4" in str(e.value) and "depth: checkpoint 3, requested 2" in str(e.value)
    st = _study(body + "  depth: [3]\n", tmp_path)  # the checkpoint's own architecture: accepted
    assert st.trials[0].config["model"] == "ViT-Nano/4[depth=3]"


@pytest.mark.parametrize("cmd", [("fewshot", "--checkpoint"), ("finetune", "--checkpoint"), ("inspect",)])
def test_set_beside_a_checkpoint_must_be_its_architecture(cli, cmd, depth3_checkpoint):
    r = cli(*cmd, depth3_checkpoint, "--set", "depth=2", "--set", "posemb=none")
    assert r.exit_code == 2, r.output
    assert "--set depth=2 --set posemb=none" in r.stderr and "depth: checkpoint 3, requested 2" in r.stderr
    assert "posemb: checkpoint learned, requested none" in r.stderr.replace("\n", " ")


@pytest.mark.parametrize("sets, absent, present", [
    (["posemb=none"], {"posemb_similarity": "no position embeddings"}, "rollout"),
    (["posemb=relative"], {"posemb_similarity": "no absolute position embeddings"}, "rollout"),
    (["classifier=gap"], {"rollout": "no class token"}, "posemb_similarity"),
    (["posemb=learned_2d", "posemb_at=every_layer"], {}, "posemb_similarity"),
    (["posemb=sincos2d"], {}, "posemb_similarity"),
])
def test_inspection_says_what_does_not_apply(cli, sets, absent, present):
    r = cli("inspect", "ViT-Nano/4", "-r", "16", "-n", "2", "--rollout", "1", "--threads", "1", "--json",
            *[a for s in sets for a in ("--set", s)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["not_applicable"].keys() == absent.keys()
    assert all(w in doc["not_applicable"][k] for k, w in absent.items())
    assert doc[present] not in (None, [])
    assert ("posemb_adjacent_cos_sim" in doc["headline"]) == ("posemb_similarity" not in absent)


# ---- transfer of every variant ----------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["ViT-Nano/4[classifier=gap]", "ViT-Nano/4[rep_size=16,posemb=learned_2d]",
                                   "ViT-Nano/4[posemb=none]", "ViT-Nano/4[posemb=relative]",
                                   "ViT-Nano/4[posemb=sincos2d,posemb_at=every_layer_shared]",
                                   "ViT-Nano/4[depth=1,posemb_at=every_layer]",
                                   "R-Nano+ViT-Micro/8[classifier=gap,blocks=1]"])
def test_every_variant_pretrains_and_transfers(cli, tmp_path, monkeypatch, model):
    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path))
    # a relative-attention table does not carry to another grid (refused): it transfers at its native 32 px
    res = "32" if model.startswith("R-") or "relative" in model else "16"
    common = ("--pretrain-steps", "3", "--pretrain-warmup-steps", "1", "--threads", "1", "-r", res, "--json")
    r = cli("fewshot", "-m", model, "--shots", "2", "--seeds", "1", *common)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["model"] == model
    r = cli("finetune", "-m", model, "--steps", "2", "--warmup-steps", "1", "--seeds", "1", "--lr-grid", "0.01",
            *common)
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["config"]["model"] == model and 0 <= rec["metrics"]["accuracy"] <= 1


def test_a_gap_student_distils_from_a_teacher(cli, tmp_path, monkeypatch):
    """No class or distillation token: the teacher supervises the pooled head."""
    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path))
    r = cli("pretrain", "ViT-Nano/4", "--set", "classifier=gap", "-r", "16", "--steps", "2", "--warmup-steps", "1",
            "--teacher", "R-Nano", "--teacher-steps", "2", "--teacher-resolution", "32", "--threads", "1",
            "--json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["metrics"]
    assert m["teacher_exaflops"] > 0 and 0 <= m["teacher_agreement"] <= 1


def test_fine_tuning_drops_the_tanh_pre_logits_layer(tmp_path):
    """ViT Sec. 3.1: the whole pre-training head goes; fine-tuning attaches one zero-initialised D x K layer."""
    from vitbench.backends.base import get_backend
    from vitbench.models.specs import get_spec
    from vitbench.protocols import finetune as ft
    from vitbench.transfer import ops

    spec = get_spec("ViT-Nano/4[rep_size=16]")
    be = get_backend("torch")
    be.setup("cpu", 1)
    w = be.weights(be.init_model(spec, 16, 5, 0))
    assert any(k.startswith(ft.PRE_LOGITS) for k in w)
    body = {k: v for k, v in w.items() if not k.startswith(ft.PRE_LOGITS)}
    model = ops.from_weights(be, spec.with_overrides(rep_size=0), body, 16, 3, 0)
    fresh = be.weights(model)
    assert not any(k.startswith(ft.PRE_LOGITS) for k in fresh) and fresh["head.weight"].shape == (3, 32)


def test_python_api_takes_a_derived_model():
    from vitbench.measure.flops import flops
    from vitbench.models.specs import get_spec

    spec = get_spec("ViT-Nano/4").with_overrides(depth=3, classifier="gap")
    by_spec, by_name = flops(spec, 16, count=False), flops("ViT-Nano/4[classifier=gap,depth=3]", 16, count=False)
    assert by_spec.config["model"] == by_name.config["model"] == "ViT-Nano/4[depth=3,classifier=gap]"
    assert by_spec.metrics == by_name.metrics
    assert by_spec.metrics["params_m"] != flops("ViT-Nano/4", 16, count=False).metrics["params_m"]
