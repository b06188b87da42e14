"""`vitbench inspect` on hostile input: weights that overflow (NaN attention) stop every output form with one
line naming the quantity, exit 1 as fewshot does, nothing written; a one-patch grid lists the adjacent-patch
similarity as not applicable instead of reporting NaN."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from vitbench.errors import NonFiniteResult
from vitbench.models.specs import get_spec


@pytest.fixture(scope="module")
def huge_checkpoint(tmp_path_factory):
    """ViT-Nano/4 at 32 px, its attention projections scaled by 1e20: the logits overflow, the maps are NaN."""
    from test_inspect import _random_weights

    from vitbench.transfer.checkpoint import save_checkpoint

    w = _random_weights("ViT-Nano/4", 32)
    w = {k: v * np.float32(1e20) if "qkv.weight" in k else v for k, v in w.items()}
    return save_checkpoint(tmp_path_factory.mktemp("huge") / "huge.safetensors", w,
                           {"model": "ViT-Nano/4", "resolution": 32, "num_classes": 10})


@pytest.mark.parametrize("form", ["--json", "table", "--out"])
def test_non_finite_attention_stops_every_form_with_one_line(cli, tmp_path, huge_checkpoint, form,
                                                             one_torch_thread):
    out = tmp_path / "o"
    extra = {"--json": ["--json"], "table": [], "--out": ["--out", out]}[form]
    r = cli("inspect", huge_checkpoint, "--images", "1", "--rollout", "1", "--threads", "1", *extra)
    assert r.exit_code == 1, r.output  # a measurement that produced NaN: as fewshot's non-finite features
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "attention probabilities" in r.stderr and "NaN or infinite" in r.stderr, r.stderr
    assert "Traceback" not in r.output and "RuntimeWarning" not in r.stderr
    assert r.stdout.strip() == "" and not out.exists()


def test_zero_weight_on_every_patch_names_the_distance():
    """Finite maps with all weight on the class token: the distance is 0/0 per query; refused by name, never
    reported as NaN (a study row without its headline, a crash in the table)."""
    from test_inspect import _random_weights

    from vitbench.insight import inspect_model

    spec = get_spec("ViT-Nano/4")

    def on_class_token(weights, spec, resolution, images):
        t = (resolution // 4) ** 2 + 1
        a = np.zeros((spec.arch.depth, len(images), spec.arch.heads, t, t), np.float32)
        a[..., 0] = 1.0
        return a

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no raw RuntimeWarning of the 0/0 either
        with pytest.raises(NonFiniteResult, match="mean attention distance per layer and head"):
            inspect_model(_random_weights("ViT-Nano/4", 16), spec, 16, np.zeros((1, 16, 16, 3), np.float32),
                          on_class_token, num_rollout=0)


def test_one_patch_grid_lists_adjacent_similarity_as_not_applicable(cli, one_torch_thread):
    args = ("inspect", "ViT-Nano/4", "-r", "4", "--images", "1", "--rollout", "0", "--threads", "1")
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["grid"] == [1, 1]
    assert "posemb_adjacent_cos_sim" not in doc["headline"]
    assert "no adjacent patch" in doc["not_applicable"]["posemb_adjacent_cos_sim"]
    assert all(v is not None for v in doc["headline"].values())
    r = cli(*args)
    assert r.exit_code == 0, r.output
    assert not re.search(r"\bnan\b", r.stdout, re.IGNORECASE), r.stdout
    assert "not applicable, posemb_adjacent_cos_sim: a one-patch grid" in " ".join(r.stdout.split())


def test_more_rollout_maps_than_images_asked_for_are_refused():
    """`--rollout 10 -n 3` made 3 maps in silence (session 30's Left list): a rollout count asked for beyond the
    images is refused naming both; the default (4) beside fewer images is capped, as `-n 3` alone asks."""
    from vitbench.tasks import get_task

    params = get_task("inspect").Params
    trial = {"task": "inspect", "model": "ViT-Nano/4", "inspect_images": 3}
    with pytest.raises(ValueError, match="inspect_rollout 10 is more than the inspect_images 3 inspected"):
        params.model_validate({**trial, "inspect_rollout": 10})
    assert params.model_validate(trial).inspect_rollout == 4
