"""The pages vitbench writes, opened by a real browser (headless Chromium, tests/browser.py): the history page
(vitbench.history.page) and the report's report.html load from file://, draw their charts, log no error, ask
for nothing outside themselves, and leave a screenshot in the test's tmp directory."""

from __future__ import annotations

import math

import pytest
from browser import need_browser, open_page

from vitbench.env import short_sha
from vitbench.errors import ConfigError
from vitbench.history.page import GENERATOR, render

def _series(model: str, backend: str, task: str, level: float, step_at: int | None, n: int = 12) -> dict:
    """A synthetic series of n commits: `level` img/s, 10 % slower from point `step_at` on (a change there)."""
    points = [{"commit": f"{i:02d}" + "abcdef0123456789" * 2 + f"{i:06d}", "date": f"2026-11-{i + 1:02d}T12:00Z",
               "value": level * (0.9 if step_at is not None and i >= step_at else 1.0) * (1 + 0.003 * (i % 3)),
               "normalized": None} for i in range(n)]
    changes = ([{"index": step_at, "commits": [points[step_at - 1]["commit"], points[step_at]["commit"]],
                 "size": 0.9, "confidence": 0.97}] if step_at is not None else [])
    return {"metric": "img_per_s", "unit": "img/s", "trial": f"{model} {backend} {task}", "model": model,
            "backend": backend, "task": task, "points": points, "changes": changes}


def _history() -> list[dict]:
    s = [_series("ViT-Nano/4", "torch", "infer", 400.0, 7), _series("R-Nano", "torch", "train", 60.0, None),
         _series("ViT-Nano/4", "jax", "infer", 350.0, None)]
    ms = _series("ViT-Nano/4", "torch", "infer", 5.0, None)
    ms.update(metric="step_ms_median", unit="ms", trial="ViT-Nano/4 torch infer")
    ms["points"][3]["value"] = math.nan  # not drawn, said
    return s + [ms]


VISIBLE = ("Array.from(document.querySelectorAll('g.series')).filter("
           "g => getComputedStyle(g).display !== 'none').length")
CHARTS = ("Array.from(document.querySelectorAll('.chart')).filter("
          "c => getComputedStyle(c).display !== 'none').length")


def _pick(name: str, value: str) -> str:
    return (f"(() => {{ const s = document.getElementById('f-{name}'); s.value = {value!r}; "
            "s.dispatchEvent(new Event('change')); return s.value; })()")


@need_browser()
def test_history_page_in_a_browser(tmp_path):
    page = render(_history(), tmp_path / "history.html")
    png = tmp_path / "history.png"
    visit = open_page(page.as_uri(), png, [
        "document.querySelectorAll('svg.history').length",
        # drawn: every line has a box of non-zero size in the laid-out page
        "Array.from(document.querySelectorAll('g.series polyline')).map(p => p.getBBox().width)",
        "document.querySelectorAll('g.change rect.band').length",
        "Array.from(document.querySelectorAll('text.changed')).map(t => t.firstChild.nodeValue)",
        "document.querySelector('g.change text').textContent",
        "document.getElementById('shown').textContent",
        _pick("model", "ViT-Nano/4"), VISIBLE, CHARTS,
        _pick("backend", "jax"), VISIBLE, CHARTS,
        _pick("task", "train"), VISIBLE, CHARTS, "document.getElementById('shown').textContent",
        _pick("model", ""), _pick("backend", ""), VISIBLE,
    ])
    assert visit.errors == []
    assert all(u == page.as_uri() or u.startswith("data:") for u in visit.requests), visit.requests
    (svgs, widths, bands, labelled, size, shown, _, nano, nano_charts, _, nano_jax, nano_jax_charts, _,
     none, no_charts, shown_none, _, _, train) = visit.values
    assert svgs == 2  # one chart per metric
    assert len(widths) == 4 and all(w > 100 for w in widths)
    assert bands == 1 and labelled == [short_sha(_history()[0]["points"][6]["commit"]),
                                       short_sha(_history()[0]["points"][7]["commit"])]
    assert size == "-10.0 % (0.970)" and shown == "4"
    assert (nano, nano_charts) == (3, 2) and (nano_jax, nano_jax_charts) == (1, 1)
    assert (none, no_charts, shown_none) == (0, 0, "0") and train == 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


@need_browser()
def test_report_html_in_a_browser(tmp_path):
    from test_report import make_results

    from vitbench.report import build_report

    make_results(tmp_path / "results")
    build_report(tmp_path / "results", tmp_path / "report", formats=("html",))
    page = tmp_path / "report" / "report.html"
    png = tmp_path / "report.png"
    visit = open_page(page.as_uri(), png, [
        "document.images.length",
        "Array.from(document.images).filter(i => i.complete && i.naturalWidth > 100 && i.naturalHeight > 100)"
        ".length",
        "document.querySelectorAll('table tbody tr').length",
        "document.querySelector('h1').textContent",
    ])
    assert visit.errors == []
    assert all(u == page.as_uri() or u.startswith("data:") for u in visit.requests), visit.requests
    images, drawn, rows, title = visit.values
    assert images >= 3 and drawn == images  # every figure decoded and drawn
    assert rows > 0 and title
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_history_page_never_replaces_a_file_it_did_not_write(tmp_path):
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    with pytest.raises(ConfigError, match="not a history page"):
        render(_history(), mine)
    assert mine.read_text() == "<html>my notes</html>"
    page = render(_history(), tmp_path / "h.html")
    assert GENERATOR in page.read_text()
    assert render(_history()[:1], page) == page  # its own page is replaced
    bad = _history()[:1]
    bad[0]["changes"][0]["index"] = 99
    with pytest.raises(ConfigError, match="index 99"):
        render(bad, tmp_path / "h2.html")
    assert not (tmp_path / "h2.html").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["h.html",
                                                                                                   "notes.html"]
