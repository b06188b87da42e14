"""The persistent value cache (vitbench.value_cache, issue 34): every part of the key misses when it changes, a
bad entry is a miss and never a crash, the compile caches' switch turns it off, and the values it keeps (FLOP
counts, JAX's parameter shapes) are exactly the ones computed afresh."""

from __future__ import annotations

import json
import os

import pytest

from vitbench import paths, value_cache

REQUEST = {"model": "ViT-Nano/4", "resolution": 16, "num_classes": 10, "precision": "fp32", "device": "cpu"}


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(paths.COMPILE_CACHE_ENV, raising=False)
    return tmp_path / "cache" / value_cache.SUBDIR


class Counter:
    """compute() for the cache: how often it ran, a new value each time (so a wrong hit shows)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict:
        self.calls += 1
        return {"macs": 1.5e6 + self.calls, "shape": [3, 4]}


def _get(compute, request=REQUEST, frameworks=("numpy",)):
    return value_cache.remembered("test", request, frameworks, compute)


def test_a_second_ask_hits_with_the_same_value_and_time(cache):
    c = Counter()
    first, second = _get(c), _get(c)
    assert c.calls == 1 and not first.cached and second.cached
    assert second.value == first.value and second.at == first.at
    assert [p.parent.name for p in cache.rglob("*.json")] == ["test"]


def _changes(monkeypatch):
    """One change per key component: each must make the cache miss."""
    yield "source", lambda: monkeypatch.setattr(value_cache, "source_hash", lambda: "another source")
    yield "framework version", lambda: monkeypatch.setattr(value_cache, "distribution_version", lambda d: "0.0")
    # each appended to, or flipped from, what this process has (a JAX backend's set-up sets XLA_FLAGS)
    flags = os.environ.get("XLA_FLAGS", "")
    yield "XLA_FLAGS", lambda: monkeypatch.setenv("XLA_FLAGS", f"{flags} --xla_cpu_enable_fast_math=false".strip())
    x64 = "0" if os.environ.get("JAX_ENABLE_X64") == "1" else "1"
    yield "JAX config", lambda: monkeypatch.setenv("JAX_ENABLE_X64", x64)
    tune = "0" if os.environ.get("TORCHINDUCTOR_MAX_AUTOTUNE") == "1" else "1"
    yield "inductor config", lambda: monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", tune)
    yield "CPU model", lambda: monkeypatch.setattr(value_cache, "cpu_model", lambda: "another CPU")
    yield "architecture", lambda: monkeypatch.setattr(value_cache.platform, "machine", lambda: "riscv64")


@pytest.mark.parametrize("component", ["source", "framework version", "XLA_FLAGS", "JAX config",
                                       "inductor config", "CPU model", "architecture"])
def test_a_change_of_any_key_component_misses(cache, monkeypatch, component):
    c = Counter()
    _get(c)
    dict(_changes(monkeypatch))[component]()
    again = _get(c)
    assert c.calls == 2 and not again.cached
    assert _get(c).cached and c.calls == 2  # then kept under the new key


def test_a_plug_in_backends_compiler_environment_keys_the_cache(cache, monkeypatch):
    """The variables a compiler reads are each backend's to declare (BackendSpec.compiler_env), not a list in
    this module: a backend from outside vitbench whose compiler reads MYCC_* gets a miss when one changes."""
    import dataclasses

    from vitbench import registry
    from vitbench.backends.spec import backend_spec

    monkeypatch.setitem(registry._STATE.entries, registry.Kind.BACKEND,
                        dict(registry._STATE.entries[registry.Kind.BACKEND]))  # the registration is undone after
    spec = dataclasses.replace(backend_spec("torch"), name="mycc", compiler_env=("MYCC_",))
    registry.register(registry.Kind.BACKEND, "mycc", spec, module=__name__)
    c = Counter()
    _get(c)
    monkeypatch.setenv("MYCC_OPT_LEVEL", "3")
    assert not _get(c).cached and c.calls == 2
    monkeypatch.setenv("OTHER_OPT_LEVEL", "3")  # a variable no compiler declares: the same key
    assert _get(c).cached and c.calls == 2


@pytest.mark.parametrize("field,value", [("precision", "bf16"), ("device", "gpu"), ("resolution", 32),
                                         ("num_classes", 100), ("model", "ViT-Nano/4[depth=3]")])
def test_a_change_of_the_request_misses(cache, field, value):
    c = Counter()
    _get(c)
    assert not _get(c, {**REQUEST, field: value}).cached and c.calls == 2


def test_another_framework_and_other_code_miss(cache):
    c = Counter()
    _get(c)
    assert not _get(c, frameworks=("numpy", "pytest")).cached and c.calls == 2
    # the files defining the objects named in `code` (a plug-in's backend outside the package)
    assert not value_cache.remembered("test", REQUEST, ("numpy",), c, code=(Counter,)).cached and c.calls == 3
    assert value_cache.remembered("test", REQUEST, ("numpy",), c, code=(Counter,)).cached and c.calls == 3


def _entry(cache):
    (path,) = cache.rglob("*.json")
    return path


@pytest.mark.parametrize("bad", [b"", b"{not json", b"\xff\xfe", b"[1, 2]", b'{"key": 1, "value": 2, "at": "x"}'])
def test_a_corrupt_entry_is_a_miss_and_is_written_again(cache, bad):
    c = Counter()
    _get(c)
    _entry(cache).write_bytes(bad)
    again = _get(c)
    assert not again.cached and c.calls == 2
    assert _get(c).value == again.value and c.calls == 2  # rewritten whole


def test_an_entry_with_another_key_or_a_non_finite_number_is_a_miss(cache):
    c = Counter()
    _get(c)
    path = _entry(cache)
    d = json.loads(path.read_text())
    path.write_text(json.dumps({**d, "key": {**d["key"], "request": {}}}))  # a collision or a hand edit
    assert not _get(c).cached and c.calls == 2
    d = json.loads(path.read_text())
    path.write_text(json.dumps({**d, "value": {**d["value"], "macs": float("nan")}}))  # json writes NaN
    assert "NaN" in path.read_text()
    assert not _get(c).cached and c.calls == 3


def test_a_value_decode_rejects_is_a_miss(cache):
    c = Counter()

    def decode(v):
        if not isinstance(v["shape"], list):
            raise TypeError("shape")
        return v

    value_cache.remembered("test", REQUEST, (), c, decode)
    path = _entry(cache)
    d = json.loads(path.read_text())
    path.write_text(json.dumps({**d, "value": {**d["value"], "shape": "3x4"}}))
    assert not value_cache.remembered("test", REQUEST, (), c, decode).cached and c.calls == 2


def test_an_unreadable_entry_or_cache_is_a_miss_not_a_crash(cache):
    c = Counter()
    _get(c)
    path = _entry(cache)
    path.unlink()
    path.mkdir()  # a directory where the entry should be: neither read nor replaced
    assert not _get(c).cached and not _get(c).cached and c.calls == 3


def test_an_unwritable_cache_still_gives_the_value(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(paths.CACHE_ENV, str(blocker))  # <cache>/values cannot be created under a file
    monkeypatch.delenv(paths.COMPILE_CACHE_ENV, raising=False)
    c = Counter()
    assert _get(c).value == {"macs": 1.5e6 + 1, "shape": [3, 4]} and not _get(c).cached and c.calls == 2


def test_a_value_json_cannot_hold_is_returned_and_not_kept(cache):
    assert value_cache.remembered("test", REQUEST, (), lambda: {"x": float("inf")}).value == {"x": float("inf")}
    assert not list(cache.rglob("*.json"))


def test_the_compile_caches_switch_turns_it_off(cache, monkeypatch):
    monkeypatch.setenv(paths.COMPILE_CACHE_ENV, "off")
    c = Counter()
    assert not _get(c).cached and not _get(c).cached and c.calls == 2
    assert value_cache.values_dir() is None and not cache.exists()


def test_the_source_hash_is_the_packages_python_files():
    from pathlib import Path

    import vitbench

    h = value_cache.source_hash()
    assert len(h) == 64 and h == value_cache.source_hash()
    assert Path(value_cache.__file__).parent == Path(vitbench.__file__).parent  # it hashes this package


def _plugin_package(root, name: str, body: str):
    (root / name).mkdir(exist_ok=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "sub.py").write_text(body)


def test_a_part_of_the_source_changes_with_its_own_files_and_the_top_level_only(tmp_path):
    """source_hash_of (an exported graph's key: vitbench.backends.graphs.GRAPH_SOURCE): a change in a named
    subpackage or a top-level module gives a new hash, a change in another subpackage does not."""
    for f, text in {"a.py": "x = 1\n", "models/m.py": "m = 1\n", "report/r.py": "r = 1\n"}.items():
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text(text)

    def h():
        value_cache.source_hash_of.cache_clear()
        return value_cache.source_hash_of(("models",), tmp_path)

    first = h()
    (tmp_path / "report" / "r.py").write_text("r = 2\n")
    assert h() == first
    (tmp_path / "models" / "m.py").write_text("m = 2\n")
    second = h()
    assert second != first
    (tmp_path / "a.py").write_text("x = 2\n")
    assert h() != second


def test_the_source_of_an_outside_package_it_is_told_of_is_in_the_key(cache, tmp_path, monkeypatch):
    """A module named in `modules` (a family plug-in outside vitbench) keys the value by its whole top-level
    package's source: an edit anywhere in it misses; vitbench's own modules are left to the source hash."""
    monkeypatch.syspath_prepend(str(tmp_path))
    _plugin_package(tmp_path, "vbplug_a", "WIDTH = 8\n")
    c = Counter()

    def get(modules):
        return value_cache.remembered("test", REQUEST, ("numpy",), c, modules=modules)

    assert not get(()).cached and get(("vitbench.models.families",)).cached and c.calls == 1
    assert not get(("vbplug_a.sub",)).cached and get(("vbplug_a",)).cached and c.calls == 2
    (tmp_path / "vbplug_a" / "sub.py").write_text("WIDTH = 16\n")
    value_cache._tree_hash.cache_clear()  # a new process: it hashes once per process
    assert not get(("vbplug_a.sub",)).cached and c.calls == 3
    (tmp_path / "vbplug_a" / "extra.py").write_text("\n")  # a file the named module does not import, same package
    value_cache._tree_hash.cache_clear()
    assert not get(("vbplug_a.sub",)).cached and c.calls == 4


def test_flop_counts_miss_when_an_outside_familys_source_changes(cache, tmp_path, monkeypatch):
    """The FLOP counts of a model of a family plug-in written outside the package (examples/family) are counted
    afresh after its source changes: its registering module and builders are in the key."""
    import shutil
    import sys
    from pathlib import Path

    from vitbench import registry
    from vitbench.backends.base import get_backend
    from vitbench.measure.flops import counts
    from vitbench.models.families import family_modules

    example = Path(__file__).resolve().parents[1] / "examples" / "family" / "vitbench_pooled.py"
    shutil.copy(example, tmp_path / "vbplug_pooled.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.load_plugins(registry.Kind.FAMILY)
    monkeypatch.setitem(registry._STATE.entries, registry.Kind.FAMILY,
                        dict(registry._STATE.entries[registry.Kind.FAMILY]))  # the registration is undone after
    try:
        import vbplug_pooled

        spec = vbplug_pooled.ROWS[0]
        assert "vbplug_pooled" in family_modules(spec.family)
        be = get_backend("torch")
        info = be.setup("cpu")
        first = counts(be, spec, 16, 10, info)
        assert not first.cached and counts(be, spec, 16, 10, info).cached
        with open(tmp_path / "vbplug_pooled.py", "a") as f:
            f.write("# edited\n")
        value_cache._tree_hash.cache_clear()
        again = counts(be, spec, 16, 10, info)
        assert not again.cached and again.value == first.value
    finally:
        sys.modules.pop("vbplug_pooled", None)
        value_cache._tree_hash.cache_clear()


# -- the values it keeps ---------------------------------------------------------------------------------------

def test_torch_flop_counts_from_the_cache_equal_fresh_ones(cache):
    from vitbench.backends.base import get_backend
    from vitbench.measure.flops import counts, flops
    from vitbench.models.specs import get_spec

    spec = get_spec("ViT-Nano/4")
    first, second = flops(spec, 16, backend="torch"), flops(spec, 16, backend="torch")
    assert first.metrics["counted_cached"] is False and second.metrics["counted_cached"] is True
    assert second.metrics["counted_at"] == first.metrics["counted_at"]
    counted = {k: v for k, v in first.metrics.items() if k.startswith(("gmacs_", "gflops_", "rel_diff_"))}
    assert counted and counted == {k: second.metrics[k] for k in counted}  # exactly the same numbers
    assert first.raw == second.raw
    be = get_backend("torch")
    hit = counts(be, spec, 16, spec.num_classes, be.setup("cpu"))
    assert hit.cached and hit.value == be.count_flops(spec, 16, spec.num_classes)  # = counted afresh, exactly
    assert flops(spec, 16, backend="torch", count=False).metrics.keys().isdisjoint({"counted_cached",
                                                                                    "counted_at"})


@pytest.mark.jax
def test_jax_flop_counts_from_the_cache_equal_fresh_ones(cache):
    pytest.importorskip("flax")
    from vitbench.backends.base import get_backend
    from vitbench.measure.flops import counts, flops
    from vitbench.models.specs import get_spec

    be = get_backend("jax")
    info = be.setup("cpu")
    spec = get_spec("ViT-Nano/4")
    first, second = counts(be, spec, 16, 10, info), counts(be, spec, 16, 10, info)
    assert not first.cached and second.cached and second.value == first.value
    assert second.value == be.count_flops(spec, 16, 10)  # exactly: XLA's count of the same module
    rec = flops(spec, 16, backend=be, num_classes=10)
    assert rec.metrics["counted_cached"] is True and rec.metrics["compile_cached"] is None  # nothing compiled


@pytest.mark.jax
@pytest.mark.parametrize("name", ["ViT-Nano/4", "R-Nano", "R-Nano+ViT-Micro/8"])
def test_jax_parameter_shapes_from_the_cache_give_the_same_weights(cache, monkeypatch, name):
    pytest.importorskip("flax")
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vitbench.backends.jax import backend
    from vitbench.models.flax import build_flax_model
    from vitbench.models.specs import get_spec

    spec = get_spec(name)
    model = build_flax_model(spec, 32, 10, dtype=jnp.float32)
    traced = backend.param_shapes(model, 32)
    fresh = backend.random_params(model, 32, 0)  # shapes traced here
    calls = []
    monkeypatch.setattr(backend, "param_shapes", lambda m, r: calls.append(r) or traced)
    first = backend.cached_param_shapes(model, spec, 32, 10, jnp.float32, "cpu")
    second = backend.cached_param_shapes(model, spec, 32, 10, jnp.float32, "cpu")
    assert calls == [32] and first == second == traced  # same paths, shapes and order
    assert backend.cached_param_shapes(model, spec, 32, 10, jnp.bfloat16, "cpu") == traced and calls == [32, 32]
    cached = backend.random_params(model, 32, 0, second)
    flat = jax.tree_util.tree_leaves_with_path
    assert [p for p, _ in flat(fresh)] == [p for p, _ in flat(cached)]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(flat(fresh), flat(cached), strict=True))
