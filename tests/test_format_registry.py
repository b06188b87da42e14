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
