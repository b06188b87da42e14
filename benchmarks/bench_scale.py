"""How the analysis commands scale with the size of a store: `load`, `compare` (plain and `--normalize`),
`report`, `fit`, `history append` and `sweep --dry-run` timed on stores of 1,000 to 100,000 rows made from real
rows (issue 51; docs/measurement.md, "Analysis at scale").

    python benchmarks/bench_scale.py make WORK [--sizes 1000,10000,100000] [--seed-results DIR]
    python benchmarks/bench_scale.py time WORK [--sizes ...] [--commands load,compare,normalize,report,...]
    python benchmarks/bench_scale.py all WORK            # make, then time

make: the real rows are one run of studies/ci.yaml (`vitbench sweep studies/ci.yaml --results WORK/seed`, run here
unless --seed-results names a results directory that holds one): its calibration row and its trial rows. Each
size N gets two stores, WORK/N/a and WORK/N/b, of N trial rows each: trial i is the real trial row i mod T (T = the
number of real ones) with batch size 16 + i // T, so every row is a distinct trial (distinct config, key
`vitbench.study.trial_key`), grouped into sweep runs of RUN_TRIALS trials, each with its own run id, one
calibration row at its start and increasing timestamps. Store b holds the same trials from other runs, every
per-step time multiplied by a log-normal factor (sigma NOISE): an A/A pair for `compare`. WORK/N/study.yaml is a
study of N trials (the real study's two models x two tasks x N/4 batch sizes; N <= 10,000, the study limit
vitbench.study.schema.MAX_COMBINATIONS) for `sweep --dry-run`.

time: each command in its own process, one after the other (never two at once), with its wall time, CPU time
(user + sys, from os.wait4: what the process itself used, which a busy machine does not inflate as it does the
wall time) and peak RSS (ru_maxrss of that process), and the 1-minute load average before it started; a Markdown
table on stdout. The commands:
    load      python -c 'vitbench.tidy.load(WORK/N/a)'
    compare   vitbench compare WORK/N/a WORK/N/b          (exit 0, 1 or 3: a completed comparison)
    normalize vitbench compare WORK/N/a WORK/N/b --normalize (each run's speeds over its own calibration)
    report    vitbench report WORK/N/a --out WORK/N/report-XXXX (a new folder; every format, the figures)
    fit       vitbench fit WORK/N/a --compute inference_gflops --error step_cv --bootstrap 0 --workers 1
    history   vitbench history append WORK/N/a --db WORK/N/history-XXXX.sqlite --commit HEAD (a new file)
    dry-run   vitbench sweep WORK/N/study.yaml --dry-run --results WORK/N/dry
A command over its --timeout (default 600 s) is stopped and shown as "> timeout". The commands run from the
temporary directory, not the checkout, so `PYTHONPATH=<a worktree of another commit>` times that commit.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN_TRIALS = 1000  # trials per synthetic sweep run (one calibration row each): a large study's run
NOISE = 0.02  # log-normal sigma of store b's per-step times against a's: a quiet machine's run-to-run noise
SIZES = (1000, 10_000, 100_000)
DRY_RUN_MAX = 10_000  # vitbench.study.schema.MAX_COMBINATIONS: the largest study there is
COMMANDS = ("load", "compare", "normalize", "report", "fit", "history", "dry-run")
STUDY = "studies/ci.yaml"
VITBENCH = [sys.executable, "-c", "from vitbench.cli import main; main()"]  # the CLI in this interpreter
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def seed_rows(work: Path, seed_results: Path | None) -> tuple[list[dict], list[dict]]:
    """(calibration rows, trial rows) of one real run of the CI study, as JSON objects."""
    src = seed_results or work / "seed"
    if not any(src.glob("results*.jsonl")):
        print(f"making real rows: vitbench sweep {STUDY} --results {src}", file=sys.stderr)
        subprocess.run([*VITBENCH, "sweep", STUDY, "--results", str(src)], check=True,
                       stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for f in sorted(src.glob("results*.jsonl")) for line in f.open() if line.strip()]
    cal = [r for r in rows if r["kind"] == "calibration" and r["status"] == "ok"]
    trials = [r for r in rows
              if r["kind"] != "calibration" and r["status"] == "ok" and "batch_size" in r["config"]]
    if not cal or not trials:
        raise SystemExit(f"{src}: expected ok calibration and trial rows of {STUDY}")
    return cal[:1], trials


def _stamp(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def make_store(path: Path, n: int, cal: list[dict], trials: list[dict], side: str) -> None:
    from vitbench.study import trial_key

    path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{side}{n}")
    offset = 0.0 if side == "a" else 10.0 * n  # b's runs come later
    with open(path / "results.jsonl", "w") as fh:
        for i in range(n):
            run, t = i // RUN_TRIALS, offset + 10.0 * i
            run_id = f"2026{side}{run:06d}-bench"
            if i % RUN_TRIALS == 0:
                c = copy.deepcopy(cal[0])
                c.update(run_id=run_id, started_at=_stamp(t), finished_at=_stamp(t + 1))
                fh.write(json.dumps(c, separators=(",", ":")) + "\n")
            r = copy.deepcopy(trials[i % len(trials)])
            bs = 16 + i // len(trials)
            for cfg in (r["config"], r["trial"]):
                if cfg is not None:
                    cfg["batch_size"] = bs
            r["key"] = trial_key(r["trial"] or r["config"], 0, 1)
            r.update(run_id=run_id, started_at=_stamp(t + 2), finished_at=_stamp(t + 9))
            if side == "b" and isinstance(r["raw"].get("step_s"), list):
                r["raw"]["step_s"] = [s * rng.lognormvariate(0, NOISE) for s in r["raw"]["step_s"]]
            fh.write(json.dumps(r, separators=(",", ":")) + "\n")


def make_study(path: Path, n: int) -> None:
    """A study of n trials: the CI study's defaults, two models x two tasks x n/4 batch sizes."""
    import yaml

    base = yaml.safe_load(Path(STUDY).read_text())
    models, tasks = base["axes"]["model"], base["axes"]["task"]
    per = n // (len(models) * len(tasks))
    base.update(name=f"scale{n}", calibration=False)
    base["axes"] = {"model": models, "task": tasks, "batch_size": list(range(1, per + 1))}
    path.write_text(yaml.safe_dump(base, sort_keys=False))


def make(work: Path, sizes: list[int], seed_results: Path | None) -> None:
    cal, trials = seed_rows(work, seed_results)
    for n in sizes:
        d = work / str(n)
        for side in "ab":
            t = time.monotonic()
            make_store(d / side, n, cal, trials, side)
            print(f"made {d / side}: {n} trials in {time.monotonic() - t:.1f} s", file=sys.stderr)
        if n <= DRY_RUN_MAX:
            make_study(d / "study.yaml", n)


def command(name: str, d: Path) -> list[str] | None:
    vb = VITBENCH
    if name == "load":
        return [sys.executable, "-c", f"from vitbench.tidy import load; load({str(d / 'a')!r})"]
    if name in ("compare", "normalize"):
        return [*vb, "compare", str(d / "a"), str(d / "b"), *(["--normalize"] if name == "normalize" else [])]
    if name == "history":  # a new file each time: a run already appended is refused
        fd, db = tempfile.mkstemp(prefix="history-", suffix=".sqlite", dir=d)
        os.close(fd)
        os.unlink(db)
        # the seed rows may come from a working tree with changes: recorded as this checkout's commit
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        repo = str(Path(__file__).resolve().parents[1])
        return [*vb, "history", "append", str(d / "a"), "--db", db, "--repo", repo,
                *(["--commit", head] if head else [])]
    if name == "report":  # a new folder each time: a report refuses one holding files it cannot prove it wrote
        return [*vb, "report", str(d / "a"), "--out", tempfile.mkdtemp(prefix="report-", dir=d)]
    if name == "fit":
        return [*vb, "fit", str(d / "a"), "--compute", "inference_gflops", "--error", "step_cv",
                "--bootstrap", "0", "--workers", "1"]
    if name == "dry-run":
        study = d / "study.yaml"
        return [*vb, "sweep", str(study), "--dry-run", "--results", str(d / "dry")] if study.exists() else None
    raise ValueError(name)


def run(cmd: list[str], timeout: float) -> dict:
    """Wall, CPU (user + sys) and peak RSS of one command run alone, and the load average before it."""
    load1 = os.getloadavg()[0]
    t = time.monotonic()
    # from another directory than the checkout: `python -c` puts its working directory first on sys.path, so a
    # PYTHONPATH naming another commit's worktree (an A/B of two commits) was read from the checkout instead
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tempfile.gettempdir())
    deadline, status, ru = t + timeout, None, None
    while status is None:
        pid, st, ru_ = os.wait4(p.pid, os.WNOHANG)
        if pid:
            status, ru = st, ru_
        elif time.monotonic() > deadline:
            p.kill()
            _, status, ru = os.wait4(p.pid, 0)
            return {"wall": None, "cpu": ru.ru_utime + ru.ru_stime, "rss_gib": ru.ru_maxrss / 2**20,
                    "load1": load1, "rc": None}
        else:
            time.sleep(0.05)
    wall = time.monotonic() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    if p.returncode not in (0, 1, 3):  # compare: no regression, regression, inconclusive
        print(f"{' '.join(cmd)}: exit {p.returncode}\n{err[-2000:]}", file=sys.stderr)
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_gib": ru.ru_maxrss / 2**20, "load1": load1,
            "rc": p.returncode}


def table(results: list[tuple[str, int, dict]]) -> str:
    lines = ["| command | rows (trials) | wall s | CPU s (user+sys) | peak RSS GiB | load1 before | exit |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, n, r in results:
        wall = f"{r['wall']:.1f}" if r["wall"] is not None else "> timeout"
        lines.append(f"| {name} | {n:,} | {wall} | {r['cpu']:.1f} | {r['rss_gib']:.2f} | {r['load1']:.1f} | "
                     f"{r['rc']} |")
    return "\n".join(lines)


def time_all(work: Path, sizes: list[int], commands: list[str], timeout: float) -> None:
    results = []
    for name in commands:
        for n in sizes:
            cmd = command(name, work / str(n))
            if cmd is None:
                continue
            r = run(cmd, timeout)
            results.append((name, n, r))
            print(f"{name} {n}: {r}", file=sys.stderr, flush=True)
    cpu = os.cpu_count()
    print(f"{len(results)} runs, {cpu} CPUs, load average at the end {os.getloadavg()}, "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB peak RSS of this script\n")
    print(table(results))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("make", "time", "all"))
    ap.add_argument("work", type=lambda s: Path(s).resolve())  # absolute: the commands run from elsewhere
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--seed-results", type=Path)
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    commands = [c for c in a.commands.split(",") if c]
    if bad := [c for c in commands if c not in COMMANDS]:
        ap.error(f"--commands {','.join(bad)}: unknown; allowed: {', '.join(COMMANDS)}")
    if a.what in ("make", "all"):
        make(a.work, sizes, a.seed_results)
    if a.what in ("time", "all"):
        time_all(a.work, sizes, commands, a.timeout)


if __name__ == "__main__":
    main()
