"""Option values that would give wrong numbers with exit code 0 are refused before anything runs: exit 2 and a
message naming the option (issue 10's list, plus non-finite durations that would time forever)."""

from __future__ import annotations

import re

import pytest


@pytest.mark.parametrize("args,option", [
    (["bench", "ViT-Nano/4", "-r", "0"], "--resolution"),
    (["bench", "ViT-Nano/4", "-r", "-32"], "--resolution"),
    (["flops", "ViT-Nano/4", "-r", "0", "--no-count"], "--resolution"),
    (["flops", "ViT-Nano/4", "--num-classes", "-5", "--no-count"], "--num-classes"),
    (["bench", "ViT-Nano/4", "--max-seconds", "-5"], "--max-seconds"),
    (["bench", "ViT-Nano/4", "--min-seconds", "-1"], "--min-seconds"),
    (["bench", "ViT-Nano/4", "--min-seconds", "inf", "--max-seconds", "inf"], "finite"),
    (["max-batch", "ViT-Nano/4", "--probe-timeout", "0"], "--probe-timeout"),
    (["fewshot", "-m", "ViT-Nano/4", "--l2-reg", "-1"], "--l2-reg"),
])
def test_values_below_any_sense_exit_2_naming_the_option(args, option, cli):
    r = cli(*args)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error:") and option in r.output and "Traceback" not in r.output, r.output
    named = re.findall(r"(--[a-z][a-z0-9-]*)", r.output)
    usage = cli(args[0], "--help").output
    assert all(re.search(rf"{o}\b(?!-)", usage) for o in named), (named, usage)  # options that exist
