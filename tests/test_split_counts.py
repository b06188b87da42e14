"""What a transfer run's data holds, per class and per split: a class with no training images is refused where
every protocol passes (vitbench.transfer.data.load_splits), a class with no test (or choosing val) images is
warned about, and fewshot / finetune rows carry the split counts, the class count and the class names
(Splits.row_fields, declared in vitbench.tasks.upstream)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from data_formats import digits_images, write_folder, write_npz, write_shards

FEWSHOT = ("fewshot", "-m", "ViT-Nano/4", "--objective", "none", "-r", "8", "--shots", "1", "--seeds", "1",
           "--threads", "1")
FINETUNE = ("finetune", "-m", "ViT-Nano/4", "--objective", "none", "-r", "8", "--steps", "1",
            "--warmup-steps", "0", "-b", "4", "--lr-grid", "0.01", "--seeds", "1", "--no-refit", "--threads", "1")


def _images(labels) -> tuple[np.ndarray, np.ndarray]:
    """8 px images (digits of 3 classes, repeated) under the given labels."""
    x, _ = digits_images(4, classes=3)
    labels = np.asarray(labels, np.int64)
    return x[np.arange(len(labels)) % len(x)], labels


def _splits(fmt: str, path, **cfg):
    from vitbench.transfer.data import load_splits

    return load_splits({"name": fmt, "path": str(path), "classes": None, **cfg})


def _refusal(fmt: str, path) -> str:
    from vitbench.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        _splits(fmt, path)
    return " ".join(str(e.value).split())


def test_a_label_range_with_gaps_is_refused_naming_the_empty_classes(tmp_path):
    """npz labelled 0/10/20: a 21-way head of 18 classes without an image was an ok row of finetune."""
    path = write_npz(tmp_path / "gaps.npz", _images([0, 10, 20] * 6), _images([0, 10, 20] * 2))
    text = _refusal("npz", path)
    assert "18 of its 21 classes have no training images" in text, text
    assert "'1' (1), '2' (2)" in text and "... (18 in all)" in text, text  # a bounded list
    assert "'19'" not in text, text
    assert "--classes 0,10,20" in text and str(path) in text, text


def test_a_test_class_the_train_split_lacks_is_refused(tmp_path, monkeypatch):
    """A test split holding class 2, which train has no image of (an npz's was read so: the accuracy was capped
    at 2/3): refused by load_splits whatever the reader lets through."""
    import vitbench.transfer.data as data
    from vitbench.transfer.raw import in_memory

    (x, y), (xt, yt) = _images([0, 1] * 6), _images([0, 1, 2] * 2)
    monkeypatch.setattr(data, "read_source", lambda cfg: in_memory(x, y, ["0", "1", "2"], xt, yt))
    text = _refusal("npz", tmp_path / "extra.npz")
    assert "1 of its 3 classes have no training images: '2' (2)" in text, text
    assert "the test split holds 2 images of 1 of them" in text and "--classes 0,1" in text, text


def test_a_shard_label_range_with_a_gap_is_refused(tmp_path):
    """webdataset .cls labels 0, 1, 3: class 2 had no image and the head 4 outputs."""
    x, y = _images([0, 1, 3] * 4)
    write_shards(tmp_path / "shards", "train", x, y, per_shard=100)
    text = _refusal("webdataset", tmp_path / "shards")
    assert "1 of its 4 classes have no training images: '2' (2)" in text and "--classes 0,1,3" in text, text


def test_chosen_classes_name_the_source_labels_to_keep(tmp_path):
    path = write_npz(tmp_path / "gaps.npz", _images([0, 10, 20] * 6), _images([0, 10, 20] * 2))
    from vitbench.errors import ConfigError

    empty = r"1 of its 3 classes have no training images: '5' \(1\).*--classes 0,20"
    with pytest.raises(ConfigError, match=empty):
        _splits("npz", path, classes=[0, 5, 20])
    assert _splits("npz", path, classes=[0, 10, 20]).num_classes == 3  # the suggestion is taken


@pytest.mark.parametrize("command", [FEWSHOT, FINETUNE])
def test_fewshot_and_finetune_refuse_a_class_without_training_images_alike(command, tmp_path, cli):
    path = write_npz(tmp_path / "gaps.npz", _images([0, 10, 20] * 6), _images([0, 10, 20] * 2))
    r = cli(*command, "--data", "npz", "--data-path", path, "--classes", "")
    assert r.exit_code == 2, r.output
    assert "18 of its 21 classes have no training images" in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output


def _one_image_class(tmp_path):
    """A folder dataset whose class '0' has one image: it goes to train, none to val or test."""
    x, y = _images([0] + [1, 2] * 8)
    write_folder(tmp_path, "folder", x, y)  # folder/<class>/*.png: no split of its own
    return tmp_path / "folder"


def test_classes_without_test_or_val_images_are_warned_about_naming_them(tmp_path):
    splits = _splits("folder", _one_image_class(tmp_path))
    assert splits.train.per_class_counts()[0] == 1 and splits.test.per_class_counts()[0] == 0
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        splits.warn_uncovered("the learning rate")
        splits.warn_uncovered(None)  # val chooses nothing: only the test split is named
    said = [" ".join(str(w.message).split()) for w in seen]
    assert len(said) == 3, said
    assert "the test split of folder:" in said[0] and "has no images of 1 of its 3 classes: '0' (0)" in said[0]
    assert "the accuracy is over the other classes" in said[0]
    assert "the val split of" in said[1] and "'0' (0); the learning rate is chosen on the other classes" in said[1]
    assert said[2] == said[0]


def test_finetune_warns_before_any_work(tmp_path, monkeypatch):
    """The protocol says it (the data is read before the upstream): finetune with an LR grid names val too."""
    from vitbench.errors import VitbenchWarning
    from vitbench.protocols.downstream import DownstreamConfig
    from vitbench.protocols.finetune import FinetuneConfig, finetune

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr(DownstreamConfig, "start", stop)
    cfg = FinetuneConfig(data={"name": "folder", "path": str(_one_image_class(tmp_path)), "classes": None},
                         lr_grid=[0.01, 0.03], batch_size=8, objective="none", checkpoint="unused")
    with pytest.warns(VitbenchWarning) as seen, pytest.raises(Stop):
        finetune(cfg)
    said = " | ".join(str(w.message) for w in seen)
    assert "the test split" in said and "the val split" in said and "'0' (0)" in said, said


def test_a_fewshot_row_says_its_split_counts_and_class_names_and_warns(tmp_path, cli):
    """One tiny run: the row can be checked against the disk, and the class with no test image is named."""
    from vitbench.tasks.upstream import SPLIT_LISTS, SPLIT_METRICS

    r = cli(*FEWSHOT, "--data", "folder", "--data-path", _one_image_class(tmp_path), "--classes", "", "--json")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "the test split of folder:" in text and "has no images of 1 of its 3 classes: '0' (0)" in text, text
    assert "the l2 regulariser is chosen on the other classes" in text, text
    m = json.loads(r.stdout)["metrics"]
    assert (m["train_images"], m["val_images"], m["test_images"]) == (11, 2, 4), m
    assert m["num_classes"] == 3 and m["class_names"] == ["0", "1", "2"], m
    assert {s.name for s in SPLIT_METRICS} | set(SPLIT_LISTS) <= set(m)


def test_row_fields_are_bounded():
    """A dataset of many classes names the first ROW_CLASS_NAMES, each cut short; num_classes counts them all."""
    from vitbench.transfer.data import ROW_CLASS_NAMES, ImageSet, Splits

    names = [f"class{i}" + "x" * 500 for i in range(300)]
    one = ImageSet(None, np.arange(300), np.arange(300), 300, names)
    fields = Splits(one, one.subset(np.arange(0)), one, "test").row_fields()
    assert fields["num_classes"] == 300 and len(fields["class_names"]) == ROW_CLASS_NAMES
    assert max(len(n) for n in fields["class_names"]) < 150 and fields["class_names"][1].startswith("class1x")


def test_every_row_field_is_declared_once():
    """Splits.row_fields' keys are the declared metrics of both transfer kinds, or a list named with its reason."""
    from vitbench.tasks import kind_metrics
    from vitbench.tasks.upstream import SPLIT_LISTS, SPLIT_METRICS
    from vitbench.transfer.data import ImageSet, Splits

    one = ImageSet(None, np.arange(2), np.arange(2), 2, ["a", "b"])
    names = {m.name for m in SPLIT_METRICS}
    assert set(Splits(one, one, one, "test").row_fields()) == names | set(SPLIT_LISTS)
    for kind in ("fewshot", "finetune"):
        assert names <= set(kind_metrics()[kind]) and not set(SPLIT_LISTS) & set(kind_metrics()[kind])
