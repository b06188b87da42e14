"""Transfer tasks in studies (registry, cache, store, report table) and the CLI commands."""

from __future__ import annotations

import json

import pytest
from records import job
from typer.testing import CliRunner

from vitbench.cli import app
from vitbench.errors import ConfigError
from vitbench.models.specs import get_spec
from vitbench.study import load_study, parse_study
from vitbench.tasks import tasks
from vitbench.trial import run_trial
from tolerances_stat import gamma

STUDY = """
name: transfer-test
calibration: false
defaults:
  pretrain_steps: 40
  pretrain_warmup_steps: 4
  pretrain_batch_size: 32
  pretrain_lr: 0.003
  pretrain_resolution: 16
  resolution: 16
  fewshot_seeds: 2
  finetune_steps: 20
  finetune_warmup_steps: 2
  lr_grid: "0.1"
  batch_size: 32
axes:
  model: [ViT-Nano/4]
  task: [pretrain, fewshot, finetune]
  shots: [1, 5]
"""


pytestmark = pytest.mark.usefixtures("one_torch_thread")

def test_tasks_are_registered_with_their_kinds():
    t = tasks()
    assert {t[n].kind for n in ("pretrain", "fewshot", "finetune")} == {"pretrain", "fewshot", "finetune"}
    assert "shots" in t["fewshot"].fields() and "lr_grid" in t["finetune"].fields()
    assert "resolution" not in t["pretrain"].fields()  # the upstream resolution is pretrain_resolution


def test_study_trials_share_one_upstream_and_feed_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    study = parse_study(STUDY, "test.yaml")
    assert [t.task for t in study.trials] == ["pretrain", "fewshot", "fewshot", "finetune"]  # shots: fewshot only
    recs = [run_trial(job(t.config, t.key, study.name)) for t in study.trials]
    assert [r.status for r in recs] == ["ok"] * 4, [r.error for r in recs]
    pre, fs1, fs5, ft = recs
    assert pre.kind == "pretrain" and pre.metrics["cached"] is False
    assert len(list((tmp_path / "ckpt").glob("*.safetensors"))) == 1  # trained once, reused three times
    for r in (fs1, fs5, ft):
        assert r.metrics["pretrain_exaflops"] == pre.metrics["exaflops"]  # the stored number, carried: exact
        assert r.metrics["images_seen"] == 40 * 32
    assert fs5.metrics["accuracy"] > fs1.metrics["accuracy"] > 0.2  # 5 classes
    assert ft.metrics["accuracy"] > ft.metrics["initial_accuracy"]
    again = run_trial(job(study.trials[0].config))  # the pretrain task, now cached
    assert again.metrics["cached"] is True and again.metrics["exaflops"] == pre.metrics["exaflops"]

    from vitbench.report import tables
    from vitbench.store import Store
    from vitbench.tidy import load

    # a second pre-training budget: its own upstream, its own report rows (not merged with the first)
    longer = {**study.trials[-1].config, "pretrain_steps": 60}
    ft60 = run_trial(job(longer, "ft60", study.name))
    assert ft60.status == "ok" and len(list((tmp_path / "ckpt").glob("*.safetensors"))) == 2
    # flops x images (integers, exact) / 1e18 round once on each side, x 1.5 once more
    assert ft60.metrics["pretrain_exaflops"] == pytest.approx(1.5 * pre.metrics["exaflops"], rel=gamma(3))
    with Store(tmp_path / "store") as store:
        for r in [*recs, ft60]:
            store.append(r)
    acc = tables.accuracy(tables.ok_rows(load(tmp_path / "store"), ("fewshot", "finetune")))
    assert sorted(acc["kind"]) == ["fewshot", "fewshot", "finetune", "finetune"]
    assert acc["pretrain_exaflops"].notna().all() and acc["accuracy"].between(0, 1).all()
    assert sorted(acc[acc["kind"] == "finetune"]["pretrain_steps"]) == [40, 60]


def test_bad_task_parameters_are_config_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path))
    base = parse_study(STUDY, "test.yaml").trials[-1].config
    rec = run_trial(job({**base, "lr_grid": "fast"}, "x"))
    assert rec.status == "error" and "lr_grid 'fast'" in rec.error.message
    rec = run_trial(job({**base, "classes": "5-12"}, "y"))
    assert rec.status == "error" and "out of range" in rec.error.message
    assert not list(tmp_path.glob("*.safetensors"))  # nothing pre-trained for a trial that cannot run


def test_shipped_transfer_study_covers_the_families():
    study = load_study("studies/transfer-digits.yaml")
    fams = {}
    for t in study.trials:
        fams.setdefault(get_spec(t.config["model"]).family, set()).add(t.config["model"])
    assert len(fams["vit"]) >= 3 and len(fams["bit"]) >= 2 and len(fams["hybrid"]) >= 1
    assert {t.task for t in study.trials} == {"pretrain", "fewshot", "finetune", "inspect", "infer"}
    budgets = {}
    for t in study.trials:
        if t.task == "finetune":
            budgets.setdefault(get_spec(t.config["model"]).family, set()).add(t.config["pretrain_steps"])
    assert all(len(b) >= 4 for b in budgets.values()) and len(budgets) == 3  # enough budgets to fit each family


def test_cli_pretrain_fewshot_finetune(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path / "cache"))  # never the repo's results/
    runner = CliRunner()
    ckpt = tmp_path / "up.safetensors"
    r = runner.invoke(app, ["pretrain", "ViT-Nano/4", "-r", "16", "--steps", "20", "--warmup-steps", "2",
                            "-b", "16", "--out", str(ckpt), "--json"])
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)
    assert rec["kind"] == "pretrain" and rec["metrics"]["images_seen"] == 320 and ckpt.is_file()
    r = runner.invoke(app, ["fewshot", "-c", str(ckpt), "--shots", "1,5", "--seeds", "2"])
    assert r.exit_code == 0, r.output
    assert "accuracy_5shot" in r.stdout
    r = runner.invoke(app, ["finetune", "-c", str(ckpt), "--steps", "10", "--warmup-steps", "1", "-b", "16",
                            "--lr-grid", "0.1", "--seed", "9", "--finetune-seed", "4", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["metrics"]["finetune_images_seen"] == 3 * 160  # 3 fine-tuning seeds (default)
    assert json.loads(r.stdout)["raw"]["per_seed"]["seed"] == [4, 5, 6]  # its own seed, not --seed (issue 52)
    # bad input: exit code 2 and a message naming the problem, no traceback
    r = runner.invoke(app, ["finetune", "-c", str(tmp_path / "missing.safetensors")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["fewshot", "-c", str(ckpt), "--shots", "one"])
    assert r.exit_code == 2 and "--shots" in r.output
    r = runner.invoke(app, ["pretrain", "ViT-Nano/4", "--data", "folder", "--data-path", str(tmp_path / "no")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_shipped_scaling_study_lists_transfer_beside_speed_trials_and_names_missing_paths():
    """The flagship (GPU) template: its transfer trials start from checkpoints on disk and read a local CIFAR-10;
    parsing it here lists every trial and names each missing path with its line; running it would refuse."""
    study = load_study("studies/scaling.yaml", check_paths=False)
    tasks_ = {t.task for t in study.trials}
    assert {"infer", "train", "flops", "max_batch", "fewshot", "finetune"} <= tasks_
    transfer = [t.config for t in study.trials if t.task in ("fewshot", "finetune")]
    assert all(c["checkpoint"].endswith((".npz", ".safetensors")) and c["checkpoint_images"] > 0 for c in transfer)
    assert "defaults.data_path: no such file or directory" in study.missing_paths
    assert "include[1].checkpoint: no such file or directory" in study.missing_paths
    with pytest.raises(ConfigError, match=r"scaling.yaml:\d+: defaults.data_path"):
        load_study("studies/scaling.yaml")


def test_transfer_from_a_checkpoint_of_another_origin_with_its_declared_budget(tmp_path, monkeypatch):
    """A timm state dict on disk (no vitbench metadata) starts a few-shot trial; its declared budget (images x
    epochs) becomes the row's pre-training compute; its flavour is recorded; absent, the fields leave keys
    alone."""
    import timm
    from safetensors.torch import save_file

    from vitbench.models.analytic import train_flops_per_image

    monkeypatch.setenv("VITBENCH_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    spec = get_spec("ViT-Nano/4")
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=4, embed_dim=32,
                              depth=2, num_heads=2, num_classes=10)  # timm's own init of ViT-Nano/4's shape
    path = tmp_path / "timm.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    base = parse_study(STUDY, "test.yaml").trials[1].config  # a fewshot trial
    assert "checkpoint" not in base  # unset: not in the config, so existing keys stay as they were
    config = {**base, "checkpoint": str(path), "checkpoint_images": 1000, "checkpoint_epochs": 2.0}
    rec = run_trial(job(config, "x"))
    assert rec.status == "ok", rec.error
    # exact: the same float64 expression (flops per image x images seen / 1e18; the teacher's + 0.0 rounds nothing)
    assert rec.metrics["exaflops"] == train_flops_per_image(spec, 16, 10) * 2000 / 1e18
    assert rec.metrics["pretrain_exaflops"] == rec.metrics["exaflops"] and rec.metrics["accuracy"] > 0
    assert rec.config["flavour"]["gelu"] == "erf" and rec.config["upstream_resolution"] == 16
    assert not list((tmp_path / "ckpt").glob("*.safetensors"))  # nothing pre-trained: the checkpoint was used
