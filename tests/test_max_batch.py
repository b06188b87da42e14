"""Max-batch search: the pure search logic with a fake fit, and real probes in fresh processes."""

from __future__ import annotations

import pytest

from vitbench.backends.base import Step
from vitbench.errors import ConfigError
from vitbench.measure.max_batch import Probe, max_batch, run_probe, search


def fake(limit_batch):
    return lambda b: Probe(b, b <= limit_batch, "ok" if b <= limit_batch else "oom")


@pytest.mark.parametrize("boundary", [1, 2, 3, 37, 64, 65, 1000, 4095])
def test_search_finds_the_exact_boundary(boundary):
    best, probes = search(fake(boundary), limit=4096)
    assert best == boundary
    tried = {p.batch: p.fits for p in probes}
    assert tried[boundary] is True and tried[boundary + 1] is False  # B fits and B+1 does not
    assert len(probes) <= 2 * 13  # doubling + bisection stay logarithmic
    assert len(tried) == len(probes)  # never the same batch twice


def test_search_nothing_fits_and_capped():
    assert search(fake(0), limit=64)[0] == 0
    best, probes = search(fake(10_000), limit=100)
    assert best == 100 and probes[-1].batch == 100 and probes[-1].fits


def test_search_granularity_and_start():
    best, probes = search(fake(77), start=8, limit=4096, granularity=8)
    assert best == 72 and all(p.batch % 8 == 0 for p in probes)
    with pytest.raises(ConfigError):
        search(fake(3), start=0)


def test_real_probe_fits_and_reports_memory():
    p = run_probe(Step("ViT-Nano/4", mode="train"), batch=4)
    assert p.fits and p.status == "ok" and p.process_peak_mib > 50 and p.peak_mem_mib >= 0


def test_watchdog_kills_a_probe_past_its_budget():
    # Importing torch alone needs far more than 64 MiB, so the watchdog must kill this probe.
    p = run_probe(Step("ViT-Nano/4", mode="train"), batch=4, budget_mib=64)
    assert not p.fits and p.status == "killed_over_budget"


def test_real_search_on_a_tiny_model():
    rec = max_batch(Step("ViT-Nano/4", mode="infer"), memory_limit_gib=8, max_batch_size=4)
    assert rec.status == "ok" and rec.metrics["max_batch_size"] == 4 and rec.metrics["capped"]
    assert [p["batch"] for p in rec.raw["probes"]] == [1, 2, 4]
    assert rec.metrics["memory_limit_mib"] == 8 * 1024


def test_bad_budget_is_a_config_error():
    with pytest.raises(ConfigError):
        max_batch(Step("ViT-Nano/4"), memory_limit_gib=-1)


def test_the_cpu_budget_is_the_memory_budget_of_every_command(monkeypatch):
    """One rule: $VITBENCH_MEMORY_LIMIT_GIB sets max-batch's CPU budget as it does every command's."""
    from vitbench.measure.max_batch import default_budget_mib

    monkeypatch.setenv("VITBENCH_MEMORY_LIMIT_GIB", "3")
    assert default_budget_mib("cpu") == 3 * 1024
    assert default_budget_mib("cuda") is None  # an accelerator's own out-of-memory error decides


@pytest.mark.parametrize("failure", ["oom", "over_budget", "killed_over_budget", "timeout", "error"])
def test_the_row_says_what_set_the_limit_and_a_crash_is_no_memory_limit(monkeypatch, failure):
    """The smallest batch that did not fit sets the limit: memory (oom, over the budget) gives an ok row; a
    crash for another reason (a GPU kernel's size limit at a large batch) leaves the memory limit unknown, an error
    row, never an ok max_batch_size; a timeout is said in a note."""
    import vitbench.measure.max_batch as mb
    from vitbench.measure.probe import ProbeStatus

    def probe(step, b, *args):
        if b <= 5:
            return Probe(b, True, ProbeStatus.OK)
        return Probe(b, False, ProbeStatus(failure), error="invalid configuration argument" * (failure == "error"))

    monkeypatch.setattr(mb, "run_probe", probe)
    rec = max_batch(Step("ViT-Nano/4", mode="infer"), memory_limit_gib=8, max_batch_size=64)
    assert rec.metrics["max_batch_size"] == 5
    assert rec.metrics["limited_by"] == ("over_budget" if "over_budget" in failure else failure)
    if failure == "error":
        assert rec.status == "error" and "batch 6 failed for a reason other than memory" in rec.error.message
        assert "invalid configuration argument" in rec.error.message
    else:
        assert rec.status == "ok"
        assert ("probe's 600 s" in rec.metrics.get("limit_note", "")) == (failure == "timeout")
        assert "note" not in rec.metrics  # the CLI reads `note` as "nothing fits"


def test_a_capped_search_is_limited_by_its_cap(monkeypatch):
    import vitbench.measure.max_batch as mb
    from vitbench.measure.probe import ProbeStatus

    monkeypatch.setattr(mb, "run_probe", lambda step, b, *args: Probe(b, True, ProbeStatus.OK))
    rec = max_batch(Step("ViT-Nano/4", mode="infer"), memory_limit_gib=8, max_batch_size=8)
    assert rec.status == "ok" and rec.metrics["limited_by"] == "cap" and rec.metrics["capped"]


def test_nothing_fitting_is_no_ok_row(monkeypatch):
    """max_batch_size 0 measured no largest batch: an oom row saying so, never an ok row of 0 (`--json` exited 0
    with it, a sweep took it as done)."""
    import vitbench.measure.max_batch as mb
    from vitbench.measure.probe import ProbeStatus

    monkeypatch.setattr(mb, "run_probe",
                        lambda step, b, *a: Probe(b, False, ProbeStatus.OOM, error="CUDA out of memory"))
    rec = max_batch(Step("ViT-Nano/4", mode="infer"), memory_limit_gib=8, max_batch_size=8)
    assert rec.status == "oom" and rec.metrics["max_batch_size"] == 0
    assert rec.error.message.startswith("nothing fits: batch 1 did not fit (oom)")


def test_a_first_probe_past_its_time_is_no_oom(monkeypatch):
    """Batch 1 ran past --probe-timeout-s: the search is bounded by time, which says nothing of memory; it was an
    `oom` row, 'nothing fits', the timeout printed to the second ("0 s" for 0.3; found by a review)."""
    import vitbench.measure.max_batch as mb
    from vitbench.measure.probe import ProbeStatus

    monkeypatch.setattr(mb, "run_probe", lambda step, b, *a: Probe(b, False, ProbeStatus.TIMEOUT,
                                                                   error="probe took longer than 0.3 s"))
    rec = max_batch(Step("ViT-Nano/4", mode="infer"), memory_limit_gib=8, max_batch_size=8, probe_timeout_s=0.3)
    assert rec.status == "error" and rec.error.type == "ProbeTimeout", rec.error
    assert "ran past the probe's 0.3 s" in rec.error.message and "not memory" in rec.error.message
