"""Persistent compile caches (issue 34): where they live, that a second process loads what the first compiled
and says so (compile_cached), the time budget of a row, lean trial processes (a trial imports only its own
backend's framework), and `vitbench ab` giving both sides the same cache."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from vitbench import paths
from vitbench.measure.peak import cache_path
from vitbench.measure.throughput import budget, from_cache
from vitbench.report.budget import PARTS, row_budget, time_budget
from tolerances_stat import f64

REPO = Path(__file__).resolve().parents[1]


def test_cache_dir_and_its_switch(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "c"))
    monkeypatch.delenv(paths.COMPILE_CACHE_ENV, raising=False)
    assert paths.cache_dir() == tmp_path / "c"
    assert paths.compile_cache_dir("jax-x") == tmp_path / "c" / "compile" / "jax-x"
    assert not (tmp_path / "c").exists()  # nothing created by asking
    for off in ("0", "off", "FALSE", "no"):
        monkeypatch.setenv(paths.COMPILE_CACHE_ENV, off)
        assert paths.compile_cache_dir("jax-x") is None
    monkeypatch.setenv(paths.COMPILE_CACHE_ENV, "1")
    assert paths.compile_cache_dir() == tmp_path / "c" / "compile"
    monkeypatch.delenv(paths.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_dir() == tmp_path / "xdg" / "vitbench"


def test_from_cache_reads_the_counters_honestly():
    assert from_cache((3, 1), (5, 1)) is True  # only loads
    assert from_cache((3, 1), (5, 2)) is False  # one compile: not from the cache
    assert from_cache((3, 1), (3, 1)) is None  # nothing went through the cache (eager)
    assert from_cache(None, None) is None  # a backend without a cache


def test_budget_parts_are_disjoint_and_add_up():
    # AOT (JAX): compile happened before the first step, inside to_first_step; lazy (torch.compile): in it
    # warm-up: 0.5 + (0.1 + 0.1): the literal 0.1 and the addition round (0.1 + 0.1 doubles exactly), and so does
    # the literal 0.7; the other parts are sums of small integers (exact). Lazy: 4.5 + 0.1 rounds at 4.6's size
    # (the - 4.0 after it is exact, Sterbenz)
    aot = budget(10.0, 4.0, True, 0.5, [0.1, 0.1], [1.0, 1.0])
    assert aot == {"setup": 6.0, "compile": 4.0, "warmup": f64(0.7, roundings=3), "timed": 2.0}
    lazy = budget(3.0, 4.0, False, 4.5, [0.1], [1.0])
    assert lazy == {"setup": 3.0, "compile": 4.0, "warmup": f64(0.6, roundings=3, scale=4.6), "timed": 1.0}
    row = pd.Series({"runner.wall_s": 15.0, "runner.startup_s": 1.0, "raw": {"budget_s": aot}})
    b = row_budget(row)
    # other = what is left: the warm-up's 3 roundings, the parts' sum (3) and the subtraction (1), then the sum
    # here (4); all of values up to the wall time (15 s)
    assert sum(b[p] for p in PARTS) == f64(15.0, roundings=11, scale=15.0)
    assert b["startup_s"] == 7.0 and b["other_s"] == f64(15.0 - 7.0 - 4.0 - 0.7 - 2.0, roundings=7, scale=15.0)
    flops = row_budget(pd.Series({"runner.wall_s": 3.0, "runner.startup_s": 0.5, "raw": {}}))
    assert flops["startup_s"] == 0.5 and flops["other_s"] == 2.5 and flops["compile_s"] == 0.0


def test_time_budget_table_has_a_total_line():
    df = pd.DataFrame([
        {"backend": "jax", "task": "infer", "runner.wall_s": 10.0, "runner.startup_s": 1.0,
         "compile_cached": True, "raw": {"budget_s": {"setup": 2.0, "compile": 3.0, "warmup": 1.0, "timed": 2.0}}},
        {"backend": "torch", "task": "flops", "runner.wall_s": 2.0, "runner.startup_s": 0.5, "compile_cached": None,
         "counted_cached": True, "raw": {}},
        {"backend": "torch", "task": "flops", "runner.wall_s": 2.0, "runner.startup_s": 0.5, "compile_cached": None,
         "counted_cached": False, "raw": {}},
    ])
    t = time_budget(df).set_index(["backend", "task"])
    assert t.loc[("all", "all"), "trials"] == 3 and t.loc[("all", "all"), "wall_s"] == 14.0
    # each cache's own rows: the compiled step of the JAX row, the counts of one flops row (not the other)
    assert t.loc[("all", "all"), "compile_cached"] == 1 and t.loc[("jax", "infer"), "compile_cached"] == 1
    assert t.loc[("all", "all"), "counted_cached"] == 1 and t.loc[("torch", "flops"), "counted_cached"] == 1
    assert t.loc[("jax", "infer"), "counted_cached"] == 0
    assert t.loc[("jax", "infer"), "other_s"] == 1.0
    # exact: every part here is a multiple of 0.5, exact in binary, and so are their sums and differences
    assert t.loc[("all", "all"), list(PARTS)].sum() == 14.0


def test_time_budget_keeps_a_part_of_milliseconds():
    """A FLOP count's compile of 4 ms showed as 0 s (the table was rounded to 2 decimals, its CSV too): numbers
    are shown to 4 significant digits where they are shown (vitbench.numfmt) and kept whole in files."""
    from vitbench.report.render import markdown_table

    df = pd.DataFrame([{"backend": "jax", "task": "flops", "runner.wall_s": 0.5, "runner.startup_s": 0.25,
                        "raw": {"budget_s": {"compile": 0.004}}}])
    t = time_budget(df).set_index(["backend", "task"])
    assert t.loc[("jax", "flops"), "compile_s"] == 0.004
    assert "| 0.004 |" in markdown_table(time_budget(df))


def test_a_part_a_row_does_not_record_is_blank_not_0():
    """Rows written before raw.budget_s existed (the project's own CI baseline) showed compile, warm-up and timed
    0 s and their whole time as "other": unmeasured parts are NaN (a blank cell), in their group and the total
    line; a wall time that is not a number the same. A row that times no step still has its parts at 0."""
    from vitbench.report.render import markdown_table

    old = {"backend": "torch", "task": "infer", "runner.wall_s": 2.0, "runner.startup_s": 0.5,
           "raw": {"step_s": [0.1, 0.1]}}
    flops = {"backend": "torch", "task": "flops", "runner.wall_s": 1.0, "runner.startup_s": 0.5, "raw": {}}
    b = row_budget(pd.Series(old))
    assert b["wall_s"] == 2.0 and all(math.isnan(b[p]) for p in PARTS), b
    garbled = row_budget(pd.Series({**flops, "runner.wall_s": "fast"}))
    assert math.isnan(garbled["wall_s"]) and math.isnan(garbled["other_s"]) and garbled["startup_s"] == 0.5
    t = time_budget(pd.DataFrame([old, flops])).set_index(["backend", "task"])
    assert t.loc[("torch", "flops"), "other_s"] == 0.5 and t.loc[("torch", "flops"), "compile_s"] == 0.0
    assert t.loc[("torch", "infer"), list(PARTS)].isna().all() and t.loc[("all", "all"), "timed_s"] != 0
    assert t.loc[("all", "all"), "wall_s"] == 3.0
    assert "| torch | infer | 1 | 2 |  |  |  |  |  |" in markdown_table(time_budget(pd.DataFrame([old])))


@pytest.fixture(scope="module")
def _peaks(tmp_path_factory) -> Path:
    """The module's one peaks.json: the fresh caches below share the device's matmul peak (a bench row's MFU asks
    every backend for it, the other one in a probe process: torch's imports alone take ~8 s), measured once
    instead of once per cache; what these tests check is the compile cache beside it."""
    return tmp_path_factory.mktemp("peaks") / cache_path().name


@pytest.fixture
def cache(tmp_path, _peaks) -> Path:
    """A fresh vitbench cache directory (empty compile caches), holding the module's peaks so far."""
    cache = tmp_path / "cache"
    cache.mkdir()
    if _peaks.exists():
        shutil.copy(_peaks, cache / _peaks.name)
    yield cache
    if (cache / _peaks.name).exists():
        shutil.copy(cache / _peaks.name, _peaks)


def _env(cache: Path, **extra) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), paths.CACHE_ENV: str(cache), **extra}
    env.pop(paths.COMPILE_CACHE_ENV, None)
    env.update(extra)
    return env


_BENCH = ("from vitbench.cli import main; main()", "bench", "ViT-Nano/4", "--resolution", "16",
          "--batch-size", "2", "--warmup", "0", "--min-steps", "2", "--min-seconds", "0", "--threads", "1", "--json")


def _bench(backend: str, env: dict, *extra: str) -> dict:
    p = subprocess.run([sys.executable, "-c", *_BENCH, "--backend", backend, *extra], env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.jax
@pytest.mark.timeout(600)
def test_a_second_jax_process_loads_what_the_first_compiled(cache):
    pytest.importorskip("jax")
    first = _bench("jax", _env(cache))
    second = _bench("jax", _env(cache))
    assert first["metrics"]["compile_cached"] is False and second["metrics"]["compile_cached"] is True
    where = Path(second["env"]["compile_cache"])
    assert where.parent == cache / "compile" and where.name.startswith("jax-") and any(where.iterdir())
    for rec in (first, second):  # compile time recorded either way, outside the timed steps
        assert rec["metrics"]["compile_s"] > 0 and rec["raw"]["budget_s"]["compile"] == rec["metrics"]["compile_s"]
    off = _bench("jax", _env(cache, **{paths.COMPILE_CACHE_ENV: "off"}))
    assert off["metrics"]["compile_cached"] is None and off["env"]["compile_cache"] is None


def test_an_eager_torch_step_compiles_nothing_through_the_cache(cache):
    rec = _bench("torch", _env(cache))
    assert rec["metrics"]["compile_cached"] is None and rec["metrics"]["compile_s"] is None
    assert Path(rec["env"]["compile_cache"]).name.startswith("torch-")


_TRIAL = """
import json, sys
from vitbench.executors import Job
from vitbench.tasks import get_task
from vitbench.trial import run_trial
backend, task = sys.argv[1], sys.argv[2]
T = get_task(task)
fields = dict(model="ViT-Nano/4", backend=backend, task=task, resolution=16)
if task != "flops":
    fields.update(batch_size=2, warmup_steps=0, min_steps=2, min_seconds=0, threads=1)
cfg = T.Params.model_validate(fields).config()
rec = run_trial(Job(key="k", config=cfg, repeat=0, study="s", study_sha="x", run_id="r", timeout_s=200,
                    task_module=T.__module__))
print(json.dumps({"status": rec.status.value, "modules": sorted(m for m in ("torch", "timm", "jax", "flax")
                                                                  if m in sys.modules),
                  "first_step": rec.runner.get("first_step_at_unix")}))
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend,task", [("torch", "infer"), ("torch", "flops"),
                                          pytest.param("jax", "infer", marks=pytest.mark.jax),
                                          pytest.param("jax", "flops", marks=pytest.mark.jax)])
def test_a_trial_imports_only_its_own_framework(cache, backend, task):
    pytest.importorskip(backend)
    p = subprocess.run([sys.executable, "-c", _TRIAL, backend, task], env=_env(cache),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok"
    own = {"torch": {"torch", "timm"}, "jax": {"jax", "flax"}}[backend]
    assert set(out["modules"]) == own  # the other framework never imported
    assert (out["first_step"] is not None) == (task == "infer")  # the start-up mark: only a timed step sets it


def test_ab_gives_both_sides_the_same_cache(monkeypatch, tmp_path):
    from vitbench.compare.ab import Side

    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "c"))
    monkeypatch.delenv(paths.COMPILE_CACHE_ENV, raising=False)
    sides = [Side(n, n, tmp_path / n, tmp_path / "s.yaml", sys.executable, "-") for n in ("baseline", "current")]
    envs = [s.env() for s in sides]
    for k in (paths.CACHE_ENV, paths.COMPILE_CACHE_ENV):
        assert envs[0][k] == envs[1][k]
    assert envs[0][paths.CACHE_ENV] == str(tmp_path / "c") and envs[0][paths.COMPILE_CACHE_ENV] == "1"
    monkeypatch.setenv(paths.COMPILE_CACHE_ENV, "off")
    assert {s.env()[paths.COMPILE_CACHE_ENV] for s in sides} == {"0"}
