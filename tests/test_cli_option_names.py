"""The transfer commands name a bad config value by the option that set it, from one declaration: the map
(config path -> option) is read from each option's `from_field` declaration plus a short list of the options
that declare no field; every path in it is a real field of the command's config, so a renamed field cannot leave
a stale name behind."""

from __future__ import annotations

import pytest

from test_study_field_paths import _has_path
from vitbench.cli import transfer_cmd as t
from vitbench.cli.data_options import SOURCE_OPTIONS
from vitbench.tasks.fewshot import Fewshot
from vitbench.tasks.finetune import Finetune
from vitbench.protocols.pretrain import PretrainConfig
from vitbench.transfer.config import DataConfig


@pytest.mark.parametrize("names,config", [(t._pretrain_names, PretrainConfig)])
def test_every_named_path_is_a_config_field(names, config):
    m = names()
    # a key ending in '.' is a prefix rule; `masked_patch` is the objective union's tag in pydantic's locations
    paths = [p.replace(".masked_patch.", ".") for p in m if not p.endswith(".")]
    assert [p for p in paths if not _has_path(config, p)] == []
    assert all(m[f"data.{f}"] == flag for f, flag in SOURCE_OPTIONS.items())  # the data options, declared once
    assert all(flag.startswith("--") or flag in ("MODEL", "") for flag in m.values())


def test_every_downstream_flag_names_a_task_field():
    """fewshot and finetune name their tasks' fields by these options (the rest as --field-name): no stale name."""
    fields = {*Fewshot.Params.model_fields, *Finetune.Params.model_fields}
    assert [f for f in t._DOWNSTREAM_FLAGS if f not in fields] == []


def test_source_options_come_from_the_option_declarations():
    assert set(SOURCE_OPTIONS) <= set(DataConfig.model_fields)
    assert SOURCE_OPTIONS["workers"] == "--data-workers" and SOURCE_OPTIONS["name"] == "--data"


def test_a_bad_value_is_named_by_its_option(cli):
    r = cli("finetune", "--model", "ViT-Nano/4", "--lr-grid", "0.01,-1", "--steps", "1")
    assert r.exit_code == 2 and "--lr-grid value 2" in r.output, r.output


@pytest.mark.parametrize("cmd", [["pretrain", "ViT-Nano/4"], ["fewshot", "--model", "ViT-Nano/4"]])
def test_a_formats_own_option_is_a_flag_of_every_transfer_command(cli, cmd):
    """Made from vitbench.transfer.formats (cli/data_options.FORMAT_OPTIONS): named in errors by its flag."""
    r = cli(*cmd, "--synthetic-images", "40")  # the default dataset is digits
    says = "--synthetic-images: dataset 'digits' takes no synthetic_images"
    assert r.exit_code == 2 and says in r.output, r.output
