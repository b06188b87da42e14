"""A plug-in's report section as docs/plugins.md shows it: a section that raises is a note in the report and a
warning, not a crash; a malformed section is refused when made; rows of a kind no loaded section shows are said."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
from records import record

from vitbench.errors import ConfigError
from vitbench.report import build_report
from vitbench.report import parts as partsmod
from vitbench.store import Store

KIND = "seqlen"
TITLE = "Sequence length (test plug-in)"


@pytest.fixture
def scratch_parts(monkeypatch):
    """The registered report sections as they are, restored after the test (a test plug-in leaves nothing)."""
    from vitbench.report.views import report_parts

    report_parts()  # the built-in sections and the loaded plug-ins' registered first
    monkeypatch.setattr(partsmod, "_REPORT_PARTS", list(partsmod._REPORT_PARTS))
    monkeypatch.setattr(partsmod, "_OWNERS", dict(getattr(partsmod, "_OWNERS", {})), raising=False)


def plugin(tmp_path, monkeypatch, source: str, name: str = "seqlen_plugin"):
    """`source` as the plug-in module `name`, imported (its registrations run)."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def seqlen_results(path) -> None:
    """Rows of the plug-in's kind only: the built-in sections have nothing to show (a fast report)."""
    with Store(path) as st:
        for i, res in enumerate((32, 64)):
            cfg = dict(model="ViT-Nano/4", task=KIND, resolution=res)
            st.append(record(KIND, cfg, metrics={"tokens": (res // 4) ** 2 + 1}, key=f"k{i}", study="s",
                             run_id="run0", repeat=0, trial=cfg))


HEADER = '''
    from vitbench.report.parts import Figure, ReportPart, register_report

    def table(df):
        return df[["model", "resolution", "tokens"]]
'''


def test_a_plugin_section_whose_table_raises_is_a_note_and_a_warning_not_a_crash(tmp_path, monkeypatch,
                                                                                 scratch_parts, cli):
    plugin(tmp_path, monkeypatch, HEADER + f'''
    def broken(df):
        return df["no_such_column"]

    register_report(ReportPart("seqlen", "{TITLE}", ("{KIND}",), table=broken))
    ''')
    seqlen_results(tmp_path / "res")
    r = cli("report", tmp_path / "res", "--no-plots", "--format", "md,html,csv")
    assert r.exit_code == 0 and r.exception is None, r.output
    assert "Traceback" not in r.output
    said = [w for w in r.stderr.splitlines() if "'seqlen'" in w]
    assert len(said) == 1 and said[0].startswith("warning:"), r.stderr
    assert "plug-in module seqlen_plugin" in said[0] and "KeyError" in said[0] and "no_such_column" in said[0]
    out = tmp_path / "res" / "report"
    md = (out / "report.md").read_text()
    assert f"## {TITLE}" in md and "This section could not be made: KeyError: 'no_such_column'" in md
    assert "could not be made: KeyError" in (out / "report.html").read_text()
    assert (out / "status.csv").exists() and not (out / "seqlen.csv").exists()


def test_a_plugin_figure_that_raises_is_a_note_in_its_place(tmp_path, monkeypatch, scratch_parts):
    plugin(tmp_path, monkeypatch, HEADER + f'''
    def draw(df):
        raise ValueError("cannot draw " + "x" * 5000)

    register_report(ReportPart("seqlen", "{TITLE}", ("{KIND}",), table=table,
                               figures=(Figure("seqlen_plot", "Tokens vs size", draw),)))
    ''')
    seqlen_results(tmp_path / "res")
    rep = build_report(tmp_path / "res", tmp_path / "out", formats=("md",))
    assert list(rep.tables["seqlen"]["tokens"]) == [65, 257]  # the section's table is unaffected
    assert rep.not_drawn["seqlen_plot"].startswith("the figure could not be made: ValueError: cannot draw")
    said = [w for w in rep.warnings if "'seqlen_plot'" in w]
    assert len(said) == 1 and "plug-in module seqlen_plugin" in said[0] and len(said[0]) < 500
    md = (tmp_path / "out" / "report.md").read_text()
    assert "_Not drawn: the figure could not be made: ValueError: cannot draw" in md
    assert not list((tmp_path / "out").glob("seqlen_plot.*"))


def test_a_builtin_section_that_raises_is_a_note_too(tmp_path, monkeypatch, scratch_parts):
    from dataclasses import replace

    def broken(df):
        raise RuntimeError("a bug")

    monkeypatch.setattr(partsmod, "_REPORT_PARTS", [replace(p, table=broken) if p.name == "flops" else p
                                                    for p in partsmod._REPORT_PARTS])
    seqlen_results(tmp_path / "res")
    rep = build_report(tmp_path / "res", tmp_path / "out", formats=("md",), plots=False)
    assert rep.failed == {"flops": "RuntimeError: a bug"} and rep.tables["flops"].empty
    said = "report section 'flops' (vitbench.report.views) could not be made: RuntimeError: a bug"
    assert any(w.startswith(said) for w in rep.warnings)
    assert "This section could not be made: RuntimeError: a bug" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("figures", ["(Figure('f', 'F', table))", "Figure('f', 'F', table)", "(table,)"])
def test_figures_that_are_not_a_tuple_of_figure_are_refused_when_registered(tmp_path, monkeypatch, scratch_parts,
                                                                            figures):
    with pytest.raises(ConfigError) as e:
        plugin(tmp_path, monkeypatch, HEADER + f'''
    register_report(ReportPart("seqlen", "{TITLE}", ("{KIND}",), table=table, figures={figures}))
    ''')
    msg = str(e.value)
    assert "report section 'seqlen' (seqlen_plugin): figures must be a tuple of" in msg
    assert ("needs its comma" in msg) == ("table," not in figures)
    assert all(p.name != "seqlen" for p in partsmod._REPORT_PARTS)


def test_kinds_that_are_a_bare_string_are_refused_and_a_list_of_figures_is_taken():
    from vitbench.report.parts import Figure, ReportPart

    with pytest.raises(ConfigError, match=r"kinds must be a tuple of record kinds .* needs its comma"):
        ReportPart("seqlen", TITLE, (KIND))
    part = ReportPart("seqlen", TITLE, [KIND], figures=[Figure("f", "F", print)])
    assert part.kinds == (KIND,) and isinstance(part.figures, tuple)


def test_rows_of_a_kind_no_section_shows_are_said(tmp_path, monkeypatch, scratch_parts, cli):
    seqlen_results(tmp_path / "res")
    r = cli("report", tmp_path / "res", "--no-plots", "--format", "md")
    assert r.exit_code == 0, r.output
    said = [w for w in r.stderr.splitlines() if "no registered report section" in w]
    assert len(said) == 1 and said[0].startswith("warning:"), r.stderr
    assert "2 of kind 'seqlen'" in said[0] and "$VITBENCH_PLUGINS" in said[0] and "docs/plugins.md" in said[0]

    plugin(tmp_path, monkeypatch, HEADER + f'''
    register_report(ReportPart("seqlen", "{TITLE}", ("{KIND}",), table=table))
    ''')
    rep = build_report(tmp_path / "res", tmp_path / "out", formats=("md",), plots=False)
    assert not [w for w in rep.warnings if "no registered report section" in w]
    assert TITLE in (tmp_path / "out" / "report.md").read_text()
