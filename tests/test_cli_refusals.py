"""Option combinations that did nothing, refused before anything runs (exit 2, one `error:` line naming the
options): --parallelism on one device (bench, max-batch), sweep --json without --dry-run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize("args,named", [
    (("bench", "ViT-Nano/4", "--backend", "jax", "--parallelism", "fsdp"), "--parallelism fsdp"),
    (("bench", "ViT-Nano/4", "--parallelism", "fsdp", "--devices", "1"), "--parallelism fsdp"),
    (("bench", "ViT-Nano/4", "--set", "parallelism=fsdp"), "--set parallelism fsdp"),
    (("max-batch", "ViT-Nano/4", "--parallelism", "fsdp", "--max-batch-size", "2"), "--parallelism fsdp"),
])
def test_a_parallelism_without_devices_above_one_is_refused(cli, args, named):
    """`bench ... --parallelism fsdp` without --devices ran on one device without a word, its row saying fsdp."""
    r = cli(*args, "--min-seconds", "0.01", "--min-steps", "1") if args[0] == "bench" else cli(*args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert f"{named} applies with --devices N > 1" in lines[0], r.stderr
    assert not r.stdout.strip()  # nothing measured


def test_a_study_trial_with_parallelism_on_one_device_is_refused(cli, tmp_path):
    """The same refusal for a study's trial (the task's Params, not the command, hold the check): `parallelism:
    fsdp` with devices 1 measured the one-device step under fsdp's name."""
    study = tmp_path / "study.yaml"
    study.write_text(textwrap.dedent("""
        name: lone
        calibration: false
        defaults: {min_steps: 1, min_seconds: 0.01}
        axes: {model: [ViT-Nano/4], task: [infer], parallelism: [fsdp]}
    """))
    r = cli("sweep", study, "--results", tmp_path / "res")
    assert r.exit_code == 2, r.output
    assert "parallelism fsdp applies with devices N > 1" in r.stderr, r.stderr
    assert not (tmp_path / "res").exists()  # refused before anything is written


def test_real_input_over_several_devices_is_refused(cli):
    """The real-input run times the transfer loop on one device at the global batch: with --devices 2 its
    img/s was one device's at twice the per-device batch, in a row saying 2 devices."""
    r = cli("bench", "ViT-Nano/4", "--task", "train", "--data", "digits", "--devices", "2", "--min-steps", "1",
            "--min-seconds", "0.01")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--data times the training loop on one device" in lines[0], r.stderr
    assert "--devices 1" in lines[0] and not r.stdout.strip()


def test_sweep_json_without_dry_run_is_refused(cli, tmp_path):
    """--json is --dry-run's (the trials as JSON): `sweep STUDY --json` ran the study, printing no JSON."""
    study = tmp_path / "study.yaml"
    study.write_text(textwrap.dedent("""
        name: refused
        calibration: false
        axes: {model: [ViT-Nano/4], task: [flops]}
    """))
    res = tmp_path / "res"
    r = cli("sweep", study, "--results", res, "--json")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "--json" in lines[0] and "--dry-run" in lines[0], r.stderr
    assert not res.exists()  # nothing ran, nothing was written
    r = cli("sweep", study, "--results", res, "--json", "--dry-run")
    assert r.exit_code == 0, r.output
    assert '"task": "flops"' in r.stdout


@pytest.mark.parametrize("args,says", [
    # inspect has no --task: the capability its task needs is named on --backend, in words
    (("inspect", "ViT-Nano/4", "--backend", "onnxruntime"),
     "--backend: backend 'onnxruntime' cannot give attention maps"),
])
def test_a_backend_that_cannot_do_what_the_command_does_is_named_as_such(cli, args, says):
    """`inspect --backend onnxruntime` said "--task: ... cannot attention" (inspect has no --task). doctor's
    runtime case: tests/test_doctor.py::test_doctor_bad_options_exit_2."""
    pytest.importorskip("onnxruntime")
    r = cli(*args)
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.stderr.split()), r.stderr


def test_a_path_with_markup_brackets_is_printed_as_it_is(cli, tmp_path):
    """`--results 'x[/]'`: the sweep and the report wrote everything, then printed a traceback (rich read the
    path as markup: "closing tag '[/]' has nothing to close") and exited 1, which a CI reads as a failed trial;
    `[red]R[/red]` printed as 'R', a folder that does not exist."""
    study = tmp_path / "study.yaml"
    study.write_text("name: odd\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [flops]}\n")
    for name in ("x[/]", "[red]R[/red]"):
        res = tmp_path / name
        r = cli("sweep", study, "--results", res)
        assert r.exit_code == 0 and f"{res}/results.jsonl" in r.stdout, r.output
        r = cli("report", res, "--format", "md", "--no-plots")
        assert r.exit_code == 0 and f"{res / 'report'}" in " ".join(r.stdout.split()), r.output


@pytest.mark.parametrize("force", [False, True])
def test_an_interrupted_forced_sweep_does_not_say_its_own_command_resumes(cli, tmp_path, monkeypatch, force):
    """An interrupted `sweep --force` said "Run the same command again to resume": that command re-runs every
    trial again. It now says what a resume without --force does."""
    import vitbench.runner

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(vitbench.runner, "run_study", stopped)
    study = tmp_path / "study.yaml"
    study.write_text("name: stop\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [flops]}\n")
    r = cli("sweep", study, "--results", tmp_path / "res", *(["--force"] if force else []))
    said = " ".join(r.stderr.split())
    assert r.exit_code == 130 and "interrupted" in said, r.output
    assert ("Run the same command again to resume" in said) is not force, said
    assert ("without --force" in said) is force, said


_INTERRUPT_AT = {  # Ctrl-C while vitbench starts: as a command module is imported, as the memory guard starts
    "import": """
import sys
class Stop:
    def find_spec(self, name, path=None, target=None):
        if name == "vitbench.cli.study_cmd":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Stop())
""",
    "memory guard": """
import vitbench.memory_budget
def stopped():
    raise KeyboardInterrupt
vitbench.memory_budget.guard_this_process = stopped
""",
}


@pytest.mark.parametrize("at", list(_INTERRUPT_AT))
def test_ctrl_c_while_vitbench_starts_is_one_line_and_exit_130(at, tmp_path):
    """Ctrl-C in a command's first second (its modules imported, its memory guard started: measured, a sweep
    interrupted 0.3-2 s after its start) printed a KeyboardInterrupt traceback; the console script's entry
    (vitbench.entry) says it in one line, exit 130, nothing run."""
    code = _INTERRUPT_AT[at] + "from vitbench.entry import main\nmain()\n"
    r = subprocess.run([sys.executable, "-c", code, "sweep", str(tmp_path / "none.yaml")], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 130, r.stderr
    said = "interrupted (Ctrl-C) while vitbench was starting: nothing was run"
    assert "Traceback" not in r.stderr and r.stderr.strip() == said, r.stderr
    assert not r.stdout and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,says", [
    (("bench", "ViT-Nano/4", "--optimizer", "sgd"), "--optimizer: a setting of --task train"),
    (("bench", "ViT-Nano/4", "--data-path", "/etc", "--data-steps", "5"), "--data-steps, --data-path: settings of "
                                                                          "--task train"),
    (("bench", "ViT-Nano/4", "--synthetic-images", "5"), "--synthetic-images: a setting of --task train"),
    (("bench", "ViT-Nano/4", "--skip-corrupt", "--check-data"), "--skip-corrupt, --check-data: settings of --task "
                                                                "train"),
    (("max-batch", "ViT-Nano/4", "--max-batch-size", "1", "--optimizer", "sgd"),
     "--optimizer applies only with --mode train (here --mode infer)"),
    (("serve", "ViT-Nano/4", "--scenario", "SingleStream", "--max-wait-ms", "50"),
     "--max-wait-ms applies only with --scenario Server or MultiStream or Offline (here SingleStream"),
])
def test_a_training_or_batching_setting_where_it_does_nothing_is_refused(cli, args, says):
    """`bench` (infer) took train's --optimizer and real-input options and dropped them (its row said adam after
    --optimizer sgd); `max-batch --mode infer --optimizer sgd` kept sgd in its config, a trial key of its own for
    the same probes; `serve --scenario SingleStream --max-wait-ms 50` titled its run "wait 50 ms" and never
    waited (one sample at a time). Each is refused, naming the options; nothing runs."""
    r = cli(*args, "--threads", "1")
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.stderr.split()) and not r.stdout.strip(), r.stderr


@pytest.mark.parametrize("args,says", [
    (("--backend", "torch", "--set", "backend=jax"), "--backend 'torch' and --set backend='jax' both set it"),
    (("-b", "16", "--set", "batch_size=4"), "--batch-size 16 and --set batch_size=4 both set it"),
    (("--set", "task=train"), "--set task: the task is the command's --task option"),  # was "unknown architecture
    (("--set", "model=ViT-Micro/4"), "--set model: the model is the command's MODEL argument"),  # field 'task'"
])
def test_a_flag_and_a_set_item_of_the_same_field_are_refused(cli, args, says):
    """`--backend torch --set backend=jax` ran JAX, `-b 16 --set batch_size=4` batch 4: the --set item won over
    the flag typed beside it without a word. Refused, naming both; a --set item alone, or one agreeing with the
    flag, runs (not asserted here: it measures)."""
    r = cli("bench", "ViT-Nano/4", *args, "--threads", "1")
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.stderr.split()) and not r.stdout.strip(), r.stderr


@pytest.mark.parametrize("args,says", [
    (("pretrain", "ViT-Nano/4", "--steps", "3", "--set", "pretrain_steps=5"),
     "--steps 3 and --set pretrain_steps=5 both set it"),
    (("pretrain", "ViT-Nano/4", "--lr", "0.01", "--set", "upstream.lr=0.003"),
     "--lr 0.01 and --set upstream.lr=0.003 both set it"),  # a path, named as typed
    (("fewshot", "--model", "ViT-Nano/4", "--shots", "5", "--set", "shots=10"),
     "--shots '5' and --set shots=10 both set it"),
    (("finetune", "--model", "ViT-Nano/4", "--steps", "5", "--set", "finetune_steps=10"),
     "--steps 5 and --set finetune_steps=10 both set it"),
    (("inspect", "ViT-Nano/4", "-n", "3", "--set", "inspect_images=5"), "--images 3 and --set inspect_images=5"),
])
def test_the_transfer_commands_refuse_a_flag_and_a_set_item_of_the_same_field(cli, args, says):
    """pretrain, fewshot, finetune and inspect read their --set items themselves (paths: upstream.lr) and merged
    them over
    the flags: `pretrain --steps 3 --set pretrain_steps=5` trained 5 steps without a word. Refused as bench's."""
    r = cli(*args, "--threads", "1")
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.stderr.split()) and not r.stdout.strip(), r.stderr
