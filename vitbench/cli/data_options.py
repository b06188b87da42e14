"""The data source options of every command that reads a dataset (pretrain, fewshot, finetune, bench),
declared once: each command names them in its signature, and `source` turns them into DataConfig fields."""

from __future__ import annotations

from typing import get_args

import typer

from vitbench.cli.options import from_field, source_of
from vitbench.transfer.config import DataConfig, DatasetName


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
IMAGE_COLUMN = from_field(DataConfig, "image_column", "--image-column",
                          help="hf: the image column (default: inferred).")
LABEL_COLUMN = from_field(DataConfig, "label_column", "--label-column",
                          help="hf: the label column (default: inferred).")
TFDS_NAME = from_field(DataConfig, "tfds_name", "--tfds-name", help="tfds: the dataset in the --data-path "
                       "data_dir, NAME[/CONFIG][:VERSION], e.g. cifar10 (default: the only one there).")


# DataConfig source field -> the option that sets it (a bad value is reported under the name the user typed),
# read from the options' own declarations (`from_field`)
SOURCE_OPTIONS = {source_of(o).path: o.param_decls[0] for o in (DATA, DATA_PATH, DATA_TEST_PATH, SKIP_CORRUPT,
                                                                 DATA_WORKERS, IMAGE_COLUMN, LABEL_COLUMN,
                                                                 TFDS_NAME, CHECK_DATA)}


def source(data, data_path, data_test_path, skip_corrupt, data_workers, image_column, label_column,
           tfds_name=None, check_data=False) -> dict:
    """DataConfig's source fields from the shared data options (unset ones left to the config's defaults)."""
    out = {"name": data, "path": data_path, "test_path": data_test_path, "skip_corrupt": skip_corrupt,
           "workers": data_workers, "image_column": image_column, "label_column": label_column,
           "tfds_name": tfds_name, "check_data": check_data or None}
    return {k: v for k, v in out.items() if v is not None}
