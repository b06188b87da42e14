"""Study schema: grid expansion, keys, and one test per kind of bad input (file, field, value, line; exit 2)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from vitbench.errors import ConfigError
from vitbench.study import load_study, parse_study, trial_key

REPO = Path(__file__).resolve().parents[1]


def study(text: str, source: str = "s.yaml"):
    return parse_study(textwrap.dedent(text), source)


def bad(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        study(text)
    return str(e.value)


# ----------------------------------------------------------------------------------------------------------
# Expansion
# ----------------------------------------------------------------------------------------------------------
def test_grid_is_the_product_of_axes_in_order():
    s = study("""
        name: g
        axes:
          model: [ViT-Nano/4, R-Nano]
          task: [infer, train]
          batch_size: [2, 4, 8]
    """)
    assert len(s.trials) == 2 * 2 * 3
    got = [(t.config["model"], t.config["task"], t.config["batch_size"]) for t in s.trials]
    assert got[:4] == [("ViT-Nano/4", "infer", 2), ("ViT-Nano/4", "infer", 4), ("ViT-Nano/4", "infer", 8),
                       ("ViT-Nano/4", "train", 2)]
    assert len({t.key for t in s.trials}) == len(s.trials)
    # native resolution and classes filled in, so the key does not depend on how they were spelled
    assert {t.config["resolution"] for t in s.trials} == {32}
    assert {t.config["num_classes"] for t in s.trials} == {10}


def test_repeats_are_interleaved_across_trials():
    s = study("""
        name: r
        repeats: 3
        axes: {model: [ViT-Nano/4, R-Nano], task: [infer]}
    """)
    assert [(t.config["model"], t.repeat) for t in s.trials] == [
        ("ViT-Nano/4", 0), ("R-Nano", 0), ("ViT-Nano/4", 1), ("R-Nano", 1), ("ViT-Nano/4", 2), ("R-Nano", 2)]
    assert len({t.key for t in s.trials}) == 6


def test_fields_a_task_ignores_do_not_split_trials_and_flops_is_not_repeated():
    s = study("""
        name: f
        repeats: 2
        axes: {model: [ViT-Nano/4], task: [flops, infer], batch_size: [2, 4], precision: [fp32, bf16]}
    """)
    flops = [t for t in s.trials if t.task == "flops"]
    infer = [t for t in s.trials if t.task == "infer"]
    assert len(flops) == 1 and "batch_size" not in flops[0].config and "precision" not in flops[0].config
    assert len(infer) == 2 * 2 * 2
    assert s.combinations == 8 and s.unique_trials == 5


def test_defaults_that_apply_to_some_scenarios_only_leave_the_others_configs():
    s = study("""
        name: f
        defaults: {target_qps: 50, max_probes: 3, samples_per_query: 4}
        axes: {model: [ViT-Nano/4], task: [serve], scenario: [Server, SingleStream, MultiStream, Offline]}
    """)
    by = {t.config["scenario"]: t.config for t in s.trials}
    assert by["Server"]["target_qps"] == 50 and by["Server"]["max_probes"] == 3
    assert "samples_per_query" not in by["Server"] and by["MultiStream"]["samples_per_query"] == 4
    assert by["Offline"]["target_qps"] == 50 and "max_probes" not in by["Offline"]
    for f in ("target_qps", "max_probes", "latency_bound_ms", "qps_tolerance"):
        assert f not in by["SingleStream"], f  # not recorded where LoadGen does not read it
    assert len({t.key for t in s.trials}) == 4


def test_an_axis_value_for_a_scenario_it_does_not_apply_to_is_refused():
    msg = bad("""
        name: f
        axes: {model: [ViT-Nano/4], task: [serve], scenario: [Server, SingleStream], max_probes: [3]}
    """)
    assert "max_probes applies only with scenario Server (here scenario SingleStream)" in msg, msg


def test_key_is_stable_and_spelling_insensitive(monkeypatch):
    a = study("name: a\naxes: {model: [ViT-B/16], task: [infer]}\n").trials[0]
    b = study("name: b\ndefaults: {resolution: 224}\naxes: {model: [vit_base_patch16_224], task: [infer]}\n"
              ).trials[0]
    assert a.key == b.key and a.config == b.config
    c = study("name: c\naxes: {model: [ViT-B/16], task: [infer], batch_size: [16]}\n").trials[0]
    assert c.key != a.key
    assert trial_key(a.config, 1) != trial_key(a.config, 0)
    monkeypatch.setattr("vitbench.study.trials.METHOD_VERSION", 999)  # trial_key reads it there
    assert trial_key(a.config, 0) != a.key  # a method change invalidates old results


# A value for every key-neutral field (vitbench.transfer.config.key_neutral) of a downstream trial, not its default.
KEY_NEUTRAL_SET = {"upstream_tfds_name": "mnist", "checkpoint": "ck.npz", "checkpoint_images": 1000,
                   "checkpoint_epochs": 2.5, "data_test_path": ".", "image_column": "img", "label_column": "lab",
                   "tfds_name": "mnist", "skip_corrupt": True, "check_data": True, "data_workers": 2,
                   "synthetic_images": 20, "synthetic_classes": 3, "synthetic_size": 8,
                   # the upstream's data settings, generated from the formats table (tasks/upstream.UPSTREAM_TWINS)
                   "upstream_test_path": ".", "upstream_image_column": "img", "upstream_label_column": "lab",
                   "upstream_skip_corrupt": True, "upstream_check_data": True, "upstream_workers": 2,
                   "upstream_synthetic_images": 20, "upstream_synthetic_classes": 3, "upstream_synthetic_size": 8}


def test_key_neutral_fields_enter_the_key_only_when_set(tmp_path, monkeypatch):
    """A key-neutral field at its default is left out of the config, so the key is the one the trial had before
    the field existed; set to any other value, it is in the config and changes the key."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck.npz").write_bytes(b"")  # a checkpoint's name that exists (not read: a resolution is given)
    from vitbench.registry import Kind, get

    fields = get(Kind.TASK, "fewshot").Params.model_fields
    neutral = {n for n, f in fields.items() if getattr(f, "exclude_if", None) is not None}
    assert neutral == set(KEY_NEUTRAL_SET)  # every key-neutral field of the trial is checked below
    head = "name: k\naxes: {model: [ViT-Nano/4], task: [fewshot], resolution: [32]}\n"
    plain = study(head).trials[0]
    assert not neutral & set(plain.config)
    for name, value in KEY_NEUTRAL_SET.items():
        default = fields[name].get_default()
        at_default = study(head + f"defaults: {{{name}: {json.dumps(default)}}}\n").trials[0]
        assert at_default.key == plain.key and name not in at_default.config, name
        needs = _needs(name)  # a checkpoint's budget needs the checkpoint
        given = study(head + f"defaults: {json.dumps({**needs, name: value})}\n").trials[0]
        assert given.config[name] == value and given.key != plain.key, name


# A value for every key-neutral field of every built-in task's trial, not its default: the shared ones
# (vitbench.tasks.fields.SHARED) and the tasks' own.
KEY_NEUTRAL_ANY_TASK = {**KEY_NEUTRAL_SET, "devices": 2, "parallelism": "fsdp",
                        # what only a command could ask for before issue 52 (item 2): now the tasks' own fields
                        "exaflops_images": 1000, "exaflops_epochs": 2.5, "inspect_weights": "random",
                        "optimizer": "sgd", "finetune_seed": 4, **{f"real_input_{k}": v for k, v in {
                            "dataset": "digits", "path": ".", "test_path": ".", "image_column": "img",
                            "label_column": "lab", "tfds_name": "mnist", "skip_corrupt": True, "check_data": True,
                            "workers": 2, "steps": 5, "synthetic_images": 20, "synthetic_classes": 3,
                            "synthetic_size": 8}.items()}}


def _needs(name: str) -> dict:
    """The fields a field is refused without (alone it would be ignored), themselves key-neutral: a real input
    setting's dataset, one that takes it; pre-training compute's images and epochs, each the other; a
    checkpoint's budget, the checkpoint; a parallelism mode, devices to spread over; max_batch's optimizer, its
    train mode (infer keeps no optimizer state)."""
    pair = {"parallelism": {"devices": 2}, "optimizer": {"mode": "train"}, "exaflops_images": {"exaflops_epochs": 2.5}, "exaflops_epochs": {"exaflops_images": 1000},
            "checkpoint_images": {"checkpoint": "ck.npz"}, "checkpoint_epochs": {"checkpoint": "ck.npz"}}
    if name in pair:
        return pair[name]
    if not name.startswith("real_input_") or name == "real_input_dataset":
        return {}
    own = {"synthetic_": "synthetic", "image_column": "hf", "label_column": "hf", "test_path": "hf",
           "tfds_name": "tfds"}
    return {"real_input_dataset": next((d for k, d in own.items() if k in name), "folder")}


def test_every_key_neutral_field_of_every_task_leaves_the_config_only_at_its_default(tmp_path, monkeypatch):
    """The one mechanism for 'left out of the key at its default' (key_neutral) serves the shared fields
    (devices, parallelism: declared in SHARED) and the tasks' own alike: at its default (given or not) a field
    is out of the trial config, any other value is in it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck.npz").write_bytes(b"")  # a checkpoint's name that exists (not read: a resolution is given)
    from vitbench.registry import BUILTIN_MODULES, Kind, get, names

    seen: set[str] = set()
    for task in names(Kind.TASK):
        if get(Kind.TASK, task).__module__ not in BUILTIN_MODULES[Kind.TASK]:
            continue  # a plug-in's own fields are its business
        params = get(Kind.TASK, task).Params
        neutral = {n for n, f in params.model_fields.items() if getattr(f, "exclude_if", None) is not None}
        seen |= neutral
        base = {k: v for k, v in (("task", task), ("model", "ViT-Nano/4"), ("resolution", 32))
                if k in params.model_fields}
        plain = params(**base).config()
        for name in neutral:
            default = params.model_fields[name].get_default(call_default_factory=True)
            assert name not in plain and params(**base, **{name: default}).config() == plain, (task, name)
            value = KEY_NEUTRAL_ANY_TASK[name]
            # a real input setting needs its dataset (alone it is refused: it would be ignored), itself key-neutral
            needs = _needs(name)
            got = params(**base, **needs, **{name: value}).config()
            assert got == {**plain, **needs, name: value}, (task, name)
    assert seen == set(KEY_NEUTRAL_ANY_TASK)  # devices and parallelism among them: the shared fields' too


def test_key_neutral_leaves_a_dump_only_at_its_default():
    from pydantic import BaseModel, ValidationError

    from vitbench.transfer.config import key_neutral

    class M(BaseModel):
        name: str | None = key_neutral()
        flag: bool = key_neutral(False)
        workers: int = key_neutral(0, ge=0)

    assert M().model_dump() == {} and M(name=None, flag=False, workers=0).model_dump() == {}
    assert M(name="", flag=True, workers=3).model_dump() == {"name": "", "flag": True, "workers": 3}
    with pytest.raises(ValidationError):  # the constraints are the field's
        M(workers=-1)


def test_zip_include_exclude_and_selectors():
    s = study("""
        name: z
        axes:
          task: [infer]
          resolution: [32, 64]
        zip:
          - model: [ViT-Nano/4, ViT-Micro/4]
            batch_size: [16, 4]
        exclude:
          - {model: ViT-Micro/4, resolution: 64}
        include:
          - {model: "tiny:bit", batch_size: 2}
    """)
    got = sorted((t.config["model"], t.config["resolution"], t.config["batch_size"]) for t in s.trials)
    assert got == sorted([("ViT-Nano/4", 32, 16), ("ViT-Nano/4", 64, 16), ("ViT-Micro/4", 32, 4),
                          ("R-Nano", 32, 2), ("R-Nano", 64, 2), ("R-Micro", 32, 2), ("R-Micro", 64, 2)])
    assert {t.origin for t in s.trials if t.config["model"].startswith("R-")} == {"include[0]"}
    fam = study("name: f\naxes: {model: ['family:vit'], task: [flops]}\n")
    assert "ViT-B/16" in {t.config["model"] for t in fam.trials}
    assert not any("Nano" in t.config["model"] for t in fam.trials)


def test_exclude_matches_the_trial_as_it_runs():
    """An exclude entry was matched against the combination as written only: a resolution left to the model's
    native one, or an architecture field written in the model's name on one side and as a field on the other,
    excluded nothing and the trial the user excluded ran."""
    head = "name: e\ndefaults: {task: infer}\n"
    for grid, exclude in ((["ViT-Nano/4", "R-Nano"], "{model: R-Nano, resolution: 32}"),
                          (["ViT-Nano/4", "ViT-Nano/4[depth=3]"], "{depth: 3}"),
                          (["ViT-Nano/4"], "{model: 'ViT-Nano/4[depth=3]'}")):
        axes = f"axes: {{model: {json.dumps(grid)}" + (", depth: [2, 3]}" if len(grid) == 1 else "}")
        s = study(f"{head}{axes}\nexclude: [{exclude}]\n")
        assert [t.config["model"] for t in s.trials] == ["ViT-Nano/4"], (grid, exclude)
        assert s.combinations == 1  # the excluded trial is not counted as merged


def test_a_study_of_include_entries_alone_runs_those_entries_alone():
    """With no axes and no zip, the product of no axes is the defaults alone: it ran as a trial of its own beside
    the include entries (studies/gpu.yaml's first trial on the GPU was its defaults, fp32 inference, before the
    entries it asked for first)."""
    s = study("""
        name: inc
        defaults: {model: ViT-Nano/4, task: infer, precision: fp32}
        include:
          - {precision: bf16}
          - {model: R-Nano, task: train}
    """)
    got = sorted((t.config["model"], t.config["task"], t.config["precision"], t.origin) for t in s.trials)
    assert got == [("R-Nano", "train", "fp32", "include[1]"), ("ViT-Nano/4", "infer", "bf16", "include[0]")]


def test_task_parameters_are_typed_and_defaulted():
    s = study("""
        name: p
        defaults: {min_seconds: 0.2, memory_limit_gib: 1.5}
        axes: {model: [ViT-Nano/4], task: [infer, max_batch]}
    """)
    infer, mb = s.trials
    assert infer.config["min_seconds"] == 0.2 and infer.config["warmup_steps"] == 3
    assert "memory_limit_gib" not in infer.config and mb.config["memory_limit_gib"] == 1.5
    assert mb.config["mode"] == "infer" and "batch_size" not in mb.config


# ----------------------------------------------------------------------------------------------------------
# Bad input: one test per kind; the message names file, line, field and value
# ----------------------------------------------------------------------------------------------------------
def test_a_study_refuses_what_the_config_a_field_sets_would_refuse():
    """`pretrain_steps: 0` (and a batch of 0, no few-shot draws, label smoothing 1) passed a dry run and failed
    in the trial: the study fields now carry the bounds of the config fields they set (field_like)."""
    msg = bad("""
        name: b
        axes: {model: [ViT-Nano/4], task: [fewshot, finetune]}
        defaults: {pretrain_steps: 0, pretrain_batch_size: 0, fewshot_seeds: 0, label_smoothing: 1.0,
                   finetune_steps: 0, finetune_warmup_steps: -1, pretrain_lr: 0}
    """)
    at_least = "greater than or equal to"
    for field, says in (("pretrain_steps", f"{at_least} 1"), ("pretrain_batch_size", f"{at_least} 1"),
                        ("fewshot_seeds", f"{at_least} 1"), ("label_smoothing", "less than 1"),
                        ("finetune_steps", f"{at_least} 1"), ("finetune_warmup_steps", f"{at_least} 0"),
                        ("pretrain_lr", "greater than 0")):
        assert f"defaults.{field}: Input should be {says}" in msg, (field, msg)


def test_unknown_top_level_key():
    msg = bad("name: x\nrepeat: 2\naxes: {model: [ViT-Nano/4], task: [infer]}\n")
    assert "s.yaml:2: repeat: unknown key" in msg and "repeats" in msg


def test_unknown_field_in_axes_suggests_close_name():
    msg = bad("name: x\naxes:\n  model: [ViT-Nano/4]\n  task: [infer]\n  batchsize: [4]\n")
    assert "s.yaml:5: axes.batchsize: unknown field" in msg and "batch_size" in msg


def test_unknown_model_lists_close_matches():
    msg = bad("name: x\naxes:\n  model: [ViT-Nano/4, ViT-B/17]\n  task: [infer]\n")
    assert "s.yaml:3: axes.model[1]" in msg and "'ViT-B/17'" in msg and "ViT-B/16" in msg


def test_resolution_not_divisible_by_patch():
    msg = bad("name: x\naxes:\n  model: [ViT-B/16]\n  task: [infer]\n  resolution: [224, 230]\n")
    assert "s.yaml:5: axes.resolution[1]" in msg and "230" in msg and "16" in msg


def test_negative_batch():
    msg = bad("name: x\ndefaults:\n  batch_size: -8\naxes: {model: [ViT-Nano/4], task: [infer]}\n")
    assert "s.yaml:3: defaults.batch_size" in msg and "-8" in msg and "greater than 0" in msg


def test_empty_axis():
    msg = bad("name: x\naxes:\n  model: [ViT-Nano/4]\n  task: []\n")
    assert "s.yaml:4: axes.task: empty list" in msg


def test_wrong_type():
    msg = bad("name: x\naxes:\n  model: [ViT-Nano/4]\n  task: [infer]\n  batch_size: [eight]\n  compile: [1]\n")
    assert "axes.batch_size[0]" in msg and "'eight'" in msg and "axes.compile[0]" in msg


def test_unknown_task_and_backend_name_the_allowed_values():
    msg = bad("name: x\naxes:\n  model: [ViT-Nano/4]\n  task: [infer, benchmark]\n  backend: [tensorflow]\n")
    assert "axes.task[1]" in msg and "infer, train, max_batch, flops" in msg
    assert "axes.backend[0]" in msg and "allowed: torch, jax" in msg


def test_yaml_syntax_error_has_a_line():
    msg = bad("name: x\naxes:\n  model: [ViT-Nano/4\n  task: [infer]\n")
    assert "s.yaml:4" in msg and "not valid YAML" in msg


def test_zip_lengths_must_match():
    msg = bad("name: x\naxes: {task: [infer]}\nzip:\n  - {model: [ViT-Nano/4, R-Nano], batch_size: [2]}\n")
    assert "zip[0]" in msg and "equal lengths" in msg


def test_a_field_in_two_zip_groups_is_refused():
    """The product of two zip groups took the second group's value of a field both set: R-Nano at batch 4 was
    measured as ViT-Nano/4 at batch 4, and no trial of R-Nano ran."""
    msg = bad("name: x\naxes: {task: [infer]}\nzip:\n  - {model: [ViT-Nano/4, R-Nano], batch_size: [2, 4]}\n"
              "  - {model: [ViT-Nano/4], resolution: [32]}\n")
    assert "s.yaml:5: zip[1].model" in msg and "zip[0]" in msg


def test_missing_name_and_missing_model():
    assert "name: Field required" in bad("axes: {model: [ViT-Nano/4], task: [infer]}\n")
    assert "no model given" in bad("name: x\naxes: {task: [infer]}\n")


def test_all_problems_reported_at_once():
    msg = bad("name: x\nfoo: 1\naxes:\n  model: [Nope]\n  task: [infer]\n  precision: [fp8]\n")
    assert "3 problems" in msg and "foo" in msg and "Nope" in msg and "fp8" in msg


def test_not_a_mapping():
    assert "top level must be a mapping" in bad("- a\n- b\n")


# ----------------------------------------------------------------------------------------------------------
# Files and CLI
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["smoke", "scaling", "figure12"])
def test_shipped_studies_validate(name):
    s = load_study(REPO / "studies" / f"{name}.yaml", check_paths=False)  # templates name data kept elsewhere
    assert s.name == name and s.trials


def test_scaling_study_has_the_figure5_model_set():
    s = load_study(REPO / "studies" / "scaling.yaml", check_paths=False)
    models = {t.config["model"] for t in s.trials}
    assert models == {"ViT-B/32", "ViT-B/16", "ViT-L/32", "ViT-L/16", "ViT-H/14", "R50x1", "R50x2", "R101x1",
                      "R152x1", "R152x2", "R200x3", "R50+ViT-B/32", "R50+ViT-B/16", "R50+ViT-L/32",
                      "R50+ViT-L/16"}
    assert {t.config["resolution"] for t in s.trials} == {224}


def test_embedded_smoke_is_the_repo_copy_and_resolves_by_name(tmp_path, monkeypatch, cli):
    assert ((REPO / "vitbench" / "studies" / "smoke.yaml").read_text()
            == (REPO / "studies" / "smoke.yaml").read_text())
    monkeypatch.chdir(tmp_path)  # no studies/ here: the package's copy is used
    r = cli("sweep", "smoke", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    trials = json.loads(r.stdout)
    assert {t["config"]["task"] for t in trials} == {"infer", "train", "flops", "max_batch"}
    assert not (tmp_path / "results").exists()


def test_a_folder_named_like_a_shipped_study_does_not_hide_it(tmp_path, monkeypatch, cli):
    """`vitbench sweep ci --results ci` makes ./ci: the resume, the same command again, said "study 'ci' is not
    a file"; a folder named so is the study's results, not the study. A name that is no study still says so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ci").mkdir()
    r = cli("sweep", "ci", "--results", "ci", "--dry-run", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout), r.output
    (tmp_path / "mine").mkdir()
    r = cli("sweep", "mine", "--dry-run")
    assert r.exit_code == 2 and "is not a file" in r.stderr, r.output


def test_every_shipped_study_is_embedded_and_runs_by_name_from_anywhere(tmp_path, monkeypatch, cli):
    """studies/ links to the package's copies (a study added there as a plain file would not be embedded);
    `sweep transfer-digits`, as docs/datasets.md shows it, said 'not found' outside the checkout."""
    shipped = sorted(p.name for p in (REPO / "studies").glob("*.yaml"))
    embedded = sorted(p.name for p in (REPO / "vitbench" / "studies").glob("*.yaml"))
    assert shipped == embedded
    for name in shipped:
        link = REPO / "studies" / name
        assert link.is_symlink() and link.resolve() == (REPO / "vitbench" / "studies" / name).resolve(), name
    monkeypatch.chdir(tmp_path)
    r = cli("sweep", "transfer-digits", "--set", "dataset=synthetic", "--dry-run", "--json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)) > 100, r.output


def test_the_docs_spelling_studies_slash_name_runs_the_shipped_study_from_anywhere(tmp_path, monkeypatch, cli):
    """docs/history.md's first command, `vitbench sweep studies/ci.yaml --results r1`, said 'not found' outside
    the checkout; `studies/<name>.yaml` of a shipped study is its name there. A file of that path still wins, and
    a name that is no study is still not found."""
    monkeypatch.chdir(tmp_path)
    for spelt in ("studies/ci.yaml", "studies/ci.yml", "ci.yml"):  # 'ci.yml' was read as the name 'c'
        r = cli("sweep", spelt, "--dry-run", "--json")
        assert r.exit_code == 0 and {t["config"]["model"] for t in json.loads(r.stdout)} == {"ViT-Mini/4",
                                                                                             "R-Micro"}, spelt
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "ci.yaml").write_text("name: mine\naxes:\n  model: [ViT-Nano/4]\n  task: [infer]\n")
    r = cli("sweep", "studies/ci.yaml", "--dry-run", "--json")
    assert r.exit_code == 0 and {t["config"]["model"] for t in json.loads(r.stdout)} == {"ViT-Nano/4"}, r.output
    r = cli("sweep", "studies/no-such-study.yaml", "--dry-run")
    assert r.exit_code == 2 and "not found" in r.stderr, r.output


def test_cli_bad_study_exits_2_without_traceback_and_writes_nothing(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\naxes:\n  model: [ViT-Nano/4]\n  task: [infer]\n  resolution: [30]\n")
    r = cli("sweep", str(p))
    assert r.exit_code == 2
    assert "Traceback" not in r.output and "bad.yaml:5: axes.resolution[0]" in r.output
    assert not (tmp_path / "results").exists()
    r = cli("sweep", "no-such-study")
    assert r.exit_code == 2 and "smoke" in r.output


def test_cli_dry_run_table(tmp_path, cli):
    p = tmp_path / "s.yaml"
    p.write_text("name: t\nrepeats: 2\naxes: {model: [ViT-Nano/4, R-Nano], task: [infer, flops]}\n")
    r = cli("sweep", str(p), "--dry-run", "--results", str(tmp_path / "res"))
    assert r.exit_code == 0, r.output
    assert "6 trials" in r.output and "R-Nano" in r.output and "flops" in r.output
    assert not (tmp_path / "res").exists()


def test_the_allowed_fields_in_an_error_stay_bounded_however_many_the_tasks_declare():
    """An unknown `--set` field's error lists the allowed fields up to LISTED_CHARS, then how many more: every
    task's fields (plug-ins' too) passed the CLI's 2 KiB message bound once the serve and runtime tasks landed."""
    from vitbench.study.paths import LISTED_CHARS, listed as _listed

    few = ["model", "backend"]
    assert _listed(few) == "model, backend"
    many = [f"field_{i}" for i in range(1000)]
    text = _listed(many)
    assert len(text) <= LISTED_CHARS + 80 and text.startswith("field_0, field_1,")
    shown = text.split(" and ")[0].count(",") + 1
    assert f"and {1000 - shown} more" in text


def test_a_checkpoints_budget_without_a_checkpoint_is_refused():
    """checkpoint_images / checkpoint_epochs without a checkpoint changed the trial's key and were ignored."""
    msg = bad("""
        name: b
        axes: {model: [ViT-Nano/4], task: [fewshot]}
        defaults: {checkpoint_images: 1000, checkpoint_epochs: 2}
    """)
    assert "checkpoint_images and checkpoint_epochs: the pre-training budget of a checkpoint, and none is given" \
        in msg, msg


def test_the_dry_run_shows_the_status_the_sweep_acts_on_shards_included(tmp_path, cli):
    """A trial whose ok row was followed by an interrupted --force rerun: the sweep skips it (store.done_keys),
    and the dry run said 'interrupted'; a results directory of shards only (SLURM's workers write them) showed no
    status at all."""
    import time

    from records import record

    from vitbench.executors.remote import host_shard
    from vitbench.store import Store

    p = tmp_path / "s.yaml"
    p.write_text("name: t\naxes: {model: [ViT-Nano/4, R-Nano], task: [infer]}\n")
    st = load_study(p)
    done, fresh = st.trials
    res = tmp_path / "res"
    with Store(res) as s:
        for status in ("ok", "interrupted"):
            s.append(record("bench", dict(done.config), metrics={"img_per_s": 1.0} if status == "ok" else {},
                            status=status, key=done.key, study="t", run_id=status, repeat=0, trial=done.config))
            time.sleep(0.01)  # finish times apart
    (res / "results.jsonl").rename(res / f"results.{host_shard()}.jsonl")
    r = cli("sweep", str(p), "--dry-run", "--json", "--results", str(res))
    assert r.exit_code == 0, r.output
    shown = {t["key"]: t.get("status") for t in json.loads(r.output)}
    assert shown == {done.key: "ok", fresh.key: "pending"}, shown
    # a later terminal row without an end time is placed by file order, as tidy.select places it (not the oldest)
    late = record("bench", dict(done.config), status="error", key=done.key, study="t", run_id="late", repeat=0,
                  trial=done.config, finished_at=None)
    with open(res / f"results.{host_shard()}.jsonl", "a") as f:  # after the others, in the same file
        f.write(json.dumps(late.to_dict()) + "\n")
    r = cli("sweep", str(p), "--dry-run", "--json", "--results", str(res))
    assert {t["key"]: t.get("status") for t in json.loads(r.output)}[done.key] == "error", r.output


def test_a_results_path_under_the_home_folder_is_read_as_the_sweep_writes_it(tmp_path, cli, monkeypatch):
    """`--results '~/res'` (a tilde the shell left as typed): the sweep wrote ~/res, but its dry run read a folder
    named '~' (and called the sweep's own rows another tool's), and `report '~/res'` said it does not exist."""
    from records import record

    from vitbench.store import Store

    monkeypatch.setenv("HOME", str(tmp_path))
    p = tmp_path / "s.yaml"
    p.write_text("name: t\naxes: {model: [ViT-Nano/4, R-Nano], task: [infer]}\n")
    done, fresh = load_study(p).trials
    with Store(tmp_path / "res") as s:
        s.append(record("bench", dict(done.config), metrics={"img_per_s": 1.0}, key=done.key, study="t",
                        run_id="r", repeat=0, trial=done.config))
    r = cli("sweep", str(p), "--dry-run", "--json", "--results", "~/res")
    assert r.exit_code == 0, r.output
    assert {t["key"]: t.get("status") for t in json.loads(r.output)} == {done.key: "ok", fresh.key: "pending"}
    r = cli("report", "~/res", "--out", "~/rep", "--format", "md", "--no-plots")
    assert r.exit_code == 0 and (tmp_path / "rep").is_dir() and not (tmp_path / "~").exists(), r.output


def test_a_key_beside_a_merge_key_overrides_it_and_a_real_duplicate_is_still_refused():
    """`<<: *base` with a key written beside it: YAML's override, kept (it was refused as a duplicate: the check
    ran after construction had merged the keys into the mapping). Two keys written in one mapping stay refused."""
    text = textwrap.dedent("""
        name: merged
        defaults:
          <<: {device: cpu, batch_size: 2}
          batch_size: 4
        axes:
          model: [ViT-Nano/4]
          task: [infer]
    """)
    (trial,) = parse_study(text, "merged.yaml").trials
    assert trial.config["batch_size"] == 4 and trial.config["device"] == "cpu"
    with pytest.raises(ConfigError, match=r"merged.yaml:6: duplicate key 'batch_size' \(first on line 5\)"):
        parse_study(text.replace("  batch_size: 4\n", "  batch_size: 4\n  batch_size: 8\n"), "merged.yaml")
