"""JAX backend: compiled steps, sync, training, precisions, errors, OOM, FLOPs, and the measurements through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("flax")  # the [jax] extra: jax, flax, optax
pytestmark = pytest.mark.jax

import jax  # noqa: E402
import numpy as np  # noqa: E402

from vitbench.backends.base import Step, StopRule, get_backend  # noqa: E402
from vitbench.backends.jax.backend import JaxBackend, JaxWorkload  # noqa: E402
from vitbench.errors import BackendUnavailable, ConfigError, VitbenchWarning  # noqa: E402
from vitbench.models.analytic import analytic_counts  # noqa: E402
from vitbench.models.specs import get_spec  # noqa: E402
from tolerances_stat import gamma  # noqa: E402

TINY = "ViT-Nano/4"


@pytest.fixture(scope="module")
def be() -> JaxBackend:
    b = get_backend("jax")
    b.setup("cpu")
    return b


def test_setup_reports_device_threads_versions_and_no_preallocation(be):
    info = be.setup("cpu")
    assert info["backend"] == "jax" and info["platform"] == "cpu"
    assert info["threads"] >= 1 and info["jax"] == jax.__version__ and info["flax"]
    # set before the GPU client exists (on GPU JAX would otherwise take 75 % of the memory up front)
    assert info["xla_preallocate"] == "false" == os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"]
    # and the allocator's pool not capped at jaxlib's default 75 % of the device
    assert info["xla_mem_fraction"] == "0.95" == os.environ["XLA_CLIENT_MEM_FRACTION"]


@pytest.mark.parametrize("user", [{}, {"XLA_CLIENT_MEM_FRACTION": "0.5"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}])
def test_the_gpu_pool_fraction_is_a_default_jaxlib_accepts(user):
    """The fraction is set unless the user set either spelling (jaxlib refuses both at once: a user's deprecated
    XLA_PYTHON_CLIENT_MEM_FRACTION would make every GPU client fail to start); jaxlib's own option builder reads the
    environment the models' import leaves."""
    code = ("import vitbench.models.flax as f, jaxlib.xla_client as x; "
            "print(x.generate_pjrt_gpu_plugin_options()['memory_fraction'], f.gpu_memory_settings()['xla_mem_fraction'])")
    env = {k: v for k, v in os.environ.items() if "MEM_FRACTION" not in k} | user
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    want = next(iter(user.values()), "0.95")
    assert out.stdout.split() == [str(float(want)), want]


def test_bad_devices_and_threads_are_clear_errors(be):
    with pytest.raises(ConfigError, match="allowed: cpu"):
        be.setup("npu")
    with pytest.raises(BackendUnavailable, match="no tpu"):
        be.setup("tpu")
    with pytest.raises(ConfigError, match="threads must be >= 1"):
        be.setup("cpu", threads=0)
    too_many = len(os.sched_getaffinity(0)) + 1
    with pytest.warns(VitbenchWarning, match="capped at"):  # capped, with a warning (the row records the request)
        try:
            assert be.setup("cpu", threads=too_many)["threads_requested"] == too_many
        except ConfigError as e:  # JAX already up in this process: its pools are fixed, and say so
            assert "already created" in str(e)
    n = be.setup("cpu")["threads"]
    if n > 1:
        with pytest.raises(ConfigError, match="already created"):  # XLA's pools are fixed once JAX is up
            be.setup("cpu", threads=n - 1)


FORK_OK = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # subprocess = fork + exec at once: safe


@FORK_OK
def test_threads_size_the_cpu_client_in_a_fresh_process():
    code = ("import os, json; from vitbench.backends.jax.backend import JaxBackend; "
            "before = sorted(os.sched_getaffinity(0)); info = JaxBackend().setup('cpu', threads=1); "
            "tids = os.listdir('/proc/self/task'); "
            "print(json.dumps({'threads': info['threads'], 'flags': info['xla_flags'], 'restored': all("
            "sorted(os.sched_getaffinity(int(t))) == before for t in tids)}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["threads"] == 1 and "--xla_cpu_multi_thread_eigen=false" in got["flags"]
    assert got["restored"]  # the affinity only sized XLA's pools; every thread gets all its CPUs back


def test_inference_workload_is_compiled_ahead_and_returns_logits(be):
    work = be.prepare(Step(TINY, batch_size=3))
    assert isinstance(work, JaxWorkload) and work.batch_size == 3
    assert work.compile_s > 0 and work.lower_s < work.compile_s  # lower + compile, measured in prepare
    out = work.step()
    work.sync(out)
    assert out.shape == (3, 10) and np.isfinite(np.asarray(out)).all()
    work.close()
    assert work.batch_size == 3 and work.args == ()


def test_train_step_updates_params_and_lowers_the_loss(be):
    work = be.prepare(Step(TINY, mode="train", batch_size=8, optimizer="adam"))
    params0 = jax.tree_util.tree_map(np.asarray, work.args[0][0])
    losses = []
    for _ in range(8):
        state, loss = work.step()
        work.sync((state, loss))
        losses.append(float(loss))
    params1 = work.args[0][0]
    changed = [not np.array_equal(a, np.asarray(b)) for a, b in zip(jax.tree_util.tree_leaves(params0),
                                                                     jax.tree_util.tree_leaves(params1))]
    assert all(changed)  # every parameter (head included) is trained
    assert losses[-1] < losses[0]  # same batch every step: the loss must fall
    work.close()


def test_bf16_training_runs_and_fp16_training_is_refused(be):
    work = be.prepare(Step(TINY, mode="train", batch_size=2, precision="bf16"))
    state, loss = work.step()
    work.sync((state, loss))
    assert np.isfinite(float(loss))
    assert jax.tree_util.tree_leaves(state[0])[0].dtype == np.float32  # fp32 master weights
    work.close()
    with pytest.raises(ConfigError, match="bf16"):
        be.prepare(Step(TINY, mode="train", precision="fp16"))
    with pytest.raises(ConfigError, match="bf16"):  # XLA's CPU dot has no fp16 -> fp32 form
        be.prepare(Step(TINY, mode="infer", precision="fp16"))
    with pytest.raises(ConfigError, match="allowed: adam, sgd"):
        be.prepare(Step(TINY, mode="train", optimizer="lamb"))
    with pytest.raises(ConfigError, match="allowed: fp32"):
        be.prepare(Step(TINY, precision="fp8"))


def test_a_real_xla_out_of_memory_is_recognised(be):
    try:  # 16 TiB: XLA raises RESOURCE_EXHAUSTED on CPU too
        jax.block_until_ready(jax.jit(lambda: jax.numpy.ones((2**42,), jax.numpy.float32))())
    except Exception as e:  # noqa: BLE001
        assert be.is_oom(e)
    else:
        pytest.fail("allocating 16 TiB did not fail")
    assert be.is_oom(MemoryError())
    assert not be.is_oom(ValueError("shapes do not match"))
    be.cleanup()


def test_peak_memory_grows_with_the_workload(be):
    be.reset_peak_memory()
    work = be.prepare(Step(TINY, batch_size=256))
    work.sync(work.step())
    assert be.peak_memory_mib() > 1.0  # activations of 256 images (CPU: peak RSS growth)
    assert be.process_peak_mib() >= be.peak_memory_mib()
    work.close()


def test_xla_flop_count_is_consistent_with_the_analytic_one(be):
    spec = get_spec(TINY)
    c = be.count_flops(spec, 32, 10)["xla"]
    analytic = analytic_counts(spec, 32, 10).macs
    # XLA also counts elementwise work (norms, softmax, GELU, adds), a large share in a D=32 model
    assert analytic <= c["macs"] <= 1.4 * analytic
    assert "transcendentals" in c["excludes"]


@pytest.mark.slow
@pytest.mark.parametrize("name,tol", [("ViT-B/16", 0.03), ("R50x1", 0.03)])
def test_xla_flop_count_matches_analytic_on_paper_models(be, name, tol):
    spec = get_spec(name)
    c = be.count_flops(spec, 224, 1000)["xla"]
    assert abs(c["macs"] / analytic_counts(spec, 224, 1000).macs - 1) < tol


def test_random_params_cover_the_model_and_are_typical():
    from flax.traverse_util import flatten_dict

    from vitbench.backends.jax.backend import random_params
    from vitbench.models.flax import build_flax_model

    model = build_flax_model("R-Nano+ViT-Micro/8")
    p = flatten_dict(random_params(model, 32, seed=1), sep="/")
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), jax.ShapeDtypeStruct((1, 32, 32, 3), np.float32))
    assert {k: v.shape for k, v in p.items()} == {k: v.shape for k, v in flatten_dict(shapes["params"],
                                                                                      sep="/").items()}
    q = p["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"]  # (64, 4, 16)
    # N(0, 1) / sqrt(fan_in = 64): the sample std of n draws is off by 1 / sqrt(2 (n - 1)) of 1/8 per sigma:
    # 5 sigma
    assert abs(q.std() - 64**-0.5) < 5 / (2 * (q.size - 1)) ** 0.5 * 64**-0.5 and p["head/kernel"].any()
    assert (p["gn_root/scale"] == 1).all() and not p["embedding/bias"].any()


def test_matmul_peak_is_measured(be):
    flops = be.matmul_flops_per_s("fp32", n=256, seconds=0.05)
    assert 1e6 < flops < 1e15


# ---- through the measurements ------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["infer", "train"])
def test_bench_runs_on_jax(task):
    from vitbench.measure.throughput import bench

    settings = Step(TINY, mode=task, batch_size=4, optimizer="sgd")  # sgd here, adam above
    rec = bench(settings, backend="jax", warmup_steps=2,
                stop=StopRule(min_steps=5, min_seconds=0.05, max_seconds=60.0), with_mfu=False)
    m = rec.metrics
    assert rec.status == "ok" and rec.config["backend"] == "jax" and rec.env["backend"] == "jax"
    assert m["img_per_s"] > 0 and m["batch_size_achieved"] == 4 and len(rec.raw["step_s"]) >= 5
    assert m["compile_s"] > 0  # explicit, from lower().compile(), never inside the timed steps
    assert m["first_step_s"] < m["compile_s"] + 5  # the first step runs the compiled executable, no jit
    assert m["peak_mem_mib"] >= 0


def test_bench_reports_an_impossible_batch_as_oom_not_a_crash():
    from vitbench.measure.throughput import bench

    rec = bench(Step(TINY, batch_size=2**27), backend="jax", warmup_steps=3,
                stop=StopRule(min_steps=1, min_seconds=0, max_seconds=60.0), with_mfu=False)
    assert rec.status == "oom" and "out of memory" in rec.error.message.lower()


def test_flops_record_has_the_xla_counter():
    from vitbench.measure.flops import flops

    rec = flops(TINY, backend="jax")
    assert rec.metrics["gmacs_xla"] > 0 and "xla" in rec.raw["excludes"]
    # float64, a difference near 0 (absolute bound): vitbench's macs / macs - 1 rounds twice, this side's two
    # / 1e9, the ratio and - 1 four times, each relative to the ratio (~1)
    ratio = rec.metrics["gmacs_xla"] / rec.metrics["gmacs"]
    assert rec.metrics["rel_diff_xla"] == pytest.approx(ratio - 1, rel=0, abs=gamma(2 + 4) * ratio)


@FORK_OK
def test_max_batch_probes_jax_in_fresh_processes():
    from vitbench.measure.max_batch import max_batch

    rec = max_batch(Step(TINY, batch_size=1), backend="jax", memory_limit_gib=4, max_batch_size=1,
                    probe_timeout_s=300)  # one probe: the search itself is tested with torch
    assert rec.status == "ok", rec.error
    assert rec.metrics["max_batch_size"] == 1
    assert [p["status"] for p in rec.raw["probes"]] == ["ok"]
    assert rec.raw["probes"][0]["peak_mem_mib"] >= 0


def test_cli_bench_and_flops_take_backend_jax(cli):
    res = cli("bench", TINY, "--backend", "jax", "--min-steps", "3", "--min-seconds", "0.05", "--warmup", "1",
              "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert rec["status"] == "ok" and rec["config"]["backend"] == "jax" and rec["metrics"]["compile_s"] > 0
    res = cli("flops", TINY, "--backend", "jax")
    assert res.exit_code == 0 and "xla" in res.stdout
    res = cli("bench", TINY, "--backend", "jax", "--precision", "fp16")
    assert res.exit_code == 2 and "bf16" in res.output
