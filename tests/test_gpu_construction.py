"""GPU code paths that a CPU run never takes, checked by construction: torch's CUDA calls stand in for a GPU here
(monkeypatched), and each test asserts what vitbench asks of them (which device, which slice, which limit)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from vitbench.backends.base import Device, DeviceKind, get_backend  # noqa: E402


def test_a_cuda_device_with_an_index_becomes_the_current_device(monkeypatch):
    """Events recorded without a stream, the peak's matmuls and the allocator's statistics use the *current* CUDA
    device: setup('cuda:1') must make cuda:1 current, or the timer times an idle cuda:0 while cuda:1 works."""
    be = get_backend("torch")
    made_current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: made_current.append(torch.device(d)))
    monkeypatch.setattr(type(be), "device_info", lambda self: Device(DeviceKind.GPU, "a GPU", self.device.index))
    monkeypatch.setattr(type(be), "versions", lambda self: {})
    info = be.setup("cuda:1", threads=1)
    assert info["device"] == "cuda:1"
    assert made_current == [torch.device("cuda:1")]
    be.device = torch.device("cpu")


@pytest.mark.parametrize("device", ["cuda:1", "cuda"])
def test_a_thread_that_runs_steps_makes_the_trials_device_current_and_syncs_name_it(monkeypatch, device):
    """torch's current CUDA device is per thread and a new thread's is cuda:0: serve's steps thread ran a model
    on cuda:1 with its CUDA graphs, streams and argument-less syncs on cuda:0. The backend's hook, called first
    in such a thread, makes the trial's device current there (`cuda`: the one current at setup), and the
    backend's syncs name it from any thread."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    be = get_backend("torch")
    made_current, synced = [], []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)  # setup's thread: cuda:1 current
    monkeypatch.setattr(torch.cuda, "set_device",
                        lambda d: made_current.append((torch.device(d), threading.current_thread())))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: synced.append(device))
    monkeypatch.setattr(type(be), "device_info", lambda self: Device(DeviceKind.GPU, "a GPU", 1))
    monkeypatch.setattr(type(be), "versions", lambda self: {})
    try:
        be.setup(device, threads=1)
        made_current.clear()
        with ThreadPoolExecutor(1, initializer=be.use_device_in_this_thread) as pool:
            worker = pool.submit(threading.current_thread).result()
            pool.submit(be.reset_peak_memory).result()
        assert made_current == [(torch.device("cuda:1"), worker)]
        assert synced == [torch.device("cuda:1")] * 2  # synchronize and the peak's reset, each naming cuda:1
    finally:
        be.device = torch.device("cpu")


def test_a_rank_holds_only_its_slice_of_the_global_batch(monkeypatch):
    """Each rank of a data-parallel group keeps B/N images, not a view into all B (which would count the global
    batch in every rank's memory: per-device peak and state inflated, the largest batch understated)."""
    from vitbench.backends.torch import distributed

    monkeypatch.setattr(distributed, "rank_and_world", lambda: (1, 4))
    x, y = torch.arange(8 * 3 * 2 * 2, dtype=torch.float32).reshape(8, 3, 2, 2), torch.arange(8)
    xs, ys = distributed.local_slice(x, y)
    assert torch.equal(xs, x[2:4]) and torch.equal(ys, y[2:4])
    assert xs.untyped_storage().nbytes() == x.untyped_storage().nbytes() // 4
    assert ys.untyped_storage().nbytes() == y.untyped_storage().nbytes() // 4


@pytest.mark.parametrize("message, oom", [
    ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", True),
    ("cuDNN error: CUDNN_STATUS_ALLOC_FAILED", True),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", True),
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.", True),
    ("CUDA error: invalid configuration argument", False),
    ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED", False),
])
def test_out_of_device_memory_inside_cublas_or_cudnn_is_an_oom(message, oom):
    """A library's workspace allocation failing is the device running out of memory (a max-batch probe's limit);
    a kernel's size limit is not (the search must not take it for one)."""
    from vitbench.errors import looks_like_oom

    assert looks_like_oom(RuntimeError(message)) is oom


def _in_a_group(monkeypatch, tmp_path):
    from vitbench.measure import ranks

    monkeypatch.setenv(ranks.RESULT_ENV, str(tmp_path / "rank0.json"))
    assert ranks.in_group()


def test_a_rank_out_of_memory_fails_its_group_instead_of_returning(monkeypatch, tmp_path):
    """A rank whose step ran out of memory must not return an OOM row and exit 0: its peers would wait in a
    collective (NCCL's watchdog: minutes) and the trial end in `error`. It raises, so that run_group stops the
    others at once, and the trial's row is OOM from what it raised."""
    from vitbench.backends.base import Step, StopRule
    from vitbench.backends.torch.backend import TorchBackend
    from vitbench.measure import probe as probe_mod
    from vitbench.measure.throughput import bench

    def oom(self, step):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(TorchBackend, "prepare", oom)
    assert bench(Step("ViT-Nano/4", batch_size=2), backend="torch", warmup_steps=1, stop=StopRule(2, 0.0, 1.0)).status == "oom"  # alone: an OOM row
    assert probe_mod.probe({"step": Step("ViT-Nano/4", batch_size=2).to_dict(), "backend": "torch"})["status"] == "oom"
    _in_a_group(monkeypatch, tmp_path)
    with pytest.raises(torch.OutOfMemoryError):
        bench(Step("ViT-Nano/4", batch_size=2), backend="torch", warmup_steps=1, stop=StopRule(2, 0.0, 1.0))
    with pytest.raises(torch.OutOfMemoryError):
        probe_mod.probe({"step": Step("ViT-Nano/4", batch_size=2).to_dict(), "backend": "torch"})


@pytest.mark.parametrize("raised, code, status", [
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", 1, "oom"),
    ("RuntimeError: CUDA error: invalid configuration argument", 1, "error"),
    ("", -9, "oom"),  # the kernel's out-of-memory killer (a CPU group): no message, SIGKILL
    ("", -11, "error"),
])
def test_a_group_probe_that_a_rank_failed_out_of_memory_is_an_oom(monkeypatch, raised, code, status):
    from vitbench.backends.base import Step
    from vitbench.measure import probe as probe_mod, ranks

    def failed(*args, **kwargs):
        raise ranks.RankFailed(1, f"rank 1 of 2 failed; the other ranks were stopped: {raised}", code=code)

    monkeypatch.setattr(ranks, "run_group", failed)
    req = {"step": Step("ViT-Nano/4", batch_size=4, devices=2).to_dict(), "backend": "torch"}
    assert probe_mod._group_probe(req)["status"] == status


def test_a_rank_counts_its_peers_as_its_own_load_not_others(tmp_path):
    """A group's ranks share the host: each rank's LoadMeter counts its peers' CPU time as the measurement's own
    (else every multi-rank row is flagged busy by its own siblings); a process of another rendezvous is not a peer."""
    import subprocess
    import sys

    from vitbench.measure import ranks

    def env(port, r):
        import os
        return {**os.environ, "MASTER_PORT": str(port), "WORLD_SIZE": "2", "RANK": str(r),
                ranks.RESULT_ENV: str(tmp_path / f"{port}-{r}.json")}

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    peer, stranger = (subprocess.Popen(sleeper, env=env(port, 1)) for port in (29999, 29998))
    try:
        code = ("import time; from vitbench.measure import ranks; time.sleep(0.5); "
                "print(*sorted(p.pid for p in ranks.group_processes()))")
        me = subprocess.run([sys.executable, "-c", code], env=env(29999, 0), capture_output=True, text=True,
                            timeout=120)
        assert me.returncode == 0, me.stderr[-2000:]
        pids = [int(x) for x in me.stdout.split()]
        assert peer.pid in pids and stranger.pid not in pids and len(pids) == 2
    finally:
        for p in (peer, stranger):
            p.kill()
            p.wait()


def test_fsdp_on_cpu_ranks_shards_on_cpu_on_a_host_with_a_gpu(monkeypatch, tmp_path):
    """fully_shard's default mesh is the host's accelerator's (torch._C._get_accelerator): a cpu group on a CUDA
    host had its parameters moved to cuda:0 in every rank. The mesh is the rank's own device type: with the
    accelerator standing in for CUDA here, a cpu rank's parameters stay on the cpu."""
    import torch.distributed as dist

    from vitbench.backends.torch import distributed

    monkeypatch.setattr(torch._C, "_get_accelerator", lambda *a, **k: torch.device("cuda"))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = distributed.wrap(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)), "fsdp",
                                 torch.device("cpu"))
        assert {p.device.type for p in model.parameters()} == {"cpu"}
        assert {p.device_mesh.device_type for p in model.parameters()} == {"cpu"}  # sharded (DTensors)
    finally:
        dist.destroy_process_group()


def test_fp16_training_under_fsdp_is_refused_and_the_rest_is_not():
    """FSDP2's sharded gradients leave GradScaler's found-inf per rank: ranks could disagree on skipping a step.
    Refused where a study is read and where a step is prepared; fp16 inference, dp, and bf16 under fsdp are not."""
    from vitbench.backends.base import backend_spec

    spec = backend_spec("torch")
    refused = spec.problems({"precision": "fp16", "parallelism": "fsdp", "devices": 2, "task": "train",
                             "device": "cuda"})
    assert [f for f, _ in refused] == ["precision"] and "bf16" in refused[0][1]
    for ok in ({"precision": "fp16", "parallelism": "fsdp", "devices": 2, "task": "infer", "device": "cuda"},
               {"precision": "fp16", "parallelism": "dp", "devices": 2, "task": "train", "device": "cuda"},
               {"precision": "bf16", "parallelism": "fsdp", "devices": 2, "mode": "train", "device": "cuda"}):
        assert spec.problems(ok) == [], ok


@pytest.mark.parametrize("mode, graphs", [(None, False), ("default", False), ("reduce-overhead", True),
                                          ("max-autotune", True), ("max-autotune-no-cudagraphs", False)])
def test_every_compile_mode_that_replays_cuda_graphs_is_treated_as_one(mode, graphs):
    """max-autotune replays CUDA graphs too (Inductor's mode table): its outputs must be copied out before the next
    replay and each step marked, as reduce-overhead's are."""
    from vitbench.backends.torch.backend import uses_cuda_graphs

    assert uses_cuda_graphs(mode) is graphs


@pytest.mark.parametrize("graphs, kind, peak", [(False, "allocator", 593.0), (True, "allocator_reserved", 800.0)])
def test_steps_replaying_cuda_graphs_report_the_reserved_peak(monkeypatch, graphs, kind, peak):
    """A replayed CUDA graph's buffers live in its private pool, reserved once at capture and not allocated while
    replays use them: the allocated peak of the steady steps left the step's activations out (the GPU check,
    ViT-B/16 bf16 batch 64 on an H200: 367 MiB with reduce-overhead against 593 compiled without graphs, 800
    reserved). Steps that replay graphs report the reserved peak, under a kind of their own."""
    from types import SimpleNamespace

    be = get_backend("torch")
    mib = 2**20
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: (367.0 if graphs else 593.0) * mib)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: 800.0 * mib)
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    be.device = torch.device("cuda")
    try:
        be.reset_peak_memory()
        be.restart_peak_memory(SimpleNamespace(cuda_graphs=graphs))
        assert (be.memory_kind().value, be.peak_memory_mib()) == (kind, peak)
        assert emptied == ([True] if graphs else [])  # compilation's cached blocks are not the steps' reserve
        be.reset_peak_memory()  # the next workload starts without graphs
        assert be.memory_kind().value == "allocator"
    finally:
        be.device = torch.device("cpu")


@pytest.mark.parametrize("timing", ["steps", "windows"])
def test_the_timers_record_on_the_backends_device_from_any_thread(monkeypatch, timing):
    """set_device holds for the thread that called it (setup's): serve times its throughput mode on a thread of
    its own, where the current device was cuda:0, and events recorded without a stream timed an idle cuda:0 while
    cuda:1 worked. The timers make the backend's device current around their events, on whatever thread."""
    import threading

    from vitbench.backends.base import StopRule

    be = get_backend("torch")
    current = threading.local()
    recorded = []

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self, stream=None):
            recorded.append(getattr(current, "device", torch.device("cuda:0")))

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 1.0

    class DeviceContext:
        def __init__(self, device):
            self.device = torch.device(device)

        def __enter__(self):
            self.saved, current.device = getattr(current, "device", None), self.device

        def __exit__(self, *exc):
            current.device = self.saved

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "device", DeviceContext)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    work = type("W", (), {"step": lambda self: None})()
    stop = StopRule(min_steps=2, min_seconds=0.0, max_seconds=1.0, min_windows=2)
    be.device = torch.device("cuda:1")
    try:
        run = (lambda: be.time_steps(work, stop)) if timing == "steps" else (lambda: be.time_windows(work, 1, stop))
        worker = threading.Thread(target=run)  # not the thread setup made cuda:1 current on
        worker.start()
        worker.join()
    finally:
        be.device = torch.device("cpu")
    assert recorded and set(recorded) == {torch.device("cuda:1")}, recorded
