"""Give a checkout of vitbench from before `turns` the turn-taking harness, so that `vitbench ab` can measure it
against a newer commit with `--schedule turns` (trials in step) instead of falling back to `together`.

`ab` runs a side whose tree has no vitbench/turns.py `together`, whose pair noise on this 2-core VM is 2-6x that
of `turns` (docs/compare.md, "Trials in step"), too much to decide a 5 % threshold. This script changes nothing
that is measured: it copies this checkout's vitbench/turns.py (the client, standard library only) into TREE,
hands the turn over after each timed window in the two timing loops (`start += turns.between_windows()`, the line
the timers carry since turns: the wait is never timed) and holds it around the task in trial.py under the trial's
role and key (the label the referee keeps the sides in step by). Commit the result on a throwaway branch and use
it as `ab`'s REF.

Used for issue 52's gate (docs/compare.md, "Issue 52 against its predecessor"):

    git worktree add -b pre52-turns /tmp/pre52 cf6ef75
    python benchmarks/backport_turns.py /tmp/pre52
    git -C /tmp/pre52 add -A && git -C /tmp/pre52 commit -qm "turns backported"
    vitbench ab pre52-turns --budget-s 600

Fits the timers of commits whose loops stop on `window_done(...)` followed by `return times` (before a0fb3bc);
refuses a tree that already takes turns or whose loops it cannot find (exit 2).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TIMERS = ("vitbench/backends/base.py", "vitbench/backends/torch/backend.py")
MARK = "  # backported for a turns A/B (benchmarks/backport_turns.py)"


def _loops(text: str) -> tuple[str, int]:
    """The timers' text with the hand-over after each `return times` of a `window_done` stop; how many."""
    lines, out, n = text.split("\n"), [], 0
    for i, line in enumerate(lines):
        out.append(line)
        if line.strip() == "return times":
            j = i - 1
            while j > i - 4 and "if window_done" not in lines[j]:
                j -= 1
            if "if window_done" in lines[j]:
                indent = lines[j][: len(lines[j]) - len(lines[j].lstrip())]
                out.append(f"{indent}start += turns.between_windows(){MARK}")
                n += 1
    return "\n".join(out), n


def backport(tree: Path) -> None:
    if (tree / "vitbench" / "turns.py").exists():
        raise SystemExit(f"{tree}: already takes turns (vitbench/turns.py)")
    edits = {}
    for rel in TIMERS:
        text, n = _loops((tree / rel).read_text())
        if n != 2:
            raise SystemExit(f"{tree / rel}: found {n} timing loops ending on window_done, expected 2")
        head = ("from vitbench.backends.workload import" if rel.endswith("base.py")
                else "from vitbench.backends.base import")
        if head not in text:
            raise SystemExit(f"{tree / rel}: no '{head}' line to import turns before")
        edits[rel] = text.replace(head, f"from vitbench import turns{MARK}\n{head}", 1)
    trial = (tree / "vitbench" / "trial.py").read_text()
    run = "        rec = task().run(task.Params.model_validate(job.config))\n"
    if run not in trial or "from vitbench import phases\n" not in trial:
        raise SystemExit(f"{tree / 'vitbench/trial.py'}: the task's run line or the phases import not found")
    trial = trial.replace(run, f'        with turns.held(f"{{job.role.value}} {{job.key}}"):{MARK}\n    {run}', 1)
    phases = "from vitbench import phases\n"
    edits["vitbench/trial.py"] = trial.replace(phases, "from vitbench import phases, turns\n", 1)
    for rel, text in edits.items():
        (tree / rel).write_text(text)
    shutil.copyfile(HERE / "vitbench" / "turns.py", tree / "vitbench" / "turns.py")
    print(f"{tree}: turns backported ({', '.join(edits)}, vitbench/turns.py)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", type=Path, help="a checkout (git worktree) of a commit from before turns")
    try:
        backport(ap.parse_args().tree)
    except SystemExit as e:
        print(f"backport_turns: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
