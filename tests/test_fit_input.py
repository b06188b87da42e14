"""`vitbench fit` on a CSV's hostile cells and header, and --where filters that select no rows: each refused
with exit 2 and a message naming the file, the column or the option (no pandas text, no traceback, nothing
written)."""

from __future__ import annotations

import json

import pytest

ROWS = [(1, 0.6), (2.68, 0.45), (7.19, 0.376), (19.3, 0.306), (51.8, 0.253), (139, 0.214), (373, 0.185),
        (1000, 0.163)]


def _csv(tmp_path, name: str, header: str = "compute,error,family", cell: str | None = None,
         family: str = "vit", extra: str = "") -> str:
    """The curve above as a CSV; `cell` replaces the error of the second row (a number otherwise)."""
    lines = [header] + [f"{c},{cell if cell is not None and i == 1 else e},{family}{extra}"
                        for i, (c, e) in enumerate(ROWS)]
    p = tmp_path / f"{name}.csv"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _fit(cli, path, out, *args):
    return cli("fit", path, "--compute", "compute", "--bootstrap", "0", "--workers", "1", "--out", out, *args)


def _refused(r, out, *says):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output) < 2048, r.output
    assert all(s in r.output for s in says), (says, r.output)
    assert not out.exists()


@pytest.mark.parametrize("cell", ["NaN", "nan", "NAN", " -nan", "+NaN"])
def test_a_cell_spelling_nan_is_refused_like_inf_not_dropped_as_empty(cli, tmp_path, cell):
    """pandas' default read took "NaN" for a missing value: the row was left out with a note, exit 0."""
    path = _csv(tmp_path, "n", cell=cell)
    out = tmp_path / "out"
    _refused(_fit(cli, path, out), out, "n.csv", "'error'", "not finite", "row 2", cell.strip())
    inf = _csv(tmp_path, "i", cell="inf")
    _refused(_fit(cli, inf, out), out, "i.csv", "'error'", "not finite", "row 2")


def test_an_empty_cell_is_still_a_missing_value_and_na_a_family_name(cli, tmp_path):
    r = _fit(cli, _csv(tmp_path, "e", cell=""), tmp_path / "e", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [g["n_points"] for g in doc["groups"]] == [7]
    assert "1 rows with only one of 'compute' and error" in r.output
    r = _fit(cli, _csv(tmp_path, "na", family="NA"), tmp_path / "na", "--json")
    assert r.exit_code == 0, r.output
    assert [(g["group"], g["n_points"]) for g in json.loads(r.stdout)["groups"]] == [({"family": "NA"}, 8)]


def test_a_repeated_column_name_is_refused(cli, tmp_path):
    """pandas renamed the second `error` to `error.1`: the fit used the first one, saying nothing."""
    path = _csv(tmp_path, "d", header="compute,error,family,error", extra=",0.9")
    out = tmp_path / "out"
    _refused(_fit(cli, path, out), out, "d.csv", "'error'", "named twice")
    # empty names (a header's trailing commas) are not names: pandas' "Unnamed: 3" and "Unnamed: 4"
    r = _fit(cli, _csv(tmp_path, "t", header="compute,error,family,,", extra=",,"), tmp_path / "t")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("expr", ["compute", "1 == 1", "family", "index", "compute + 1"])
def test_where_that_is_not_true_or_false_per_row_says_so(cli, tmp_path, expr):
    """frame.query raised first, with pandas' words: "[2.68, 7.19, ...] not in index" (the data's values),
    "boolean label can not be used without a boolean index"."""
    out = tmp_path / "out"
    r = _fit(cli, _csv(tmp_path, "w"), out, "--where", expr)
    _refused(r, out, "--where", "does not select rows (it must be true or false per row)")
    assert "not in index" not in r.output and "2.68" not in r.output and "boolean label" not in r.output
    r = _fit(cli, _csv(tmp_path, "w"), out, "--where", "compute > 2 and family == 'vit'", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["groups"][0]["n_points"] == 7, r.output


def test_where_arithmetic_on_an_integer_column_never_wraps(cli, tmp_path):
    """`compute ** 10 >= 1e12` on an integer column dropped compute = 128 in silence (int64: 2**70 wraps to 0) and
    `compute ** 1000 > 1` kept no row, blaming the filter. With arithmetic the integers are floats (past their
    range: inf, never a wrapped number); a comparison alone stays exact."""
    path = tmp_path / "ints.csv"
    path.write_text("compute,error\n" + "".join(f"{c},{0.05 + 0.5 * c ** -0.3}\n" for c in (1, 2, 4, 8, 16, 32, 64,
                                                                                           128)))
    for expr, kept in (("compute ** 10 >= 1e12", 4), ("compute ** 1000 > 1", 7), ("compute >= 16", 4),
                       ("compute * 2**62 > 2**63", 6)):
        r = _fit(cli, path, tmp_path / "out", "--where", expr, "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["groups"][0]["n_points"] == kept, (expr, r.output)
