"""The data source options of `bench --data`, declared once: bench names them in its signature, and `source`
turns them into DataConfig fields. The transfer commands (pretrain, fewshot, finetune) generate the same options,
spelled alike, from their tasks' fields by config path (vitbench.cli.path_options.data_options)."""

from __future__ import annotations

import typer

from vitbench.cli.options import OptionGroup, from_field, source_of
from vitbench.transfer.config import DataConfig, description_of
from vitbench.transfer.formats import format_options


def data_option(more: str = ""):
    """bench's --data option: no default (synthetic input unless given)."""
    return typer.Option(None, "--data", help=f"{description_of(DataConfig, 'name')}{more}")


# the data options of `bench --data` (the transfer commands generate theirs from their tasks' fields by config
# path, vitbench.cli.path_options, with these spellings); a help is its DataConfig field's description
DATA = from_field(DataConfig, "name", "--data", help=description_of(DataConfig, "name"))
DATA_PATH = from_field(DataConfig, "path", "--data-path", help=description_of(DataConfig, "path"))
DATA_TEST_PATH = from_field(DataConfig, "test_path", "--data-test-path",
                            help=description_of(DataConfig, "test_path"))
SKIP_CORRUPT = from_field(DataConfig, "skip_corrupt", "--skip-corrupt",
                          help=description_of(DataConfig, "skip_corrupt"))
DATA_WORKERS = from_field(DataConfig, "workers", "--data-workers", min=0,
                          help=description_of(DataConfig, "workers"))
CHECK_DATA = from_field(DataConfig, "check_data", "--check-data", help=description_of(DataConfig, "check_data"))
# each dataset format's own options (vitbench.transfer.formats), a flag each, named after its DataConfig field,
# its help the field's description: a format added there needs no line here. Parameter -> (type, option)
FORMAT_OPTIONS = {f: (DataConfig.model_fields[f].annotation,
                      from_field(DataConfig, f, f"--{f.replace('_', '-')}",
                                 help=DataConfig.model_fields[f].description))
                  for f in format_options()}
# ... as one group of a command's parameters (`formats`: a namespace, an attribute per option): bench --data
FORMATS = OptionGroup("formats", FORMAT_OPTIONS)


# DataConfig source field -> the option that sets it (a bad value is reported under the name the user typed),
# read from the options' own declarations (`from_field`)
SOURCE_OPTIONS = {source_of(o).path: o.param_decls[0] for o in (
    DATA, DATA_PATH, DATA_TEST_PATH, SKIP_CORRUPT, DATA_WORKERS, *(o for _, o in FORMAT_OPTIONS.values()),
    CHECK_DATA)}


def source(data, data_path, data_test_path, skip_corrupt, data_workers, image_column=None, label_column=None,
           tfds_name=None, check_data=False, **own) -> dict:
    """DataConfig's source fields from the shared data options (unset ones left to the config's defaults); `own`:
    the formats' other options (FORMAT_OPTIONS)."""
    out = {"name": data, "path": data_path, "test_path": data_test_path, "skip_corrupt": skip_corrupt,
           "workers": data_workers, "image_column": image_column, "label_column": label_column,
           "tfds_name": tfds_name, "check_data": check_data or None, **own}
    return {k: v for k, v in out.items() if v is not None}
