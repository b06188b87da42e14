"""A transfer study field is a declared alias of a nested config path (vitbench.tasks.upstream: UPSTREAM_PATHS,
DOWNSTREAM_PATHS): every alias names a real field on both sides, every upstream / downstream study field has
one, the configs are built from the tables, and a bad value is reported under the field the study wrote."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import BaseModel

from vitbench.errors import ConfigError
from vitbench.protocols.pretrain import PretrainConfig
from vitbench.tasks.fewshot import Fewshot
from vitbench.tasks.pretrain import Pretrain
from vitbench.tasks.upstream import _UPSTREAM_NAMED, DOWNSTREAM_PATHS, UPSTREAM_PATHS, Downstream, Upstream, nest
from vitbench.transfer.config import DataConfig

BASE = {"model": "ViT-Nano/4", "task": "infer"}


def _models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models_in(a)]


def _has_path(model: type[BaseModel], path: str) -> bool:
    """Whether dotted `path` names a field of `model` (through nested models, any alternative of a union)."""
    head, _, rest = path.partition(".")
    info = model.model_fields.get(head)
    if info is None or not rest:
        return info is not None
    return any(_has_path(m, rest) for m in _models_in(info.annotation))


@pytest.mark.parametrize("table,config,params", [(UPSTREAM_PATHS, PretrainConfig, Upstream),
                                                 (DOWNSTREAM_PATHS, DataConfig, Downstream)])
def test_every_alias_names_a_study_field_and_a_config_path(table, config, params):
    for field, path in table.items():
        assert field in Fewshot.Params.model_fields, field
        assert _has_path(config, path), (field, path)
    unaliased = set(params.model_fields) - set(table) - set(_UPSTREAM_NAMED) - {"objective"}
    assert not unaliased


def test_the_configs_are_built_from_the_tables():
    p = Fewshot.Params.model_validate({**BASE, "pretrain_lr": 0.003, "data_workers": 2, "upstream_classes": "0-2"})
    cfg = p.upstream_config("fewshot")
    assert (cfg.lr, cfg.data.classes) == (0.003, [0, 1, 2])
    assert p.downstream_data()["workers"] == 2 and nest(p, {"data_workers": "a.b"}) == {"a": {"b": 2}}


@pytest.mark.parametrize("task,fields,says", [
    (Pretrain, {"upstream_classes": "abc"}, "upstream_classes: classes 'abc'"),
    (Fewshot, {"data_test_path": "/tmp"}, "data_test_path: dataset 'digits' takes no test_path"),
    (Fewshot, {"upstream_path": "/tmp"}, "upstream_path: dataset 'digits' takes no path"),
    # the teacher's pre-training is the student's recipe: named by the student's field
    (Fewshot, {"teacher": "R-Nano", "upstream_tfds_name": "x"}, "upstream_tfds_name: dataset 'digits' takes no"),
])
def test_a_bad_value_is_named_by_the_study_field(task, fields, says):
    p = task.Params.model_validate({**BASE, **fields})
    with pytest.raises(ConfigError, match=f"task '{task.name}': invalid settings: {says}"):
        task().run(p)


def test_every_format_option_is_a_downstream_study_field_of_its_own_name():
    """A format's own option (vitbench.transfer.formats) is a study field with no line written for it, bounded as
    DataConfig bounds it and out of the key at its default."""
    from vitbench.transfer.formats import format_options

    for f in format_options():
        assert f in Downstream.model_fields and DOWNSTREAM_PATHS[f] == f, f
    p = Fewshot.Params.model_validate({**BASE, "dataset": "synthetic", "classes": None, "synthetic_images": 40})
    assert p.downstream_data()["synthetic_images"] == 40 and p.model_dump()["synthetic_images"] == 40
    assert "synthetic_images" not in Fewshot.Params.model_validate(BASE).model_dump()
    with pytest.raises(ValueError, match="synthetic_images"):
        Fewshot.Params.model_validate({**BASE, "synthetic_images": 3})  # DataConfig's bound: >= 10
