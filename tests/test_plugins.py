"""The plug-in shape: a backend and a task added from outside the package run through a real sweep, `vitbench
plugins` says where everything comes from, and backend names stay inside their packages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "plugin"


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXAMPLE), str(REPO), env.get("PYTHONPATH", "")) if p)
    env["VITBENCH_PLUGINS"] = "vitbench_toy"
    return env


def _vitbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(600)
def test_an_outside_backend_and_task_run_through_a_sweep_and_the_report(tmp_path):
    r = _vitbench("plugins", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = {(p["kind"], p["name"]): p for p in json.loads(r.stdout)}
    toy_backend, toy_task = rows[("backend", "numpy")], rows[("task", "tokens")]
    assert toy_backend["source"] == toy_task["source"] == "$VITBENCH_PLUGINS"
    assert toy_backend["module"] == "vitbench_toy" and toy_backend["capabilities"] == ["infer", "matmul_peak",
                                                                                         "memory"]
    assert toy_task["fields"] == {"model": None, "task": None, "resolution": None, "include_class_token": True}
    assert rows[("backend", "torch")]["source"] == "vitbench"

    res = tmp_path / "res"
    r = _vitbench("sweep", str(EXAMPLE / "toy.yaml"), "--results", str(res), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    from vitbench.tidy import load

    df = load(res)
    assert set(df["status"]) == {"ok"} and len(df) == 4 + 4  # 2 models x 2 backends infer; 2 x 2 tokens
    infer = df[df["task"] == "infer"].set_index(["model", "backend"])
    assert (infer["img_per_s"] > 0).all() and (infer["mfu"] > 0).all()
    tokens = df[df["task"] == "tokens"].set_index(["model", "resolution"])
    assert tokens.loc[("ViT-Nano/4", 32), "tokens"] == (32 // 4) ** 2 + 1
    cal = load(res, kinds=("calibration",))
    assert set(cal["backend"]) == {"numpy", "torch"}  # the toy backend is calibrated like any other

    r = _vitbench("report", str(res), "--no-plots", "--format", "md", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    md = (res / "report" / "report.md").read_text()
    assert "Sequence length and cost (toy plug-in)" in md and "Backends side by side" in md
    assert "numpy_vs_torch" in md  # the ratio column is derived from the registered backends


EXAMPLE_API = """
import warnings
warnings.filterwarnings("error", message=r"ModelSpec\\.", category=DeprecationWarning)  # spec.patch & co.
from vitbench.registry import load_plugins
load_plugins()
import vitbench_toy
import vitbench.models.specs as specs
from vitbench.backends.base import Step
step = Step(model="ViT-Nano/4", batch_size=2, resolution=16)
params = vitbench_toy.Tokens.Params.model_validate({"model": "ViT-Nano/4", "task": "tokens", "resolution": 32})
def parsed_again(*a, **k):
    raise AssertionError("the example parsed the model again (docs/plugins.md: use step.spec, p.spec)")
specs.get_spec = parsed_again
out = vitbench_toy.NumpyBackend().prepare(step).step()
print(out.shape, vitbench_toy.Tokens().run(params).metrics["tokens"])
"""


def test_the_example_uses_the_documented_api(tmp_path):
    """docs/plugins.md: the architecture is `step.spec` / `p.spec` (never the name parsed again) and its fields
    are `spec.arch.patch` (`spec.patch` is deprecated): the example does as it says."""
    r = subprocess.run([sys.executable, "-c", EXAMPLE_API], cwd=tmp_path, env=_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["(2,", "10)", str((32 // 4) ** 2 + 1)]


def test_a_study_asking_a_backend_for_what_it_cannot_do_fails_when_parsed(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("name: s\naxes:\n  model: [ViT-Nano/4, R-Nano]\n  backend: [numpy]\n  task: [train]\n")
    r = _vitbench("sweep", str(study), "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    msg = " ".join(r.stderr.split())
    assert "s.yaml:5: axes.task[0]: backend 'numpy' cannot train (it provides: infer, matmul_peak, memory)" in msg
    assert "s.yaml:3: axes.model[1]" in msg and "runs ViTs only" in msg


def test_backend_names_live_only_in_their_packages():
    """No file outside vitbench/backends/ and vitbench/models/ names a backend as a string."""
    from vitbench.backends.base import backend_names

    names = backend_names()
    pattern = re.compile(r"""["'](%s)["']""" % "|".join(map(re.escape, names)))
    offenders = []
    for path in (REPO / "vitbench").rglob("*.py"):
        rel = path.relative_to(REPO / "vitbench").as_posix()
        if rel.startswith(("backends/", "models/")):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{rel}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_unimportable_plugin_fails_only_commands_that_need_plugins(tmp_path):
    """Start-up and --version load no plug-in; a command that needs the backends says why in one line."""
    env = {**_env(), "VITBENCH_PLUGINS": "no_such_module"}

    def run(*args):
        return subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    version = run("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("vitbench ")
    plugins = run("plugins")
    assert plugins.returncode == 2
    assert "Traceback" not in plugins.stderr
    lines = plugins.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "no_such_module" in lines[0]



def test_a_plugin_that_exits_while_imported_is_an_error_not_a_silent_success(tmp_path):
    """sys.exit(0) in a plug-in's import ended `bench` with exit 0 and nothing measured (found by an audit)."""
    (tmp_path / "bad_exit0.py").write_text("import sys\nsys.exit(0)\n")
    env = {**_env(), "VITBENCH_PLUGINS": "bad_exit0", "PYTHONPATH": f"{tmp_path}:{_env().get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", "plugins"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "called sys.exit(0) while being imported" in r.stderr, r.stderr


def test_a_plugin_that_failed_to_import_fails_again_on_the_next_load(monkeypatch):
    """Not marked loaded after a failure: a fork server's children (which inherit its registry) and any later
    caller get the same error, not a registry silently missing the plug-in."""
    from vitbench import registry
    from vitbench.errors import PluginError

    monkeypatch.setattr(registry, "_STATE", registry._State())
    monkeypatch.setenv(registry.ENV_PLUGINS, "no_such_module")
    for _ in range(2):
        with pytest.raises(PluginError, match="no_such_module"):
            registry.load_plugins(registry.Kind.TASK)
    # every kind's built-ins are loaded (before any outside module: registry's docstring), the outside ones not
    assert registry._STATE.loaded == set(registry.Kind) and not registry._STATE.outside_loaded
    monkeypatch.delenv(registry.ENV_PLUGINS)
    registry.load_plugins(registry.Kind.TASK)  # the cause gone: it loads
    assert registry._STATE.outside_loaded


def test_a_built_in_module_that_failed_to_import_fails_again_on_the_next_load(monkeypatch):
    """A kind whose built-in module raised while imported is not marked loaded: the next caller gets the error
    again, not a registry silently missing that kind's plug-ins."""
    from vitbench import registry

    monkeypatch.setattr(registry, "_STATE", registry._State())
    monkeypatch.delenv(registry.ENV_PLUGINS, raising=False)
    monkeypatch.setitem(registry.BUILTIN_MODULES, registry.Kind.PARALLELISM, ("vitbench_no_such_builtin",))
    for _ in range(2):
        with pytest.raises(ModuleNotFoundError, match="vitbench_no_such_builtin"):
            registry.load_plugins(registry.Kind.PARALLELISM)
    assert registry.Kind.PARALLELISM not in registry._STATE.loaded


def _with_plugin(tmp_path: Path, name: str, source: str, *args: str, code: str | None = None):
    """Run `vitbench *args` (or the Python `code`) with the module `name` (`source`) as $VITBENCH_PLUGINS."""
    (tmp_path / f"{name}.py").write_text(source)
    env = {**_env(), "VITBENCH_PLUGINS": name, "PYTHONPATH": f"{tmp_path}{os.pathsep}{_env()['PYTHONPATH']}"}
    argv = ["-c", code] if code is not None else ["-c", "from vitbench.cli import main; main()", *args]
    return subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    return lines[0]


def _pooled(*edits: tuple[str, str]) -> str:
    """The example family's source (examples/family/vitbench_pooled.py) with `edits` (old, new) made."""
    source = (REPO / "examples" / "family" / "vitbench_pooled.py").read_text()
    for old, new in edits:
        assert old in source
        source = source.replace(old, new)
    return source


FAMILY_VIT = ('FamilyName("pooled_conv")', 'FamilyName("vit")')


def test_an_outside_family_taking_a_built_in_name_is_blamed_on_the_plugin(tmp_path):
    """Outside plug-ins were imported after the first kind asked for (backends, for `plugins`), before the
    built-in families: vitbench's own `vit` then failed with a traceback, or was the module told to pass
    replace=True (found by a hostile-input review)."""
    for command in ("plugins", "models"):
        msg = _one_line_error(_with_plugin(tmp_path, "fam_vit", _pooled(FAMILY_VIT), command))
        assert "family 'vit' is already registered by vitbench.models.families.vit (vitbench); plug-in " \
               "'fam_vit' ($VITBENCH_PLUGINS) must pass replace=True" in msg and "--family" not in msg, msg


def test_an_outside_family_that_replaces_a_built_in_one_replaces_it(tmp_path):
    source = _pooled(FAMILY_VIT, ("\nregister_family(FamilyPlugin(", "\nregister_family(replace=True, plugin="
                                                                     "FamilyPlugin("))
    r = _with_plugin(tmp_path, "fam_vit", source, "plugins", "--json")
    assert r.returncode == 0, r.stderr
    assert [(p["module"], p["source"]) for p in json.loads(r.stdout) if p["name"] == "vit"] == [
        ("fam_vit", "$VITBENCH_PLUGINS")]
    r = _with_plugin(tmp_path, "fam_vit", source, "models", "--family", "vit", "--json")
    assert r.returncode == 0, r.stderr
    assert [m["name"] for m in json.loads(r.stdout)] == ["Pooled-Conv-8/4", "Pooled-Conv-16/8"]


def test_an_outside_model_named_as_a_built_in_or_another_of_its_rows_is_blamed_on_the_plugin(tmp_path):
    """A row name clashing with a built-in row named vitbench's family as the one to rename; two rows of the
    plug-in under one name were taken silently (one of them unreachable)."""
    msg = _one_line_error(_with_plugin(tmp_path, "fam_row", _pooled(('"Pooled-Conv-8/4"', '"ViT-Nano/4"')),
                                       "plugins"))
    assert "model ViT-Nano/4 of family 'pooled_conv' (registered by plug-in 'fam_row' ($VITBENCH_PLUGINS)): " \
           "the name 'ViT-Nano/4' is taken by ViT-Nano/4 of family 'vit'" in msg and "rename the row in fam_row" \
           in msg, msg
    msg = _one_line_error(_with_plugin(tmp_path, "fam_twice", _pooled(('"Pooled-Conv-16/8"', '"pooled_conv_8_4"')),
                                       "models"))
    assert "(registered by plug-in 'fam_twice' ($VITBENCH_PLUGINS)): its name 'pooled_conv_8_4' is also model " \
           "Pooled-Conv-8/4's" in msg and "rename one in fam_twice" in msg, msg


TASK_INFER = """
from vitbench.registry import Kind, register
class Infer:
    name = "infer"
register(Kind.TASK, "infer", Infer{replace})
"""
EXECUTORS_THEN_TASKS = """
from vitbench import registry
registry.load_plugins(registry.Kind.EXECUTOR)  # the outside plug-ins with it, before the built-in tasks
print(registry.entry(registry.Kind.TASK, "infer").module)
"""


@pytest.mark.parametrize("replace", [True, False])
def test_an_outside_task_taking_a_built_in_name_whatever_kind_loads_first(tmp_path, replace):
    """With replace=True it replaces the built-in (which was imported after it and refused); without, the error
    names the plug-in, not vitbench.tasks.bench."""
    r = _with_plugin(tmp_path, "my_infer", TASK_INFER.format(replace=", replace=True" if replace else ""),
                     code=EXECUTORS_THEN_TASKS)
    if replace:
        assert r.returncode == 0 and r.stdout.split() == ["my_infer"], r.stderr
    else:
        assert r.returncode == 1 and "PluginError: task 'infer' is already registered by vitbench.tasks.bench " \
               "(vitbench); plug-in 'my_infer' ($VITBENCH_PLUGINS) must pass replace=True" in r.stderr, r.stderr


def test_a_plugin_raising_a_base_exception_of_its_own_is_one_line(tmp_path):
    """Not an Exception, so past every handler: a traceback (found by a hostile-input review)."""
    msg = _one_line_error(_with_plugin(tmp_path, "boom", "class Boom(BaseException):\n    pass\n\n\n"
                                       "raise Boom('x')\n", "plugins"))
    assert "plug-in 'boom' ($VITBENCH_PLUGINS) failed to import: Boom: x" in msg, msg


def _imports(path: Path, strings: bool = False) -> set[str]:
    """Every module `path` imports, at the top or inside a function; with `strings`, also every string constant
    that names a vitbench module (an import by name: importlib, a "module:function" target)."""
    import ast

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith("vitbench."):
            out.add(node.value.partition(":")[0])
    return out


@pytest.mark.parametrize("layer", ["tasks", "backends", "models", "transfer", "protocols", "measure"])
def test_lower_layers_import_no_higher_one(layer):
    """Layers go one way (docs/architecture.md): a task, backend, model, transfer or measurement module never
    imports the report, compare or the command line, not even inside a function or by a string naming the
    module (the report registers its own sections per record kind: vitbench.report.views)."""
    higher = ("vitbench.report", "vitbench.compare", "vitbench.cli", "vitbench.runner")
    bad = {f"{p.relative_to(REPO)}: {m}" for p in (REPO / "vitbench" / layer).rglob("*.py")
           for m in _imports(p, strings=True) if m.startswith(higher)}
    assert not bad
