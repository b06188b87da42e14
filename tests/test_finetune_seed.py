"""`seed` has one meaning in the transfer tasks (issue 52 item 5): the trial's, the upstream's; finetune's own
first seed is `finetune_seed`, which defaults to it (so trials written before it keep their keys and runs)."""

from __future__ import annotations

from vitbench.study.trials import trial_key
from vitbench.tasks.finetune import Finetune

BASE = {"task": "finetune", "model": "ViT-Nano/4", "backend": "torch", "seed": 3}


def test_without_its_own_seed_finetuning_starts_at_the_trials_seed_and_the_key_is_unchanged():
    p = Finetune.Params(**BASE)
    assert p.finetune_seed is None and p.first_finetune_seed() == 3
    assert "finetune_seed" not in p.config()  # key-neutral at its default: old trials keep their keys


def test_its_own_seed_is_the_finetunings_only_and_makes_another_trial():
    p = Finetune.Params(**BASE, finetune_seed=5)
    assert p.first_finetune_seed() == 5 and p.seed == 3  # the upstream's stays the trial's
    assert p.upstream_config("finetune").seed == 3
    assert p.config()["finetune_seed"] == 5
    assert trial_key(p.config()) != trial_key(Finetune.Params(**BASE).config())
