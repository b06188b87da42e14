"""Text from results rows reaches people's screens and pages escaped (security review): `compare --format md` (a PR
comment, a terminal), report.md, the report's figures; and `fit --where` evaluates nothing but a row filter."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from records import record
from test_compare import bench_record, result_set

from vitbench.errors import ConfigError
from vitbench.store import Store
from vitbench.study import trial_key

# what a hostile results row held (tests of the review: /tmp/sec-review/mut.py): an OSC title, ANSI colours, a CR,
# a line break that starts a heading and a link, table pipes, raw HTML
HOSTILE = ("vm\x1b]0;PWNED-TITLE\x07\x1b[31mRED\x1b[0m\n\n## Injected heading\n[click](https://evil.example)\r"
           "| x | y |<script>alert(1)</script>\x9b2J\x7f")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and LF, DEL, C1


def _safe_markdown(md: str) -> None:
    """No control character but LF, no CR, no raw HTML, no line an injected value starts."""
    assert not CONTROL.search(md), repr(CONTROL.search(md))
    assert "\r" not in md and "<script" not in md
    assert not any(line.startswith(("## Injected", "[click]")) for line in md.splitlines())


# -------------------------------------------------------------------------------------------------------------
# 1. compare --format md
# -------------------------------------------------------------------------------------------------------------
def test_compare_markdown_escapes_what_the_rows_hold():
    from vitbench.compare import compare, to_markdown

    rng = np.random.default_rng(0)
    base = result_set(rng, models=("ViT-Nano/4",))
    for r in base:
        r.env["hostname"] = "vm"
    cur = [bench_record("ViT-Nano/4", repeat=i, env={"torch": "2.4.0", "hostname": HOSTILE}) for i in range(3)]
    md = to_markdown(compare(base, cur))
    _safe_markdown(md)
    (row,) = [line for line in md.splitlines() if line.startswith("| hostname |")]
    assert "\\x1b]0;PWNED-TITLE\\x07" in row and "\\x9b" in row  # visible, not sent to the terminal
    assert "## Injected heading [click](https://evil.example) \\| x \\| y \\|&lt;script>" in row
    assert len(re.findall(r"(?<!\\)\|", row)) == 4  # the table's own pipes: field | baseline | current


def test_compare_md_cli_sends_no_escape_sequence(cli, tmp_path):
    from test_compare import write_jsonl

    base = [with_env(r, "vm") for r in result_set(np.random.default_rng(0), models=("ViT-Nano/4",))]
    cur = [with_env(r, HOSTILE) for r in result_set(np.random.default_rng(1), models=("ViT-Nano/4",))]
    r = cli("compare", write_jsonl(tmp_path / "a.jsonl", base), write_jsonl(tmp_path / "b.jsonl", cur),
            "--format", "md")
    assert r.exit_code in (0, 3), r.output
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    _safe_markdown(r.stdout)


def with_env(rec, hostname):
    rec.env = {**rec.env, "hostname": hostname}
    return rec


# -------------------------------------------------------------------------------------------------------------
# 2. report.md: cells, column headers, the title and meta lines
# -------------------------------------------------------------------------------------------------------------
def test_report_markdown_escapes_cells_headers_and_meta(tmp_path):
    from vitbench.report.render import markdown_table, write_markdown

    df = pd.DataFrame({f"col{HOSTILE}": [HOSTILE, "a\rb"], "n": [1, 2]})
    table = markdown_table(df)
    _safe_markdown(table)
    header, rule, *rows = table.splitlines()
    assert len(rows) == 2 and rule == "|---|---:|"
    for line in (header, *rows):
        assert len(re.findall(r"(?<!\\)\|", line)) == 3, line  # two cells, nothing split off
    assert rows[1] == "| a b | 2 |"  # CR is a line break in CommonMark: a space
    path = tmp_path / "report.md"
    write_markdown(path, f"vitbench report: {HOSTILE}", [f"CPU: {HOSTILE}", "<img src=x onerror=alert(1)>"],
                   {"t": (f"heading {HOSTILE}", df)}, {}, {"t": [f"note {HOSTILE}"]})
    md = path.read_text()
    _safe_markdown(md)
    assert "<img" not in md and "- &lt;img src=x onerror=alert(1)>" in md
    assert md.startswith("# vitbench report: vm\\x1b]0;PWNED-TITLE\\x07")


def test_report_md_from_a_results_row_with_a_hostile_cpu_model(tmp_path):
    from vitbench.report import build_report

    with Store(tmp_path / "res") as st:
        for res in (32, 64):
            cfg = dict(model=f"ViT<b>{HOSTILE}", backend="torch", task="infer", device="cpu", resolution=res,
                       batch_size=8, precision="fp32", compile=False)
            st.append(record("bench", cfg, metrics=dict(img_per_s=100.0, step_ms_median=80.0),
                             env={"torch": "2.x", "cpu_model": f"<script>x</script>{HOSTILE}"},
                             key=trial_key(cfg, 0), study="s", run_id="run0", repeat=0, trial=cfg,
                             raw={"step_s": [0.08] * 5}))
    build_report(tmp_path / "res", tmp_path / "out", formats=("md",), plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    _safe_markdown(md)
    assert "- CPU: &lt;script>x&lt;/script>vm\\x1b]0;PWNED-TITLE" in md


# -------------------------------------------------------------------------------------------------------------
# 3. fit --where: a backtick inside a string hid a call from the check
# -------------------------------------------------------------------------------------------------------------
@pytest.fixture
def fit_csv(tmp_path):
    compute = np.geomspace(10, 1e6, 8)
    df = pd.DataFrame({"compute": compute, "error": 3 * compute ** -0.1, "family": "vit",
                       "Seen Examples": compute * 10})
    path = tmp_path / "fit.csv"
    df.to_csv(path, index=False)
    return path


def test_where_backticks_in_strings_hide_no_call(cli, fit_csv, tmp_path):
    pwned = tmp_path / "PWNED_WHERE"
    expr = f"'`' == compute.to_csv('{pwned}') or '`' == 'x'"
    r = cli("fit", fit_csv, "--compute", "compute", "--error", "error", "--out", tmp_path / "fitout",
            "--bootstrap", "0", "--where", expr)
    assert r.exit_code == 2 and "--where" in r.output and "not allowed" in r.output, r.output
    assert not pwned.exists()


@pytest.mark.parametrize("expr, says", [
    ("'`' == compute.to_csv('OUT') or '`' == 'x'", "attribute"),
    ('"`" == compute.to_csv("OUT") or "`" == "x"', "attribute"),
    ("`compute`.to_csv('OUT') == 1", "attribute"),
    ("(compute)('OUT') == 1", "call"),
    ("compute > 1 if True else False", "keyword 'if'"),
    ("f'{compute}' == 'x'", "f-string"),
    ("compute := 1", "not an expression"),
])
def test_where_refuses_attributes_and_calls_wherever_the_backticks_are(expr, says, tmp_path):
    from vitbench.fit.rows import where

    out = tmp_path / "PWNED"  # where a call that got through would write
    frame = pd.DataFrame({"compute": [1.0, 2.0]})
    with pytest.raises(ConfigError, match="--where") as e:
        where(frame, expr.replace("OUT", str(out)), "t.csv")
    assert says in str(e.value) and not out.exists()


def test_where_still_reads_backticked_names_and_strings_with_backticks():
    from vitbench.fit.rows import where

    frame = pd.DataFrame({"compute": [1.0, 2.0, 3.0], "Seen Examples": [10, 20, 30], "model": ["a`b", "c", "d"]})
    assert len(where(frame, "`Seen Examples` >= 20 and model != 'a`b'", "t")) == 2
    assert len(where(frame, "model in ['a`b', \"c\"] and not (compute > 1.5)", "t")) == 1
    assert len(where(frame, "(`compute` * 2 >= 4) | (model == 'a`b')", "t")) == 3


def test_where_splits_backticks_as_pandas_does():
    from vitbench.fit.rows import _split_backticks

    parsing = pytest.importorskip("pandas.core.computation.parsing")
    if not hasattr(parsing, "_split_by_backtick"):
        pytest.skip("this pandas finds backticks by tokenising (pandas < 2.3): no splitter to compare with")
    for expr in ("'`' == compute.to_csv('x') or '`' == 'x'", "`a``b` > 1", "`Seen Examples` > 'it''s`'",
                 "'\\'`' == `x`", "'''a'`b''' == x", "`unclosed > 1", '"`" + `q"` == 1'):
        assert _split_backticks(expr) == parsing._split_by_backtick(expr), expr


# -------------------------------------------------------------------------------------------------------------
# 4. figures: `$...$` in a model's name is text, not mathtext
# -------------------------------------------------------------------------------------------------------------
def test_a_dollar_in_a_model_name_leaves_the_figure_drawn(tmp_path):
    from vitbench.report import build_report

    with Store(tmp_path / "res") as st:
        for model in ("ViT-Nano/4", "ViT$\\frac{$x"):
            for res in (32, 64):
                cfg = dict(model=model, backend="torch", task="infer", device="cpu", resolution=res,
                           batch_size=8, precision="fp32", compile=False)
                st.append(record("bench", cfg, metrics=dict(img_per_s=100.0 / res, step_ms_median=res),
                                 env={"torch": "2.x"}, key=trial_key(cfg, 0), study="s", run_id="run0",
                                 repeat=0, trial=cfg, raw={"step_s": [res / 1e3] * 5}))
    rep = build_report(tmp_path / "res", tmp_path / "out", formats=("md",))
    assert "throughput_vs_resolution" in rep.figures, rep.not_drawn
    assert not any("ValueError" in w for w in rep.warnings), rep.warnings


def test_plain_escapes_every_dollar_once():
    from matplotlib.figure import Figure

    from vitbench.report.plots import plain

    assert plain("ViT$\\frac{$x") == "ViT\\$\\frac{\\$x" and plain("no dollar") == "no dollar"
    fig = Figure()
    fig.subplots().set_title(plain("$\\frac{$ a $x$"))
    fig.canvas.draw()  # the mathtext parser would raise ValueError
    assert fig.axes[0].title.get_text() == "\\$\\frac{\\$ a \\$x\\$"
