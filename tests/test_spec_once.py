"""A trial parses its model name once: the task's Params resolve it (`Params.spec`), the task hands that ModelSpec
on in the Step (`Step.spec`), and the measurement and the backend read it from there."""

from __future__ import annotations

import sys

import pytest

import vitbench.models.specs as specs
from vitbench.backends.base import Step
from vitbench.tasks import get_task


def _count_parses(monkeypatch, fail: bool = False) -> list[str]:
    """Every call of get_spec with a name (the parse), wherever a module bound it; with `fail`, each one raises."""
    original = specs.get_spec
    calls: list[str] = []

    def counting(name, num_classes=None):
        if isinstance(name, str):
            calls.append(name)
            if fail:
                raise AssertionError(f"{name} parsed again")
        return original(name, num_classes)

    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "get_spec", None) is original:
            monkeypatch.setattr(module, "get_spec", counting)
    return calls


@pytest.mark.parametrize("task", ["infer", "flops", "inspect", "fewshot"])
def test_params_parse_the_model_once_and_carry_it(monkeypatch, task):
    params = get_task(task).Params
    calls = _count_parses(monkeypatch)
    p = params.model_validate({"model": "vit-nano/4", "task": task, "resolution": 16})
    assert calls == ["vit-nano/4"]
    assert p.model == "ViT-Nano/4" and p.spec == specs.get_spec("ViT-Nano/4")  # the canonical name, its spec


def test_a_model_that_does_not_parse_is_reported_as_before():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="unknown model 'nope'") as e:
        get_task("infer").Params.model_validate({"model": "nope", "task": "infer", "resolution": 17})
    assert [x["loc"] for x in e.value.errors()] == [()]  # on no field; the resolution check waits for a model
    with pytest.raises(ValidationError) as e:
        get_task("infer").Params.model_validate({"model": "ViT-Nano/4", "task": "infer", "resolution": 17})
    assert [x["loc"] for x in e.value.errors()] == [("resolution",)]  # named as the user wrote it


def test_a_step_resolves_its_model_once_and_keeps_it_out_of_its_config():
    step = Step("vit-nano/4", batch_size=2)
    assert step.model == "ViT-Nano/4" and step.spec.name == "ViT-Nano/4"
    assert "spec" not in step.to_dict() and Step(**step.to_dict()) == step
    given = Step.of({"model": "ViT-Nano/4"}, spec=step.spec)
    assert given.spec is step.spec
    with pytest.raises(ValueError, match="R-Nano"):  # a spec carried over to another model
        Step("ViT-Nano/4", spec=specs.get_spec("R-Nano"))


@pytest.mark.parametrize("task", ["infer", "train"])
def test_a_bench_trial_parses_nothing_after_its_params(monkeypatch, task):
    pytest.importorskip("torch")
    t = get_task(task)
    p = t.Params.model_validate({"model": "ViT-Nano/4", "task": task, "backend": "torch", "batch_size": 2,
                                 "warmup_steps": 0, "min_steps": 2, "min_seconds": 0, "threads": 1})
    _count_parses(monkeypatch, fail=True)  # from here on, any parse fails the trial
    rec = t().run(p)
    assert rec.status.value == "ok", rec.error
    assert rec.config["model"] == "ViT-Nano/4" and rec.metrics["img_per_s"] > 0


@pytest.mark.parametrize("task", ["pretrain", "fewshot"])
def test_a_transfer_trial_parses_its_model_once(monkeypatch, task):
    """The upstream PretrainConfig takes the spec the Params resolved (its validation context): one parse per
    trial; a teacher, another model, is parsed for itself."""
    params = get_task(task).Params
    calls = _count_parses(monkeypatch)
    p = params.model_validate({"model": "vit-nano/4", "task": task})
    cfg = p.upstream_config(task)
    assert calls == ["vit-nano/4"] and cfg.spec is p.spec
    calls.clear()
    p = params.model_validate({"model": "ViT-Nano/4", "task": task, "teacher": "R-Nano"})
    assert p.upstream_config(task).spec is p.spec and calls.count("ViT-Nano/4") == 1 and "R-Nano" in calls
