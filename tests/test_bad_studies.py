"""The malformed-studies corpus (tests/bad_studies/): every file -> exit code 2, a message naming the file and the
field (the `# expect:` lines at the top of each file), never a traceback, and nothing run or written.

tests/test_study.py checks one parse error per kind on inline text; this runs the files through the real CLI,
as a user would meet them, and adds the executor block and bad executor options on the command line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CORPUS_DIR = Path(__file__).resolve().parent / "bad_studies"
CORPUS = sorted(CORPUS_DIR.glob("*.yaml"))
GOOD = "name: fine\ncalibration: false\naxes: {model: [ViT-Nano/4], task: [infer]}\n"


MAX_MESSAGE = 8000  # bytes: whatever the input, the message stays readable


def expectations(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8", "replace")  # some files are binary on purpose
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("# expect:")]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_corpus_covers_every_kind_of_bad_input():
    stems = {p.stem for p in CORPUS}
    for kind in ("yaml_syntax", "yaml_tab_indent", "duplicate_key", "not_a_mapping", "empty_file",
                 "unknown_top_key", "unknown_axis_field", "wrong_type_repeats", "wrong_type_batch",
                 "negative_batch",
                 "empty_axis", "no_axes", "unknown_model", "unknown_backend", "unknown_task",
                 "impossible_resolution", "zip_unequal", "unknown_executor", "bad_executor_option",
                 # hostile input: refused before it costs memory or time, with a short message
                 "not_utf8", "alias_bomb", "deep_nesting", "recursive_alias", "huge_integer",
                 "integer_out_of_range", "not_finite", "too_many_combinations", "many_problems",
                 # every problem at once
                 "three_duplicate_keys", "resolution_and_other_problems"):
        assert kind in stems, kind
    for p in CORPUS:
        assert expectations(p), f"{p.name} has no '# expect:' line"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_bad_study_exits_2_naming_file_and_field_and_runs_nothing(path, tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)  # the default results directory would be ./results/<name>
    for args in ([], ["--results", str(tmp_path / "res")], ["--dry-run"]):
        r = cli("sweep", path, *args)
        out = flat(r.output)
        assert r.exit_code == 2, (args, out)
        assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
        assert "Traceback" not in out and out.startswith("error: invalid study")
        assert path.name in out
        assert len(r.output) < MAX_MESSAGE, len(r.output)
        for expected in expectations(path):
            assert expected in out, (expected, out)
    assert list(tmp_path.iterdir()) == []  # no results directory, no rows, no study copy


@pytest.mark.parametrize("case", ["long_value", "long_key", "oversized"])
def test_huge_input_gives_a_short_message(case, tmp_path, cli):
    """Values quoted in messages are shortened; a file past the size limit is not even parsed."""
    from vitbench.study.reader import MAX_STUDY_BYTES

    big = "x" * 500_000
    text = {"long_value": f"name: v\naxes:\n  model: ['{big}']\n  task: [infer]\n",
            "long_key": f"name: v\naxes:\n  model: [ViT-Nano/4]\n  task: [infer]\n  ? {big}\n  : [1]\n",
            "oversized": "name: v\n" + "# padding\n" * (MAX_STUDY_BYTES // 10 + 1)}[case]
    study = tmp_path / "huge.yaml"
    study.write_text(text)
    r = cli("sweep", study, "--dry-run")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.output) < MAX_MESSAGE, len(r.output)
    expected = {"long_value": "axes.model[0]: unknown model", "long_key": "unknown field 'xxxxxxxx",
                "oversized": "larger than 1 MiB"}[case]
    assert expected in flat(r.output) and (case == "oversized" or "characters)" in r.output), flat(r.output)


def test_real_process_exit_code_and_stderr(tmp_path):
    for name in ("yaml_syntax", "unknown_model", "bad_executor_option"):
        path = CORPUS_DIR / f"{name}.yaml"
        r = subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", "sweep", str(path)],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == "", r.stderr
        assert all(e in flat(r.stderr) for e in expectations(path)), r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,expected", [
    (["-o", "partition"], "expected KEY=VALUE"),
    (["--executor", "slurm", "-o", "gpus=-1"], "gpus: Input should be greater than or equal to 0"),
    (["--executor", "ray", "-o", "num_gpu=1"], "num_gpu: Extra inputs are not permitted"),
    (["--executor", "nomad"], "--executor 'nomad' is not allowed; allowed: local, slurm, ray"),
    (["-o", "bogus=1"], "bogus"),  # the local executor's options are checked too
], ids=["no-equals", "slurm-negative-gpus", "ray-typo", "unknown-executor", "local-unknown-option"])
def test_bad_executor_options_on_the_command_line_exit_2_and_write_nothing(args, expected, tmp_path, cli):
    study = tmp_path / "fine.yaml"
    study.write_text(GOOD)
    r = cli("sweep", study, "--results", tmp_path / "res", *args)
    assert r.exit_code == 2 and expected in flat(r.output), flat(r.output)
    assert "Traceback" not in r.output
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("where", ["option", "env"])
def test_a_ray_address_where_no_cluster_listens_exits_2_at_once_and_writes_nothing(where, tmp_path, cli,
                                                                                   monkeypatch):
    """`--executor ray -o address=HOST:PORT` with no cluster there waited ~2 minutes (ray.init tries the GCS 20
    times, 5 s each) before one raw line. Now the address is probed first (a TCP connect, 5 s at most; a loopback
    port where nothing listens refuses at once): exit 2 naming the address, its source and what to do, before
    anything is claimed or written. An address where something listens passes the probe (ray.init decides)."""
    import socket
    import time

    pytest.importorskip("ray")
    from vitbench.executors.ray import RayExecutor

    with socket.socket() as s:  # a free loopback port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    study = tmp_path / "fine.yaml"
    study.write_text(GOOD)
    if where == "env":
        monkeypatch.setenv("RAY_ADDRESS", address)
    t = time.monotonic()
    r = cli("sweep", study, "--results", tmp_path / "res", "--executor", "ray",
            *(["-o", f"address={address}"] if where == "option" else []))
    said = flat(r.output)
    named = f"address={address!r}" if where == "option" else f"$RAY_ADDRESS {address!r}"
    assert r.exit_code == 2 and said.startswith(f"error: executor 'ray': no Ray cluster at {named}"), said
    assert "nothing listens there" in said and "-o address=HOST:PORT" in said and "Traceback" not in r.output
    assert time.monotonic() - t < 30 and not (tmp_path / "res").exists()
    with socket.socket() as s:  # something listens (on every interface: Ray reads loopback as the node's IP)
        s.bind(("0.0.0.0", 0))
        s.listen()
        RayExecutor(None, address=f"127.0.0.1:{s.getsockname()[1]}").close()  # no ray.init until a trial
