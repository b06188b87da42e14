"""docs/architecture.md's "Where an addition goes" table, checked by making the additions (issue 52, item 6): a
toy dataset format with its own option, a toy model family and a toy parallelism mode, each written in a
temporary place, each run through a tiny trial, and the files each needed counted against the table's row.

- The format is written the way the table says a format is added to vitbench (its module, its row in
  transfer/formats.py with its options model), in a copy of the package under tmp_path, and
  run there in a fresh interpreter (DataConfig, the study fields and the flags are made when the package is
  imported): the copy differs from the package in exactly the files the row names.
- The family and the parallelism mode are registered from outside vitbench (a module in tmp_path on sys.path,
  through the registries' register functions), so each is one file and vitbench is untouched.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vitbench.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
ARCH = REPO / "docs" / "architecture.md"


def table_row(first_cell: str) -> str:
    """The row of the "Where an addition goes" table whose first cell starts with `first_cell`."""
    for line in ARCH.read_text().splitlines():
        if line.startswith(f"| {first_cell}"):
            return line
    raise AssertionError(f"docs/architecture.md has no row for {first_cell!r}")


def files_in_row(row: str) -> int:
    """The number of files a row says its addition touches: its `files to touch: N` note."""
    found = re.findall(r"files to touch: (\d+)", row)
    assert len(found) == 1, f"the row should say 'files to touch: N' once: {row[:120]}"
    return int(found[0])


def changed_files(original: Path, copy: Path) -> list[str]:
    """Files added or changed in `copy` against `original` (bytecode caches left out)."""
    out = []

    def walk(cmp: filecmp.dircmp, rel: str) -> None:
        out.extend(f"{rel}{n}" for n in (*cmp.right_only, *cmp.diff_files) if n != "__pycache__")
        for name, sub in cmp.subdirs.items():
            if name != "__pycache__":
                walk(sub, f"{rel}{name}/")

    walk(filecmp.dircmp(original, copy, ignore=["__pycache__"]), "")
    return sorted(out)


def _insert_after(text: str, anchor: str, addition: str) -> str:
    assert text.count(anchor) == 1, f"anchor not found once: {anchor!r}"
    return text.replace(anchor, anchor + addition)


# The toy format: images of vertical or horizontal stripes (two classes), `toy_stripes` images of each.
TOY_READER = '''
"""toy_stripes: two classes of 8 x 8 stripes (vertical, horizontal), `toy_stripes` images of each."""

import numpy as np
from pydantic import BaseModel

from vitbench.transfer.neutral import key_neutral
from vitbench.transfer.raw import in_memory


class ToyStripesOptions(BaseModel):
    toy_stripes: int = key_neutral(6, ge=2, le=1000, description="toy_stripes: images of each class.")


def read(cfg):
    n = cfg.toy_stripes
    rows = (np.arange(8) % 2).astype(np.float32)
    vertical, horizontal = np.tile(rows, (8, 1)), np.tile(rows[:, None], (1, 8))
    images = np.stack([vertical, horizontal] * n)[..., None] * np.linspace(0.5, 1, 2 * n)[:, None, None, None]
    return in_memory(images.astype(np.float32), np.array([0, 1] * n), ["vertical", "horizontal"])
'''

RUN_FORMAT = '''
import json, sys
import typer.main
from vitbench.cli import app
from vitbench.errors import ConfigError
from vitbench.study import parse_study
from vitbench.tasks import get_task
from vitbench.tasks.fewshot import Fewshot
from vitbench.transfer.config import DataConfig, validated
from vitbench.transfer.sources import read_source

study = parse_study("name: s\\ndefaults: {model: ViT-Nano/4, backend: torch, device: cpu, threads: 1, "
                    "pretrain_steps: 2, pretrain_batch_size: 8, upstream_classes: ''}\\n"
                    "axes:\\n  task: [pretrain]\\n  upstream_dataset: [toy_stripes]\\n"
                    "  upstream.data.toy_stripes: [12]\\n")
config = study.trials[0].config
task = get_task("pretrain")
record = task().run(task.Params.model_validate(config))
try:
    validated(DataConfig, {"name": "digits", "toy_stripes": 3}, "t")
    refused = ""
except ConfigError as e:
    refused = str(e)
commands = {c.name: c for c in typer.main.get_command(app).commands.values()}
json.dump({"config": config, "status": str(record.status.value), "images": len(read_source(
              DataConfig(name="toy_stripes", toy_stripes=5)).pool),
           "refused": refused, "downstream_field": "toy_stripes" in Fewshot.Params.model_fields,
           "flags": {n: any("--toy-stripes" in p.opts for p in commands[n].params)
                     for n in ("pretrain", "fewshot", "finetune", "bench")}}, sys.stdout)
'''


@pytest.mark.timeout(300)
def test_a_dataset_format_with_its_own_option_touches_the_files_its_row_names(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "vitbench", tree / "vitbench", ignore=shutil.ignore_patterns("__pycache__"))
    transfer = tree / "vitbench" / "transfer"
    # the addition, as the row says: its module (its options model and its reader), its row in formats.py
    (transfer / "toy_stripes.py").write_text(TOY_READER)
    formats = (transfer / "formats.py").read_text()
    (transfer / "formats.py").write_text(_insert_after(
        formats, '    Format("npz", _SOURCES + "npz"),\n',
        '    Format("toy_stripes", "vitbench.transfer.toy_stripes:read", path=False,\n'
        '           own="vitbench.transfer.toy_stripes:ToyStripesOptions"),\n'))

    changed = changed_files(REPO / "vitbench", tree / "vitbench")
    assert changed == ["transfer/formats.py", "transfer/toy_stripes.py"]
    assert len(changed) == files_in_row(table_row("a dataset format"))

    env = {**os.environ, "PYTHONPATH": str(tree), "VITBENCH_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
           "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", RUN_FORMAT], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    # the study field (written as its path), the trial, the reader reading the option, the refusal for another
    # format, the downstream study field and every data command's flag: none written outside the two files
    assert out["config"]["upstream_dataset"] == "toy_stripes" and out["config"]["upstream_toy_stripes"] == 12
    assert out["status"] == "ok" and out["images"] == 10
    assert "toy_stripes: dataset 'digits' takes no toy_stripes; toy_stripes is for toy_stripes" in out["refused"]
    assert out["downstream_field"] and out["flags"] == dict.fromkeys(("pretrain", "fewshot", "finetune", "bench"),
                                                                        True)


def outside_module(tmp_path: Path, monkeypatch, name: str, source: str):
    """`source` as the module `name` in tmp_path (on sys.path for this test), imported: its registrations run."""
    import importlib

    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


TOY_FAMILY = '''
    """A toy family: the mean colour of each p x p patch, averaged, then a linear head (3 k + k parameters)."""

    from dataclasses import dataclass

    from vitbench.models.analytic import Counts
    from vitbench.models.families import FamilyBuild, FamilyComputation, FamilyName, FamilyPlugin, register_family
    from vitbench.models.param_table import _linear
    from vitbench.models.specs import ModelSpec

    TOY = FamilyName("toy_pooled")


    @dataclass(frozen=True)
    class ToyArch:  # the family's own part of its specs (ModelSpec.arch)
        patch: int = 8


    def build_torch(spec, resolution, num_classes):
        import torch

        class Toy(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.head = torch.nn.Linear(3, num_classes)

            def forward(self, x):
                return self.head(x.mean(dim=(2, 3)))

        return Toy()


    def build_flax(spec, num_classes, dtype):
        raise NotImplementedError("torch only")


    register_family(FamilyPlugin(
        name=TOY, description="pooled colour -> linear", fields=("patch",), override_keys=("patch",),
        arch=ToyArch,
        rows=(ModelSpec(name="Toy-Pooled/8", family=TOY, tiny=True, resolution=16, num_classes=10,
                        arch=ToyArch(patch=8)),),
        build=FamilyBuild(torch=f"{__name__}:build_torch", flax=f"{__name__}:build_flax"),
        computation=FamilyComputation(counts=lambda s, r, k: Counts(3 * k + k, 3 * k),
                                      param_table=lambda s, r: _linear("head", "head"),
                                      stride=lambda s: s.arch.patch,
                                      feature_dim=lambda s: 3, describe=lambda s: "toy"),
        attention=False))
'''


def test_a_model_name_clash_between_families_names_both_modules(tmp_path, monkeypatch, scratch_registry):
    """A family taking ViT-Nano/4 said only "the name 'ViT-Nano/4' is taken by ViT-Nano/4": now both families and
    the modules that registered them, as a task clash does (registry.register)."""
    source = TOY_FAMILY.replace('name="Toy-Pooled/8"', 'name="ViT-Nano/4"')
    with pytest.raises(ConfigError) as err:
        outside_module(tmp_path, monkeypatch, "clashing_family", source)
    assert str(err.value) == (
        "model ViT-Nano/4 of family 'toy_pooled' (registered by clashing_family): the name 'ViT-Nano/4' is taken "
        "by ViT-Nano/4 of family 'vit', registered by vitbench.models.families.vit (vitbench); a model name "
        "belongs to one family: rename the row in clashing_family (replace=True replaces a family of the same "
        "name only)")
    from vitbench.models.families import family_names

    assert "toy_pooled" not in family_names()


def test_a_model_family_from_outside_is_one_module(tmp_path, monkeypatch, scratch_registry):
    outside_module(tmp_path, monkeypatch, "toy_family", TOY_FAMILY)
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".py"] == ["toy_family.py"]
    assert files_in_row(table_row("a model family")) == 1
    from vitbench.study import parse_study

    study = parse_study("name: s\ndefaults: {backend: torch, device: cpu, threads: 1, batch_size: 2, "
                        "warmup_steps: 1, min_steps: 2, min_seconds: 0, window_steps: 1}\n"
                        "axes:\n  model: [Toy-Pooled/8]\n  task: [infer, flops]\n")
    from vitbench.tasks import get_task

    rows = {}
    for trial in study.trials:
        task = get_task(trial.config["task"])
        rows[trial.config["task"]] = task().run(task.Params.model_validate(trial.config))
    assert {t: r.status.value for t, r in rows.items()} == {"infer": "ok", "flops": "ok"}
    assert rows["infer"].metrics["img_per_s"] > 0
    assert rows["flops"].metrics["params_m"] == pytest.approx(40 / 1e6)  # 3 k + k, k = 10: the family's count


TOY_PARALLEL = '''
    """A toy parallelism mode: every parameter replicated (as dp), placed by its own functions (counted)."""

    from vitbench.backends.parallel import ParallelMode, register_parallelism

    PLACED = []


    def jax_place(mesh, shape):
        from jax.sharding import NamedSharding, PartitionSpec

        PLACED.append(shape)
        return NamedSharding(mesh, PartitionSpec())


    def torch_place(model, device):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)


    register_parallelism(ParallelMode("toy_replicated", "every parameter replicated (a toy)",
                                      {"jax": f"{__name__}:jax_place", "torch": f"{__name__}:torch_place"}))
'''

RUN_PARALLEL = '''
import json, sys
from vitbench.study import parse_study
from vitbench.tasks import get_task
import toy_parallel

study = parse_study("name: s\\ndefaults: {model: ViT-Nano/4, backend: jax, device: cpu, threads: 1, "
                    "batch_size: 4, "
                    "devices: 2, parallelism: toy_replicated, warmup_steps: 1, min_steps: 2, min_seconds: 0, "
                    "window_steps: 1}\\naxes:\\n  task: [infer]\\n")
config = study.trials[0].config
task = get_task("infer")
record = task().run(task.Params.model_validate(config))
json.dump({"config": config, "status": record.status.value, "placed": len(toy_parallel.PLACED),
           "error": str(record.error)}, sys.stdout)
'''


@pytest.mark.timeout(300)
def test_a_parallelism_mode_from_outside_is_one_module(tmp_path, monkeypatch, scratch_registry):
    from vitbench.backends.parallel import parallelism_names
    from vitbench.study import parse_study

    outside_module(tmp_path, monkeypatch, "toy_parallel", TOY_PARALLEL)
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".py"] == ["toy_parallel.py"]
    assert files_in_row(table_row("a parallelism mode")) == 1
    assert parallelism_names() == ("dp", "fsdp", "toy_replicated")
    # the study field takes it; a backend it names no placement for refuses it when the study is parsed
    head = ("name: s\ndefaults: {model: ViT-Nano/4, device: cpu, batch_size: 4, devices: 2}\n"
            "axes:\n  task: [infer]\n")
    assert parse_study(head + "  backend: [torch]\n  parallelism: [toy_replicated]\n").trials
    with pytest.raises(ConfigError, match="parallelism.0.: unknown parallelism 'tp'; allowed: dp, fsdp, "
                                          "toy_replicated"):
        parse_study(head + "  backend: [torch]\n  parallelism: [tp]\n")
    with pytest.raises(ConfigError, match="backend 'onnxruntime'"):
        parse_study(head + "  backend: [onnxruntime]\n  parallelism: [toy_replicated]\n")

    # a trial through it, in a fresh interpreter (JAX starts with 2 host devices there), registered as an outside
    # plug-in is: through $VITBENCH_PLUGINS
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "OMP_NUM_THREADS": "1",
           "VITBENCH_PLUGINS": "toy_parallel"}
    env.pop("XLA_FLAGS", None)
    r = subprocess.run([sys.executable, "-c", RUN_PARALLEL], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["status"] == "ok", out["error"]
    assert (out["config"]["devices"], out["config"]["parallelism"]) == (2, "toy_replicated")
    assert out["placed"] > 0  # the mode's own placement placed the parameters


TOY_FORMAT_MODULE = '''
    """A dataset format written outside vitbench: its row, its options model and its reader, in one module. It is
    imported while vitbench's formats table is (before DataConfig is made from it), so vitbench's data modules
    are imported inside `read`."""

    from pydantic import BaseModel

    from vitbench.transfer.formats import Format
    from vitbench.transfer.neutral import key_neutral


    class ToyStripesOptions(BaseModel):
        toy_stripes: int = key_neutral(6, ge=2, le=1000, description="toy_stripes: images of each class.")


    FORMAT = Format("toy_stripes", f"{__name__}:read", path=False, own=ToyStripesOptions)


    def read(cfg):
        import numpy as np

        from vitbench.transfer.raw import in_memory

        n = cfg.toy_stripes
        rows = (np.arange(8) % 2).astype(np.float32)
        vertical, horizontal = np.tile(rows, (8, 1)), np.tile(rows[:, None], (1, 8))
        images = np.stack([vertical, horizontal] * n)[..., None] * np.linspace(0.5, 1, 2 * n)[:, None, None, None]
        return in_memory(images.astype(np.float32), np.array([0, 1] * n), ["vertical", "horizontal"])
'''


@pytest.mark.timeout(300)
def test_a_dataset_format_from_outside_is_one_module(tmp_path):
    """The same format as one module outside vitbench, named by an entry point of the group `vitbench.formats`
    (the package's metadata, as an installed plug-in has it): vitbench untouched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "toy_format.py").write_text(textwrap.dedent(TOY_FORMAT_MODULE))
    meta = outside / "toy_format-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-format\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text("[vitbench.formats]\ntoy_stripes = toy_format:FORMAT\n")
    assert [p.name for p in outside.iterdir() if p.suffix == ".py"] == ["toy_format.py"]
    assert "outside vitbench: 1" in table_row("a dataset format")

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(outside), str(REPO)]), "OMP_NUM_THREADS": "1",
           "VITBENCH_CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    r = subprocess.run([sys.executable, "-c", RUN_FORMAT], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["config"]["upstream_toy_stripes"] == 12 and out["status"] == "ok" and out["images"] == 10
    assert "toy_stripes is for toy_stripes" in out["refused"] and out["downstream_field"]
    assert all(out["flags"].values())


def test_an_outside_format_that_does_not_import_is_one_line_and_exit_2(tmp_path):
    """A broken plug-in (its module raises on import) named by a `vitbench.formats` entry point: every command says
    which entry point and why, exit 2, no traceback."""
    outside = tmp_path / "outside"
    meta = outside / "broken_format-0.1.dist-info"
    meta.mkdir(parents=True)
    (outside / "broken_format.py").write_text("raise RuntimeError('half-installed')\n")
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-format\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text("[vitbench.formats]\nbroken = broken_format:FORMAT\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(outside), str(REPO)])}
    r = subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", "models"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "broken_format:FORMAT" in r.stderr and "half-installed" in r.stderr
