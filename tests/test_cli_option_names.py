"""The transfer commands' options of their tasks' fields are generated from the fields' config paths
(vitbench.cli.path_options): each option's parameter is a real field of its task, its spellings the ones users
have plus the path's own, its type, default and help the field's; a bad value is named by the option that set
it, from that one declaration, so a renamed field cannot leave a stale name behind."""

from __future__ import annotations

import pytest

from vitbench.cli import transfer_cmd as t
from vitbench.cli.data_options import SOURCE_OPTIONS
from vitbench.cli.options import field_options, source_of
from vitbench.cli.path_options import cli_type, path_spelling
from vitbench.tasks.fewshot import Fewshot
from vitbench.tasks.finetune import Finetune
from vitbench.tasks.pretrain import Pretrain
from vitbench.transfer.config import DataConfig

GROUPS = [(t.UPSTREAM, Pretrain.Params), (t.DATA, Fewshot.Params), (t.DATA, Finetune.Params),
          (t.FEWSHOT, Fewshot.Params), (t.FINETUNE, Finetune.Params)]


@pytest.mark.parametrize("group,params", GROUPS)
def test_every_generated_option_is_its_fields_path_type_default_and_help(group, params):
    paths: dict[str, set[str]] = {}  # a field may have two (data_seed: data.seed, upstream.data.seed)
    for path, field in params.field_paths().items():
        paths.setdefault(field, set()).add(path)
    for field, (typ, info) in group.options.items():
        declared = params.model_fields[field]  # a KeyError: an option of no field
        spelled = {path_spelling(p) for p in paths.get(field, {field})}
        assert any(spelled & set(d.split("/")) for d in info.param_decls), (field, info.param_decls)
        assert typ is cli_type(declared.annotation), field
        assert info.help and info.help == declared.description, field
        src = source_of(info)
        if src.model_class() is params:  # else another config's default, named in the table (fewshot's shots)
            assert src.path == field and info.default == src.default(), field


def test_the_data_options_are_spelled_as_benchs():
    """The downstream data options and the upstream's take the spellings bench's data options have."""
    down = field_options(t.fewshot_cmd, Fewshot.Params.model_fields)
    up = field_options(t.pretrain_cmd, Pretrain.Params.model_fields)
    for path, flag in SOURCE_OPTIONS.items():
        assert down[Fewshot.Params.field_paths()[f"data.{path}"]] == flag
        assert up[Pretrain.Params.field_paths()[f"upstream.data.{path}"]] == flag


def test_a_path_spelling_sets_the_field_and_is_named_as_users_know_it(cli):
    r = cli("pretrain", "ViT-Nano/4", "--upstream.lr", "-1")
    assert r.exit_code == 2 and "--lr:" in r.output and "Traceback" not in r.output, r.output
    r = cli("fewshot", "--model", "ViT-Nano/4", "--data.workers", "-1")
    assert r.exit_code == 2 and "--data-workers" in r.output, r.output


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


def test_a_commands_own_declarations_name_the_fields_it_sets():
    """task_params(command=...) names a field by the command's own declaration of it (its flag, its argument),
    so no command writes a field's spelling a second time (bench, serve, max-batch, flops and inspect each kept
    a map of them beside their declarations)."""
    import typer

    from vitbench.cli.options import field_options, from_field
    from vitbench.tasks.bench import Infer

    def command(
        model: str = typer.Argument(...),
        warmup: int = from_field(Infer.Params, "warmup_steps", "--warmup", "-w"),
        min_steps: int = typer.Option(None, "-m", "--min-steps"),
        threads: int = typer.Option(None),
        as_json: bool = typer.Option(False, "--json"),
        plain: int = 3,
    ) -> None:
        """A command's parameters: an argument, a field under another flag, flags in any order, no flag."""

    assert field_options(command, Infer.Params.model_fields) == {
        "model": "MODEL", "warmup_steps": "--warmup", "min_steps": "--min-steps", "threads": "--threads"}


@pytest.mark.parametrize("argv, says", [
    (["bench", "ViT-Nano/4", "--warmup", "100000000"], "--warmup"),
    (["serve", "ViT-Nano/4", "--warmup", "100000000"], "--warmup"),
    (["flops", "ViT-Nano/4", "--epochs", "2", "--no-count"], "--images"),
    (["inspect", "ViT-Nano/4", "--images", "100000000"], "--images"),
])
def test_a_bad_value_is_named_by_the_flag_the_command_declares(argv, says):
    from typer.testing import CliRunner

    from vitbench.cli import app

    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output, r.output


def test_a_set_null_is_the_value_asked_for_not_the_default():
    """`--set classes=null` (every class, as `classes: null` in a study) fell back to the default classes: every
    value that was None was taken for a flag not given (found by a review). A flag not given still takes its
    default."""
    from vitbench.cli.common import task_params

    _, p = task_params("fewshot", sets=["classes=null", "upstream_classes=null"], model="ViT-Nano/4")
    assert p.classes is None and p.upstream_classes is None
    _, p = task_params("fewshot", model="ViT-Nano/4", classes=None, sets=["shots=5"])
    assert p.classes == "5-9" and p.upstream_classes == "0-4" and p.shots == 5


def test_a_field_the_command_has_no_flag_for_is_named_as_set():
    """fewshot has no --val-fraction: its messages told the user to use one (found by a review). A field of the
    task the command has no flag for is named `--set FIELD`, how the command takes it."""
    from vitbench.cli.common import task_params
    from vitbench.cli.transfer_cmd import finetune_cmd, fewshot_cmd

    _, p = task_params("fewshot", command=fewshot_cmd, model="ViT-Nano/4")
    assert (p.name_of("val_fraction"), p.name_of("shots")) == ("--set val_fraction", "--shots")
    _, p = task_params("finetune", command=finetune_cmd, model="ViT-Nano/4")
    assert p.name_of("val_fraction") == "--val-fraction"  # finetune's own flag
