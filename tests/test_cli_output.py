"""What the CLI prints into logs and pipes: tables that never break a word or a number, COLUMNS honoured, a
readable width when no terminal is attached, help texts re-flowed without placeholders on flags or cut option
names."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from rich.table import Table

from vitbench.cli.common import LOG_WIDTH, _Console


def run_cli(*args: str, columns: int | None = None) -> str:
    """`vitbench ARGS` in a process with no terminal at all (stdin, stdout and stderr are not ttys), as in CI."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    r = subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", *args], env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def cells_of(text: str) -> list[str]:
    """The words inside table cells (box characters and padding removed)."""
    return re.split(r"[\s│┃|]+", text)


@pytest.mark.parametrize("width", [20, 40, 80])
def test_a_table_never_breaks_a_word_or_a_number(width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    t = Table(title="narrow")
    t.add_column("model")
    t.add_column("img_per_s", justify="right")
    t.add_column("note")
    words = ["ViT-Mini/4", "11785", "R-Nano+ViT-Micro/8", "1178.5", "inference", "0.004474", "14683"]
    t.add_row("ViT-Mini/4", "11785", "inference throughput on ViT-Mini/4")
    t.add_row("R-Nano+ViT-Micro/8", "1178.5", "0.004474 GFLOPs 14683")
    out = io.StringIO()
    _Console(file=out).print(t)
    text = out.getvalue()
    found = cells_of(text)
    for w in words:
        assert w in found, (w, text)
    if width >= 80:  # it fits: it keeps to the width
        assert max(len(line) for line in text.splitlines()) <= width


def test_columns_is_honoured_and_read_at_every_print(monkeypatch):
    t = Table()
    t.add_column("a")
    t.add_row(" ".join(["word"] * 60))
    out = io.StringIO()
    console = _Console(file=out)  # made before COLUMNS is set, as the CLI's consoles are
    monkeypatch.setenv("COLUMNS", "50")
    console.print(t)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 50


def test_without_a_terminal_the_width_is_the_log_width():
    out = run_cli("models")
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= LOG_WIDTH
    # one row per model, not folded: a variant's name and its timm id on one line
    assert any("ViT-B/16" in ln and "vit_base_patch16_224" in ln for ln in lines), out


def test_a_narrow_columns_setting_still_keeps_every_name_whole():
    out = run_cli("models", columns=60)
    found = cells_of(out)
    for name in ("ViT-B/16", "vit_base_patch16_224", "R50+ViT-B/16", "R-Nano+ViT-Micro/8"):
        assert name in found, name


def test_help_is_reflowed_with_whole_option_names_and_no_bool_placeholders():
    text = run_cli("sweep", "--help", columns=80)
    assert "<bool>" not in text and "…" not in text
    for opt in ("--calibration / --no-calibration", "--keep-logs / --no-keep-logs", "--allow-failures",
                "--executor-option"):
        assert opt in text, opt
    # the description's paragraphs are filled to the width, not broken where the docstring's lines ended
    body = text.split("Arguments:")[0].split("\n\n")[2:]
    for para in body:
        lines = [ln.strip() for ln in para.strip().splitlines()]
        assert all(len(ln) > 50 for ln in lines[:-1]), para
    assert all(len(line) <= 80 for line in text.splitlines())


def test_brackets_in_data_are_printed_not_taken_for_markup(tmp_path, cli):
    """An error message such as torch's '[enforce fail at alloc_cpu.cpp:127]' reaches the user whole (rich
    markup would take '[enforce ...]' for a style and drop it)."""
    from records import record

    from vitbench.store import Store

    cfg = {"model": "ViT-Nano/4", "backend": "torch", "task": "infer", "device": "cpu", "resolution": 32,
           "batch_size": 8}
    with Store(tmp_path / "res") as st:
        error = {"type": "RuntimeError", "message": "[enforce fail at alloc_cpu.cpp:127] no memory"}
        st.append(record("bench", cfg, status="oom", key="k1", study="s", run_id="r", trial=cfg, error=error))
        st.append(record("bench", {**cfg, "batch_size": 4}, metrics={"img_per_s": 1.0}, key="k2", study="s",
                         run_id="r", trial={**cfg, "batch_size": 4}, raw={"step_s": [1.0]}))
    r = cli("report", tmp_path / "res", "--out", tmp_path / "rep", "--no-plots", "--format", "md")
    assert r.exit_code == 0, r.output
    assert "[enforce fail at alloc_cpu.cpp:127]" in r.output


def test_a_long_table_is_laid_out_in_one_pass_with_the_same_rules(monkeypatch):
    """More than LONG_ROWS rows (compare of two large sweeps, a large dry run): vitbench.cli.long_table lays it out
    (issue 51), with the short tables' rules: every cell whole, a long cell wrapped between words within the
    width, numbers right-aligned, the title, header and caption kept."""
    from vitbench.cli.long_table import LONG_ROWS

    monkeypatch.setenv("COLUMNS", "60")
    t = Table(title="long", caption="every row: x=1")
    t.add_column("model", no_wrap=True)
    t.add_column("img_per_s", justify="right")
    t.add_column("note")
    note = "one run on a side: steps + assumed between-run sd 0.9, busy-host floor"
    for i in range(LONG_ROWS + 1):
        t.add_row(f"ViT-Nano/{i}", str(10 ** (i % 5)), note if i % 2 else "[green]ok[/]", style="red" if i else "")
    out = io.StringIO()
    _Console(file=out).print(t)
    lines = out.getvalue().splitlines()
    assert lines[0] == "long" and lines[-1] == "every row: x=1"
    assert lines[1].split() == ["model", "img_per_s", "note"] and set(lines[2]) == {"─"}
    assert max(map(len, lines)) <= 60
    body = lines[3:-1]
    # columns: model 13 wide (its longest name, no wrap), img_per_s 9 (its header), note the rest of 60 - 2 x 2
    assert body[0].split() == ["ViT-Nano/0", "1", "ok"]  # markup rendered, not printed
    for ln, number in ((body[0], "1"), (body[1], "10")):
        assert ln.index(number, 13) + len(number) == 13 + 2 + 9  # right-aligned
    assert " ".join(ln[26:].strip() for ln in body[1:4]) == note  # wrapped between words, within the width
    assert all(not ln[:26].strip() for ln in body[2:4]) and body[4].startswith("ViT-Nano/2 ")
    assert sum(w == "ViT-Nano/1000" for w in cells_of(out.getvalue())) == 1
    # on a terminal with colours the same lines go through rich, styled: the row's colour, the cell's markup
    out = io.StringIO()
    _Console(file=out, force_terminal=True, color_system="standard", width=60).print(t)
    text = out.getvalue()
    assert "\x1b[31m" in text and "\x1b[32mok" in text and "[green]" not in text
    assert re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()[3:6] == body[:3]
