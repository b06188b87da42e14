"""The data source options of every command that reads a dataset (pretrain, fewshot, finetune, bench --data),
declared once: each command names them in its signature, and `source` turns them into DataConfig fields."""

from __future__ import annotations

from typing import get_args

import typer

from vitbench.cli.options import OptionGroup, from_field, source_of
from vitbench.transfer.config import DataConfig, DatasetName
from vitbench.transfer.formats import format_options


def _dataset_names() -> str:
    return " | ".join(get_args(DatasetName))


def data_option(more: str = ""):
    """bench's --data option: no default (synthetic input unless given)."""
    return typer.Option(None, "--data", help=f"{_dataset_names()} (docs/datasets.md).{more}")


# the transfer commands' --data: DataConfig's default dataset
DATA = from_field(DataConfig, "name", "--data", help=f"{_dataset_names()} (docs/datasets.md).")
DATA_PATH = from_field(DataConfig, "path", "--data-path", help="Local path: a class folder, a shard pattern "
                       "(train-{000..099}.tar) or directory, an hf dataset directory, a cifar directory, an .npz.")
DATA_TEST_PATH = from_field(DataConfig, "test_path", "--data-test-path", help="webdataset / hf: the test split's "
                            "own path or pattern (default: test-*.tar or the test split beside --data-path).")
SKIP_CORRUPT = from_field(DataConfig, "skip_corrupt", "--skip-corrupt", help="Skip files that do not decode, counted "
                          "in the row (skipped_files) and on the terminal; default: stop (exit 2) naming the file.")
DATA_WORKERS = from_field(DataConfig, "workers", "--data-workers", min=0, help="Processes decoding and "
                          "preprocessing ahead (0: in this process). Results do not depend on it.")
CHECK_DATA = from_field(DataConfig, "check_data", "--check-data", help="Verify every image of the dataset before "
                        "any work (a PNG's CRCs, a JPEG at 1/8 scale): a corrupt file exits 2 at once, not partway "
                        "(or, with --skip-corrupt, is counted from the start). Reads the whole dataset.")
# each dataset format's own options (vitbench.transfer.formats), a flag each, named after its DataConfig field,
# its help the field's description: a format added there needs no line here. Parameter -> (type, option)
FORMAT_OPTIONS = {f: (DataConfig.model_fields[f].annotation,
                      from_field(DataConfig, f, f"--{f.replace('_', '-')}",
                                 help=DataConfig.model_fields[f].description))
                  for f in format_options()}
# ... as one group of a command's parameters (`formats`: a namespace, an attribute per option): every command
# that reads a dataset (pretrain, fewshot, finetune, bench --data)
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
