"""The history's web page: one self-contained HTML file (inline SVG charts, a few lines of inline JavaScript for
the filters, no network), written by `render`.

One chart per metric (and unit); in it, one line per series (a trial's values over commits, in commit date
order), coloured by model and dashed by backend as the report's figures are (vitbench.report.plots), each point
titled with its commit, date and value. Each change point found in a series is drawn on its line: a band over the
commit range it lies in (first .. last commit), a dashed rule at the first point after it, and its size (after /
before, as a percentage) with its confidence. The x axis labels the commits (short SHA; every k-th where there
are many, a change point's always). The y axis is logarithmic where a chart's values span more than a decade
(series of tiny and large models together), linear otherwise; it shows the calibration-normalised values when
every point of the chart has one, else the values as measured (the axis says which). Three selects filter the
series by model, backend and task; a chart with no series left is hidden. The page is the report's
(vitbench.report.render.html_page: its style, no external resource).

A series (vitbench.history builds them): {"metric", "unit", "trial", "model", "backend", "task": str,
"points": [{"commit": str, "date": ISO str, "value": float, "normalized": float | None, optional "caveat": str,
"at_least": true (the value is a lower bound: shown '\u2265')}],
"changes": [{"index": int (the first point after the change), "commits": [first, last], "size": float (after /
before), "confidence": float}]}. A point whose value is not a finite number is not drawn (the chart says how
many were left out).
"""

from __future__ import annotations

import hashlib
import html
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from vitbench.env import short_sha
from vitbench.errors import ConfigError
from vitbench.history.series import AT_LEAST, legend
from vitbench.numfmt import fmt
from vitbench.paths import write_atomic
from vitbench.record import finite_number
from vitbench.report.caveats import MARK

GENERATOR = "vitbench history page"  # the <meta name="generator"> that names the page's maker
# The page's seal: the SHA-256 of its text with the seal emptied. A page whose seal still holds is vitbench's, and
# replaced by the next render; one edited since (a note of the user's in it) is the user's, never replaced.
_SEAL = '<meta name="vitbench-sha256" content="{}">'
_SEAL_RE = re.compile(r'<meta name="vitbench-sha256" content="([0-9a-f]{64})">')
FILTERS = ("model", "backend", "task")
W, H = 880, 300  # the chart's SVG size in px
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 28, 72  # margins in px: y labels, -, change labels, rotated commit labels
MAX_LABELS = 30  # commit labels on one x axis at most (every k-th beyond)
LOG_SPAN = 10.0  # a log y axis where a chart's largest value is more than this times its smallest
# SVG dash patterns of the report's line styles, by backend in registration order (vitbench.report.plots._LINES:
# solid, dashed, dotted, dash-dot)
DASHES = ("", "7 4", "2 3", "7 3 2 3")
_REQUIRED = ("metric", "unit", "trial", "model", "backend", "task", "points")

_CSS = """
.filters{margin:1rem 0;font-size:.9rem} .filters label{margin-right:1.2rem} .chart{margin-bottom:1.5rem}
svg.history{background:#fff;border:1px solid #eee} svg.history text{font-size:11px;fill:#444}
.axis{stroke:#999;stroke-width:1} .grid{stroke:#eee;stroke-width:1} .band{fill:#d62728;fill-opacity:.12}
.rule{stroke:#d62728;stroke-width:1.2;stroke-dasharray:4 3} text.change{fill:#b00;font-weight:600}
text.changed{fill:#b00;font-weight:600} .keys{font-size:.82rem} .key{margin-right:1rem;white-space:nowrap}
.swatch{display:inline-block;width:22px;height:0;border-top:2px solid;vertical-align:middle;margin-right:.3rem}
"""

_SCRIPT = """
(function () {
  var keys = %s;
  function apply() {
    var total = 0;
    document.querySelectorAll('.chart').forEach(function (chart) {
      var n = 0;
      chart.querySelectorAll('[data-model]').forEach(function (el) {
        var ok = keys.every(function (k) {
          var v = document.getElementById('f-' + k).value;
          return v === '' || el.getAttribute('data-' + k) === v;
        });
        el.style.display = ok ? '' : 'none';
        if (ok && el.classList.contains('series')) { n += 1; }
      });
      chart.style.display = n ? '' : 'none';
      total += n;
    });
    document.getElementById('shown').textContent = String(total);
  }
  keys.forEach(function (k) { document.getElementById('f-' + k).addEventListener('change', apply); });
  apply();
})();
""" % ("[" + ", ".join(f"'{k}'" for k in FILTERS) + "]")


def render(series: list[dict], out: Path) -> Path:
    """Write the page of `series` (module docstring) to `out` (an .html file) and return its path. A file at
    `out` that this function did not write is never replaced (ConfigError); the page is written whole or not
    at all (a temporary file renamed over it)."""
    out = Path(out)
    _check(series)
    if out.is_dir() or (os.path.lexists(out) and not _ours(out)):
        raise ConfigError(f"{out}: exists and is not a history page written by vitbench, or was edited since "
                          "(never replaced: give another path)")
    if not out.parent.is_dir():
        raise ConfigError(f"{out}: its directory {out.parent} does not exist")
    from vitbench.report.render import html_page

    charts: dict[tuple[str, str], list[dict]] = {}
    for s in series:
        charts.setdefault((str(s["metric"]), str(s["unit"])), []).append(s)
    commits = {p["commit"] for s in series for p in s["points"]}
    body = [f'<meta name="generator" content="{GENERATOR}">', _SEAL.format(""),
            "<h1>Speed over the project's history</h1>",
            '<ul class="meta">', f"<li>{len(series)} series of {len(charts)} metric(s) over {len(commits)} "
            "commit(s); change points marked in red: the commit range each lies in, its size (after / before) "
            "and confidence</li>", "<li>hover a point for its commit, date and value</li>", "</ul>",
            _filters(series)]
    colours, dashes = _styles(series)
    for (metric, unit), group in charts.items():
        body.append(_chart(metric, unit, group, colours, dashes))
    if not series:
        body.append('<p class="none">No history recorded yet.</p>')
    page = html_page("vitbench history", body, _CSS, _SCRIPT)
    page = page.replace(_SEAL.format(""), _SEAL.format(hashlib.sha256(page.encode()).hexdigest()), 1)
    return write_atomic(out, page)  # a new file's usual mode (a page to publish), UTF-8 whatever the locale


def _ours(path: Path) -> bool:
    """Whether the file at `path` is a page `render` wrote and nobody changed since: a plain file whose seal is the
    SHA-256 of its text with the seal emptied (an earlier vitbench's page, without one, is the user's now)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    m = _SEAL_RE.search(text)
    return bool(m) and hashlib.sha256(text.replace(m.group(0), _SEAL.format(""), 1).encode()).hexdigest() == m[1]


def _check(series: list[dict]) -> None:
    for i, s in enumerate(series):
        missing = [k for k in _REQUIRED if k not in s]
        if missing:
            raise ConfigError(f"history series {i}: no field {', '.join(missing)} (needs {', '.join(_REQUIRED)})")
        for j, c in enumerate(s.get("changes") or ()):
            if not (isinstance(c.get("index"), int) and 0 <= c["index"] < len(s["points"])):
                raise ConfigError(f"history series {i} ({s['metric']} {s['trial']}): change {j}'s index "
                                  f"{c.get('index')!r} is not a point of the series (0 .. {len(s['points']) - 1})")


def _styles(series: list[dict]) -> tuple[dict[str, str], dict[str, str]]:
    """Each model's colour and each backend's dash pattern, as the report's figures draw them."""
    from matplotlib.colors import to_hex

    from vitbench.report.plots import backend_index, model_colors

    colours = {m: to_hex(c) for m, c in model_colors({s["model"] for s in series}).items()}
    dashes = {b: DASHES[backend_index(b) % len(DASHES)] for b in {s["backend"] for s in series}}
    return colours, dashes


def _filters(series: list[dict]) -> str:
    parts = ['<div class="filters">']
    for k in FILTERS:
        opts = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>'
                       for v in sorted({str(s[k]) for s in series}))
        parts.append(f'<label>{k} <select id="f-{k}"><option value="">all</option>{opts}</select></label>')
    parts.append(f'<span class="meta"><span id="shown">{len(series)}</span> of {len(series)} series shown</span>'
                 "</div>")
    return "".join(parts)


def _when(date: str) -> tuple[int, datetime | str]:
    """A sort key of an ISO date (aware ones in UTC; text that is no date after every date)."""
    try:
        d = datetime.fromisoformat(str(date))
    except ValueError:
        return 1, str(date)
    return 0, d.astimezone(timezone.utc).replace(tzinfo=None) if d.tzinfo else d


def _chart(metric: str, unit: str, group: list[dict], colours: dict[str, str], dashes: dict[str, str]) -> str:
    normalized = all(finite_number(p.get("normalized")) for s in group for p in s["points"])
    field = "normalized" if normalized else "value"
    # the commits of this chart in date order (a commit's first date seen; ties in the order first met)
    dates: dict[str, str] = {}
    for s in group:
        for p in s["points"]:
            dates.setdefault(p["commit"], p.get("date", ""))
    order = sorted(dates, key=lambda c: _when(dates[c]))
    x_of = {c: i for i, c in enumerate(order)}
    values = [p[field] for s in group for p in s["points"] if finite_number(p[field])]
    dropped = sum(1 for s in group for p in s["points"] if not finite_number(p[field]))
    log = bool(values) and min(values) > 0 and max(values) > LOG_SPAN * min(values)
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    pad = (hi - lo) * 0.08 or (abs(hi) * 0.1 or 1.0)
    lo, hi = lo - pad, hi + pad
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(commit: str) -> float:
        return LEFT + (pw * x_of[commit] / (len(order) - 1) if len(order) > 1 else pw / 2)

    def py(v: float) -> float:
        return TOP + ph * (1 - ((math.log10(v) if log else v) - lo) / (hi - lo))

    svg = [f'<svg class="history" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" role="img" aria-label="{html.escape(metric)} over commits">']
    for v in _ticks(lo, hi, log):
        y = py(v)
        svg.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{html.escape(fmt(v))}</text>')
    svg.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}"/>'
               f'<line class="axis" x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}"/>')
    changed = {c for s in group for ch in s.get("changes") or () for c in ch.get("commits") or () if c in x_of}
    every = math.ceil(len(order) / MAX_LABELS)
    for i, c in enumerate(order):
        if i % every and c not in changed:
            continue
        x, y = px(c), H - BOTTOM + 10
        svg.append(f'<text class="{"changed" if c in changed else "commit"}" x="{x:.1f}" y="{y}" '
                   f'transform="rotate(-60 {x:.1f} {y})" text-anchor="end">{html.escape(short_sha(c))}'
                   f"<title>{html.escape(c)} {html.escape(str(dates[c]))}</title></text>")
    axis = f"{metric} [{unit}]" + (", normalised by the machine's calibration" if normalized else "") + \
        (", log scale" if log else "")
    svg.append(f'<text x="14" y="{TOP + ph / 2:.0f}" transform="rotate(-90 14 {TOP + ph / 2:.0f})" '
               f'text-anchor="middle">{html.escape(axis)}</text>')
    keys, marked = [], 0
    for s in group:
        attrs = " ".join(f'data-{k}="{html.escape(str(s[k]))}"' for k in FILTERS)
        colour, dash = colours.get(s["model"], "#555555"), dashes.get(s["backend"], "")
        pts = [p for p in s["points"] if finite_number(p[field])]
        g = [f'<g class="series" {attrs} data-trial="{html.escape(str(s["trial"]))}">']
        line = " ".join(f"{px(p['commit']):.1f},{py(p[field]):.1f}" for p in pts)
        g.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8"'
                 + (f' stroke-dasharray="{dash}"' if dash else "") + f' points="{line}"/>')
        for p in pts:
            caveat = str(p.get("caveat") or "")
            g.append(f'<circle cx="{px(p["commit"]):.1f}" cy="{py(p[field]):.1f}" r="2.6" fill="{colour}">'
                     f"<title>{html.escape(s['trial'])}: {AT_LEAST if p.get('at_least') else ''}"
                     f"{html.escape(fmt(p[field]))} {html.escape(unit)} at "
                     f"{html.escape(short_sha(p['commit']))} ({html.escape(str(p.get('date', '')))})"
                     f"{html.escape(f'; {caveat}' if caveat else '')}</title></circle>")
            if caveat.startswith(MARK):  # rests on marked rounds only: ringed, as the report's figures ring them
                marked += 1
                g.append(f'<circle class="caveat" cx="{px(p["commit"]):.1f}" cy="{py(p[field]):.1f}" r="6" '
                         'fill="none" stroke="red" stroke-width="1.4"/>')
        for ch in s.get("changes") or ():
            g.append(_change(ch, s, px, x_of, order))
        g.append("</g>")
        svg += g
        keys.append(f'<span class="key series-key" {attrs}><span class="swatch" style="border-color:{colour};'
                    f'border-top-style:{"dashed" if dash else "solid"}"></span>{html.escape(str(s["trial"]))}'
                    "</span>")
    svg.append("</svg>")
    note = (f'<p class="note">{dropped} point(s) without a finite value not drawn.</p>' if dropped else "") + \
        (f'<p class="note caveat">Red ring: {html.escape(legend(marked))}</p>' if marked else "")
    return (f'<div class="chart" data-metric="{html.escape(metric)}"><h2>{html.escape(metric)} '
            f'[{html.escape(unit)}]</h2>{"".join(svg)}<div class="keys">{"".join(keys)}</div>{note}</div>')


def _change(ch: dict, s: dict, px, x_of: dict[str, int], order: list[str]) -> str:
    """One change point: a band over its commit range, a rule at the first point after it, its size and
    confidence."""
    at = s["points"][ch["index"]]["commit"]
    first, last = (list(ch.get("commits") or ()) + [at, at])[:2]
    xs = [px(c) for c in (first, last, at) if c in x_of]
    x0, x1 = min(xs), max(xs)
    size, conf = ch.get("size"), ch.get("confidence")
    label = (f"{(size - 1) * 100:+.1f} %" if finite_number(size) else "change") + \
        (f" ({conf:.3f})" if finite_number(conf) else "")  # 0.001 resolved (history.changes.PERMUTATIONS)
    title = (f"change point: {label}; after / before {fmt(size)}, confidence {fmt(conf)}; commits "
             f"{short_sha(first)} .. {short_sha(last)}")
    return (f'<g class="change"><rect class="band" x="{x0 - 3:.1f}" y="{TOP}" width="{x1 - x0 + 6:.1f}" '
            f'height="{H - TOP - BOTTOM}"/><line class="rule" x1="{px(at):.1f}" x2="{px(at):.1f}" y1="{TOP}" '
            f'y2="{H - BOTTOM}"/><text class="change" x="{px(at) + 4:.1f}" y="{TOP - 8}">{html.escape(label)}'
            f"</text><title>{html.escape(title)}</title></g>")


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    """About five readable y ticks inside [lo, hi] (log: lo, hi are log10 of the values; ticks at 1, 2, 5 x
    10^k)."""
    if log:  # powers inside a float's range only: a value of 1e308 asked for 10**309 (an OverflowError)
        powers = range(max(math.floor(lo), -307), min(math.ceil(hi), 308) + 1)
        out = [m * 10.0**k for k in powers for m in (1, 2, 5)]
        return [v for v in out if math.isfinite(v) and lo <= math.log10(v) <= hi]
    raw = (hi - lo) / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [k * step for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
