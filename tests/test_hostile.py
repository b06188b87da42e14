"""Hostile values for every command (issue 24): no traceback, ever, for user input.

One row per case: the command line, the exit code it must end with (2: bad input; 1: a failed measurement or a
diverged training) and text the message must hold (the option as the user typed it). Every row also checks that
nothing escaped as a traceback and that the message stays under 2 KB. A new option is guarded by adding rows.
`{name}` in an argument is a file made by the `places` fixture. Rows run in-process through the CLI; the
plug-in rows run in a subprocess (an import that raises is process-wide state).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import NamedTuple

import numpy as np
import pytest

MAX_MESSAGE_BYTES = 2048
HUGE = "9" * 30  # an integer no machine has
LONG = "x" * 5000  # 5,000 characters echoed back whole would flood a terminal


class Case(NamedTuple):
    args: tuple[str, ...]
    says: str  # text the message must contain: the option as typed, or what is wrong
    exit: int = 2


def case(*args: str, says: str, exit: int = 2) -> Case:
    return Case(tuple(args), says, exit)


NANO = "ViT-Nano/4"
CASES = {
    # ---- bench / max-batch / flops / env / doctor ------------------------------------------------------------
    "bench batch 0": case("bench", NANO, "-b", "0", says="--batch-size"),
    "bench batch huge": case("bench", NANO, "-b", HUGE, says="--batch-size"),
    "bench resolution inf": case("bench", NANO, "-r", "inf", says="--resolution"),
    "bench resolution negative": case("bench", NANO, "-r", "-32", says="--resolution"),
    "bench threads 0": case("bench", NANO, "--threads", "0", says="--threads"),
    "bench threads negative": case("bench", NANO, "--threads", "-3", says="--threads"),
    "bench min-seconds nan": case("bench", NANO, "--min-seconds", "nan", says="--min-seconds"),
    "bench max-seconds inf": case("bench", NANO, "--max-seconds", "inf", says="--max-seconds"),
    "bench window-steps 0": case("bench", NANO, "--window-steps", "0", says="--window-steps"),
    "bench warmup negative": case("bench", NANO, "--warmup", "-1", says="--warmup"),
    "bench compile-mode alone": case("bench", NANO, "--compile-mode", "max-autotune", says="needs --compile"),
    "bench unicode precision": case("bench", NANO, "--precision", "fp✓", says="--precision"),
    "bench unicode task": case("bench", NANO, "--task", "ïnfer", says="--task"),
    "bench unknown backend": case("bench", NANO, "--backend", "nope", says="--backend"),
    "bench empty model": case("bench", "", says="unknown model"),
    "bench long model": case("bench", LONG, says="unknown model"),
    "bench device absent": case("bench", NANO, "--device", "cuda:99", says="cuda:99"),
    "bench device unicode": case("bench", NANO, "--device", "gpü", says="--device"),
    "bench threads huge": case("bench", NANO, "-b", "1", "--threads", "100000", "--min-steps", "1",
                               "--min-seconds", "0.01", "--warmup", "0", says="threads 100000", exit=0),
    "max-batch memory negative": case("max-batch", NANO, "--memory-limit-gib", "-1", says="--memory-limit-gib"),
    "max-batch memory nan": case("max-batch", NANO, "--memory-limit-gib", "nan", says="--memory-limit-gib"),
    "max-batch timeout inf": case("max-batch", NANO, "--probe-timeout-s", "inf", says="--probe-timeout"),
    "max-batch size 0": case("max-batch", NANO, "--max-batch-size", "0", says="--max-batch-size"),
    "max-batch memory 1e300": case("max-batch", NANO, "--memory-limit-gib", "1e300", says="--memory-limit-gib"),
    "bench seconds 1e300": case("bench", NANO, "--min-seconds", "1e300", "--max-seconds", "1e300",
                                says="--min-seconds"),
    "bench seed negative": case("bench", NANO, "--seed", "-1", says="--seed"),
    "max-batch granularity 0": case("max-batch", NANO, "--granularity", "0", says="--granularity"),
    "flops classes 0": case("flops", NANO, "--num-classes", "0", "--no-count", says="--num-classes"),
    "flops resolution off-stride": case("flops", NANO, "-r", "7", "--no-count", says="--resolution: resolution 7"),
    "bench resolution off-stride": case("bench", NANO, "-r", "6", says="--resolution: resolution 6"),
    "fewshot data-path for digits": case("fewshot", "-m", NANO, "--data-path", "/nonexistent",
                                         says="--data-path: dataset 'digits' takes no path"),
    "flops images alone": case("flops", NANO, "--images", "10", "--no-count", says="--epochs"),
    "flops epochs inf": case("flops", NANO, "--images", "10", "--epochs", "inf", "--no-count", says="--epochs"),
    "flops epochs nan": case("flops", NANO, "--images", "10", "--epochs", "nan", "--no-count", says="--epochs"),
    "flops images negative": case("flops", NANO, "--images", "-5", "--epochs", "1", "--no-count",
                                  says="--images"),
    "env precision": case("env", "--precision", "fp8", says="--precision"),
    "env threads 0": case("env", "--threads", "0", says="--threads"),
    "env backend empty": case("env", "--backend", "", says="--backend"),
    "doctor device absent": case("doctor", "--device", "gpu:99", "--quick", "--backend", "torch",
                                 says="--device gpu:99"),
    "doctor device unicode": case("doctor", "--device", "ǵpu", "--quick", says="--device"),
    "doctor threads huge": case("doctor", "--threads", HUGE, "--quick", says="--threads"),
    "doctor precision": case("doctor", "--precision", "fp64", says="--precision"),
    "doctor backend unknown": case("doctor", "--backend", "nope", "--quick", says="--backend"),
    # ---- sweep / report / compare ------------------------------------------------------------------------------
    "sweep missing study": case("sweep", "{dir}/nope.yaml", "--dry-run", says="nope.yaml"),
    "sweep study is a directory": case("sweep", "{dir}", "--dry-run", says="is not a file"),
    "sweep study empty": case("sweep", "{empty}", "--dry-run", says="empty.yaml"),
    "sweep study not yaml": case("sweep", "{garbage}", "--dry-run", says="garbage.yaml"),
    "sweep study /dev/null": case("sweep", "/dev/null", "--dry-run", says="/dev/null"),
    "sweep results in /proc": case("sweep", "smoke", "--results", "/proc/x", says="--results"),
    "sweep results /dev/null": case("sweep", "smoke", "--results", "/dev/null", says="--results"),
    "sweep timeout 0": case("sweep", "smoke", "--timeout", "0", says="--timeout"),
    "report missing": case("report", "{dir}/none", says="none"),
    "report empty dir": case("report", "{dir}", says="no trial records"),
    "report out in /proc": case("report", "{results}", "--out", "/proc/x", says="--out"),
    "report out /dev/null": case("report", "{results}", "--out", "/dev/null", says="--out"),
    "report format unknown": case("report", "{results}", "--format", "pdf✓", says="--format"),
    "report non-finite row": case("report", "{nonfinite}", says="non-finite"),
    "compare non-finite row": case("compare", "{results}", "{nonfinite}", says="non-finite"),
    "compare missing": case("compare", "{dir}/a", "{dir}/b", says="a"),
    "compare threshold inf": case("compare", "{results}", "{results}", "--threshold", "inf", says="--threshold"),
    "compare threshold negative": case("compare", "{results}", "{results}", "--threshold", "-1",
                                       says="--threshold"),
    "compare confidence 2": case("compare", "{results}", "{results}", "--confidence", "2", says="--confidence"),
    "compare format": case("compare", "{results}", "{results}", "--format", "ünï", says="--format"),
    # ---- pretrain / fewshot / finetune ---------------------------------------------------------------------------
    "pretrain tau inf": case("pretrain", "DeiT-Nano/4-dist", "--teacher", "R-Nano", "--distillation", "soft",
                             "--distill-tau", "inf", says="--distill-tau: Input should be a finite number, >= 0.05"),
    "pretrain tau 1e300": case("pretrain", "DeiT-Nano/4-dist", "--teacher", "R-Nano", "--distillation", "soft",
                               "--distill-tau", "1e300", says="--distill-tau"),
    "pretrain tau 0": case("pretrain", "DeiT-Nano/4-dist", "--teacher", "R-Nano", "--distill-tau", "0",
                           says="--distill-tau"),
    "pretrain lambda 2": case("pretrain", "DeiT-Nano/4-dist", "--teacher", "R-Nano", "--distill-lambda", "2",
                              says="--distill-lambda"),
    "pretrain teacher steps negative": case("pretrain", NANO, "--teacher", "R-Nano", "--teacher-steps", "-5",
                                            says="--teacher-steps"),
    "pretrain teacher unknown": case("pretrain", NANO, "--teacher", "R-Nänö", says="--teacher"),
    "pretrain teacher checkpoint dir": case("pretrain", NANO, "--teacher", "R-Nano", "--teacher-checkpoint",
                                            "{dir}", says="teacher"),
    "pretrain lr inf": case("pretrain", NANO, "--lr", "inf", says="--lr"),
    "pretrain lr 1e300": case("pretrain", NANO, "--lr", "1e300", says="--lr"),
    "pretrain lr negative": case("pretrain", NANO, "--lr", "-1", says="--lr"),
    "pretrain weight decay nan": case("pretrain", NANO, "--weight-decay", "nan", says="--weight-decay"),
    "pretrain label smoothing 1": case("pretrain", NANO, "--label-smoothing", "1", says="--label-smoothing"),
    "pretrain steps huge": case("pretrain", NANO, "--steps", HUGE, says="--steps"),
    "pretrain batch huge": case("pretrain", NANO, "-b", HUGE, says="--batch-size"),
    "pretrain seed negative": case("pretrain", NANO, "--seed", "-1", says="--seed"),
    "pretrain data seed negative": case("pretrain", NANO, "--data-seed", "-1", says="--data-seed"),
    "pretrain steps 0": case("pretrain", NANO, "--steps", "0", says="--steps"),
    "pretrain warmup too long": case("pretrain", NANO, "--steps", "5", "--warmup-steps", "9",
                                     says="--warmup-steps"),
    "pretrain decay unicode": case("pretrain", NANO, "--decay", "cösine", says="--decay"),
    "pretrain data unknown": case("pretrain", NANO, "--data", "imagenet✓", says="--data"),
    "pretrain classes garbage": case("pretrain", NANO, "--classes", "a-b", says="--classes"),
    "pretrain out in /proc": case("pretrain", NANO, "-o", "/proc/x.safetensors", says="--out"),
    "pretrain out /dev/null": case("pretrain", NANO, "-o", "/dev/null", says="--out"),
    "pretrain out pickle": case("pretrain", NANO, "-o", "{dir}/x.pt", says="--out"),
    "pretrain out empty": case("pretrain", NANO, "-o", "", says="--out"),
    "fewshot checkpoint missing": case("fewshot", "-c", "{dir}/none.safetensors", says="none.safetensors"),
    "fewshot checkpoint dir": case("fewshot", "-c", "{dir}", says="checkpoint"),
    "fewshot checkpoint /dev/null": case("fewshot", "-c", "/dev/null", says="/dev/null"),
    "fewshot checkpoint text": case("fewshot", "-c", "{garbage_ckpt}", says="safetensors"),
    "fewshot checkpoint nan": case("fewshot", "-c", "{nan_ckpt}", says="NaN or infinite"),
    "fewshot neither": case("fewshot", says="--checkpoint"),
    "fewshot shots 0": case("fewshot", "-m", NANO, "--shots", "0", says="--shots"),
    "fewshot shots text": case("fewshot", "-m", NANO, "--shots", "five", says="--shots"),
    "fewshot l2 inf": case("fewshot", "-m", NANO, "--l2-reg", "inf", says="--l2-reg"),
    "fewshot shots huge": case("fewshot", "-m", NANO, "--shots", HUGE, says="--shots"),
    "finetune batch huge": case("finetune", "-m", NANO, "-b", HUGE, says="--batch-size"),
    "fewshot seeds 0": case("fewshot", "-m", NANO, "--seeds", "0", says="--seeds"),
    "fewshot long classes": case("fewshot", "-m", NANO, "--classes", LONG, says="--classes"),
    "finetune lr grid inf": case("finetune", "-m", NANO, "--lr-grid", "inf", says="--lr-grid"),
    "finetune lr grid nan": case("finetune", "-m", NANO, "--lr-grid", "0.01,nan", says="--lr-grid"),
    "finetune lr grid 1e300": case("finetune", "-m", NANO, "--lr-grid", "1e300", says="--lr-grid"),
    "finetune lr grid empty": case("finetune", "-m", NANO, "--lr-grid", "", says="--lr-grid"),
    "finetune val fraction": case("finetune", "-m", NANO, "--val-fraction", "1.5", says="--val-fraction"),
    "finetune steps vs warmup": case("finetune", "-m", NANO, "--steps", "1", says="--warmup-steps"),
    "finetune checkpoint nan": case("finetune", "-c", "{nan_ckpt}", "--steps", "2", "--warmup-steps", "0",
                                    says="NaN or infinite"),
    # ---- inspect / models / plugins ------------------------------------------------------------------------------
    "inspect resolution 0": case("inspect", NANO, "-r", "0", says="--resolution"),
    "inspect images 0": case("inspect", NANO, "-n", "0", says="--images"),
    "inspect rollout negative": case("inspect", NANO, "--rollout", "-1", says="--rollout"),
    "inspect seed negative": case("inspect", NANO, "--seed", "-1", says="--seed"),
    "inspect threads huge": case("inspect", NANO, "--threads", HUGE, says="--threads"),
    "inspect out in /proc": case("inspect", NANO, "--out", "/proc/x", says="--out"),
    "inspect out /dev/null": case("inspect", NANO, "--out", "/dev/null", says="--out"),
    "inspect a directory": case("inspect", "{dir}", says="is a directory"),
    "inspect empty": case("inspect", "", says="SOURCE is empty"),
    "inspect unicode name": case("inspect", "ViT-Nänö/4", says="unknown model"),
    "inspect no attention": case("inspect", "R-Nano", says="no attention layers"),
    "inspect nan checkpoint": case("inspect", "{nan_ckpt}", says="NaN or infinite"),
    "inspect /dev/null": case("inspect", "/dev/null", says="/dev/null"),
    "inspect weights of no model": case("inspect", "{odd_ckpt}", says="fit no model in the table"),
    "inspect backend unknown": case("inspect", NANO, "--backend", "nope", says="nope"),
    "models family": case("models", "--family", "trånsformer", says="--family"),
}


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The files and directories rows name: an empty directory, an empty and a garbage study, a text file named
    like a checkpoint, a checkpoint with NaN weights, a results directory and one holding a non-finite row."""
    import json

    from test_compare import bench_record
    from test_no_silent_results import write_vitbench_checkpoint

    d = tmp_path_factory.mktemp("hostile")
    (d / "empty").mkdir()
    (d / "empty.yaml").write_text("")
    (d / "garbage.yaml").write_text("ünïcödé: [unclosed\n\x00")
    (d / "garbage.safetensors").write_text("not a tensor file ✓")
    from safetensors.numpy import save

    (d / "odd.safetensors").write_bytes(save({"pos_embed": np.zeros((1, 5, 8), np.float32)}))
    write_vitbench_checkpoint(d / "nan.safetensors", nan=True)
    for name, bad in (("results", False), ("nonfinite", True)):
        (d / name).mkdir()
        rows = []
        for rep in range(2):
            row = json.dumps(bench_record(repeat=rep).to_dict())
            rows.append(row.replace('"img_per_s": ', '"img_per_s": Infinity, "was": ') if bad else row)
        (d / name / "results.jsonl").write_text("\n".join(rows) + "\n")
    return {"dir": d / "empty", "empty": d / "empty.yaml", "garbage": d / "garbage.yaml",
            "garbage_ckpt": d / "garbage.safetensors", "odd_ckpt": d / "odd.safetensors", "nan_ckpt": d / "nan.safetensors",
            "results": d / "results", "nonfinite": d / "nonfinite"}


def check(args: tuple[str, ...], code: int, output: str, exc, c: Case) -> None:
    where = f"vitbench {' '.join(a[:60] for a in args)}"
    assert code == c.exit, f"{where}: exit {code}, expected {c.exit}\n{output[-3000:]}"
    assert exc is None or isinstance(exc, SystemExit), f"{where}: {exc!r}"
    assert "Traceback" not in output, f"{where}:\n{output[-3000:]}"
    if c.exit:  # a message, not a result table
        assert len(output.encode()) < MAX_MESSAGE_BYTES, f"{where}: {len(output.encode())} bytes\n{output[:3000]}"
    assert c.says in output, f"{where}: the message does not say {c.says!r}:\n{output}"


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_value(name, cli, places, one_torch_thread):
    c = CASES[name]
    args = tuple(a.format(**places) if "{" in a else a for a in c.args)
    r = cli(*args)
    check(args, r.exit_code, r.output, r.exception, c)


PLUGINS = {  # module source -> what the message must say
    "raises": ('raise RuntimeError("plug-in broken on purpose")\n', "RuntimeError: plug-in broken on purpose"),
    "missing_import": ("import vitbench_no_such_dependency\n", "vitbench_no_such_dependency"),
    "syntax": ("def f(:\n", "SyntaxError"),
}


PLUGIN_COMMANDS = {  # command -> whether it loads plug-ins (and so must stop at a broken one)
    ("plugins",): True, ("sweep", "smoke", "--dry-run"): True, ("flops", NANO, "--no-count"): True,
    ("models",): True,  # model families can be plug-ins (vitbench.models.families)
    ("bench", NANO, "--help"): False,
}


@pytest.mark.parametrize("kind", list(PLUGINS))
@pytest.mark.parametrize("command", list(PLUGIN_COMMANDS))
def test_broken_plugin(tmp_path, kind, command):
    """In a subprocess: a plug-in's import is process-wide. Commands that load plug-ins say which module is
    broken and why (exit 2); the others run."""
    source, says = PLUGINS[kind]
    (tmp_path / f"vb_plugin_{kind}.py").write_text(source)
    env = {**os.environ, "VITBENCH_PLUGINS": f"vb_plugin_{kind}",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    r = subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", *command],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    if not PLUGIN_COMMANDS[command]:  # no plug-in needed: a broken one does not stop it
        assert r.returncode == 0, r.stderr[-2000:]
        return
    check(command, r.returncode, r.stdout + r.stderr, None,
          Case(command, says=f"plug-in 'vb_plugin_{kind}' ($VITBENCH_PLUGINS) failed to import"))
    assert says in r.stderr
