"""The dataset formats are one table (vitbench.transfer.formats): every name a config accepts has a row and a
reader, `read_source` reads a format by looking its reader up (a format added to the table is read with no
other change there), and a format's own option given to another format is refused naming the formats that read
it."""

from __future__ import annotations

import importlib
import sys
import textwrap
from typing import get_args

import numpy as np
import pytest

from vitbench.errors import ConfigError
from vitbench.transfer import formats
from vitbench.transfer.config import DataConfig, DatasetName, validated
from vitbench.transfer.sources import read_source


def test_every_format_has_a_reader_and_declares_only_config_fields():
    assert get_args(DatasetName) == tuple(formats.FORMATS)
    for f in formats.FORMATS.values():
        module, _, function = f.reader.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), f.name
        assert set(f.options) <= set(DataConfig.model_fields), f.name


def test_a_formats_options_model_is_in_its_readers_module_and_any_reader_imports_first():
    """A format's own options live beside its reader (the row names them 'module:Class'), and config.py is made
    from them: a reader's module imported first, in a fresh interpreter, must not reach config.py half-made (the
    cycle that kept the models in formats.py). One interpreter per module, each importing it first."""
    import subprocess

    owners = {f.name: f.own for f in formats.FORMATS.values() if f.own is not None}
    assert owners == {"synthetic": "vitbench.transfer.sources:SyntheticOptions",
                      "hf": "vitbench.transfer.hf:HfOptions", "tfds": "vitbench.transfer.tfds:TfdsOptions"}
    for f in formats.FORMATS.values():
        if f.own is not None:
            assert f.own_model().__module__ == f.reader.partition(":")[0], f.name
    readers = sorted({f.reader.partition(":")[0] for f in formats.FORMATS.values()} | {"vitbench.transfer.raw"})
    for module in readers:
        r = subprocess.run([sys.executable, "-c", f"import {module}; import vitbench.transfer.config as c; "
                                                  "print(len(c.DataConfig.model_fields))"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (module, r.stderr[-2000:])
        assert int(r.stdout) == len(DataConfig.model_fields), module


def test_the_entry_point_scan_runs_only_where_a_distribution_names_the_group(tmp_path):
    """formats.group_declared: the cheap look before the full entry-point scan (the scan is skipped where it says
    no, so it must say yes for every distribution that declares a format). A dist-info or egg-info whose
    entry_points.txt names the group: yes; other groups, no entry points, a missing or unreadable path entry: no.
    The outside format's whole path (found, scanned, run) is tests/test_additions.py's."""
    other, ours, egg, plain = (tmp_path / n for n in ("other", "ours", "egg", "plain"))
    (other / "tool-1.0.dist-info").mkdir(parents=True)
    (other / "tool-1.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\ntool = tool:main\n")
    (other / "lib-1.0.dist-info").mkdir()  # no entry points at all
    (other / "vitbench.formats.txt").write_text("[vitbench.formats]\n")  # not a metadata directory
    (ours / "toy-0.1.dist-info").mkdir(parents=True)
    (ours / "toy-0.1.dist-info" / "entry_points.txt").write_text("[vitbench.formats]\ntoy = toy:FORMAT\n")
    (egg / "toy.egg-info").mkdir(parents=True)
    (egg / "toy.egg-info" / "entry_points.txt").write_text("[vitbench.formats]\ntoy = toy:FORMAT\n")
    plain.mkdir()
    missing, a_zip = str(tmp_path / "nope"), str(tmp_path / "x.zip")
    assert not formats.group_declared([str(other), str(plain), missing, a_zip])
    assert formats.group_declared([str(other), str(ours)])
    assert formats.group_declared([missing, str(egg)])
    # this interpreter's own path: vitbench's tests install no outside format
    assert formats.group_declared() is False


@pytest.mark.parametrize("field,value,fmt", [("tfds_name", "x", "tfds"), ("image_column", "img", "hf"),
                                             ("synthetic_images", 20, "synthetic")])
def test_a_formats_own_option_is_refused_for_another_format(field, value, fmt):
    with pytest.raises(ConfigError, match=f"{field}: dataset 'digits' takes no {field}; {field} is for {fmt}"):
        validated(DataConfig, {"name": "digits", field: value}, "t")
    assert getattr(validated(DataConfig, {"name": fmt, field: value}, "t"), field) == value
    # the default is no setting: any format takes it
    validated(DataConfig, {"name": "digits", field: DataConfig.model_fields[field].default}, "t")


def test_read_source_reads_a_format_added_to_the_table(tmp_path, monkeypatch):
    """A toy format: its module (a reader) and its row; read_source finds it with no branch of its own."""
    (tmp_path / "toy_format.py").write_text(textwrap.dedent("""
        import numpy as np
        from vitbench.transfer.raw import in_memory

        def read(cfg):
            return in_memory(np.zeros((4, 2, 2, 1), np.float32), np.array([0, 1, 0, 1]), ["a", "b"])
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(formats.FORMATS, "toy", formats.Format("toy", "toy_format:read", path=False))
    try:
        raw = read_source(DataConfig.model_construct(name="toy"))
    finally:
        sys.modules.pop("toy_format", None)
    assert raw.class_names == ["a", "b"] and np.array_equal(raw.labels, [0, 1, 0, 1]) and len(raw.pool) == 4


def test_a_formats_own_option_is_generated_everywhere_it_is_set():
    """docs/architecture.md's row for a dataset format: its option, declared in DataConfig and named in its row,
    is a downstream study field, an upstream one (upstream_<option>), a field of train's real-input run
    (real_input_<option>) and a flag of every command that reads a dataset, with no line written for it there."""
    import typer.main

    from vitbench.cli import app
    from vitbench.cli.data_options import FORMAT_OPTIONS
    from vitbench.tasks.bench import Train
    from vitbench.tasks.fewshot import Fewshot
    from vitbench.tasks.upstream import DOWNSTREAM_PATHS, UPSTREAM_PATHS

    commands = {c.name: c for c in typer.main.get_command(app).commands.values()}
    for f in formats.format_options():
        assert DOWNSTREAM_PATHS[f] == f and UPSTREAM_PATHS[f"upstream_{f}"] == f"data.{f}", f
        assert {f, f"upstream_{f}"} <= set(Fewshot.Params.model_fields), f
        assert f"real_input_{f}" in Train.Params.model_fields, f
        flag = f"--{f.replace('_', '-')}"
        assert f in FORMAT_OPTIONS, f
        for name in ("pretrain", "fewshot", "finetune", "bench"):
            assert any(flag in p.opts for p in commands[name].params), (name, flag)
