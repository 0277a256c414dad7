"""The command line prints every kind of answer as text: grouped answers one line per group,
histograms and quantiles as tables (a row per bin), a dry run's price; and refuses bad short forms
with a clear message and nothing charged."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from blockbudget.cli import app
from query.support import platform, state

runner = CliRunner()


def test_every_answer_prints_as_text(tmp_path: Path) -> None:
    p = platform(tmp_path / "h")
    p.close()
    base = ["--epsilon", "1", "--context", "a", "--home", str(tmp_path / "h"), "--last", "2"]
    bounds = ["--column", "v", "--lower", "0", "--upper", "48"]
    runs = {
        "variance": [*bounds, "--group-by", "c=a,b", "--where", "n >= 1"],
        "quantiles": [*bounds, "--quantiles", "0.5,0.9", "--bins", "48"],
        "histogram": ["--column", "c", "--categories", "a,b", "--other"],
        "count": [
            "--group-by",
            "c=a,b",
            "--group-by",
            "n=0,1",
            "--where",
            "time < 2024-03-02T00:00",
        ],
    }
    out = {k: runner.invoke(app, ["query", k, "s", *base, *v]) for k, v in runs.items()}
    for k, r in out.items():
        assert r.exit_code == 0, (k, r.output)
        assert "cost per block: (ε=1, δ=0)" in r.output, r.output
    assert "  a: " in out["variance"].output and "  b: " in out["variance"].output
    assert (
        "┃ quantile ┃ DP value ┃" in out["quantiles"].output
        and "│ 0.5 " in out["quantiles"].output
        and "resolution (bin width): 1" in out["quantiles"].output
    )
    assert "┃ category ┃" in out["histogram"].output and "│ other " in out["histogram"].output
    assert "Decimal(" not in out["histogram"].output and "[[" not in out["histogram"].output
    assert "a  0: " in out["count"].output and "b  1: " in out["count"].output
    p = platform(tmp_path / "h2")
    before = state(p)
    p.close()
    base2 = [*base[:-4], "--home", str(tmp_path / "h2"), "--last", "2"]
    r = runner.invoke(app, ["query", "mean", "s", *base2, *bounds, "--dry-run"])
    assert r.exit_code == 0 and "dry run: mean" in r.output and "can afford" in r.output
    r = runner.invoke(app, ["query", "count", "s", *base2, "--where", "v ~ 3"])
    assert r.exit_code == 2 and "COLUMN OP VALUE" in " ".join(r.output.split())
    run = ["query", "run", "s", "--context", "a", "--home", str(tmp_path / "h2")]
    r = runner.invoke(app, [*run, "--spec", "@/nonexistent.json"])
    assert r.exit_code == 2 and "cannot read --spec" in r.output
    r = runner.invoke(app, [*run, "--spec", "{not json"])
    assert r.exit_code == 2 and "not JSON" in r.output
    from blockbudget.platform import Platform

    p = Platform(tmp_path / "h2", engine="arrow")
    try:
        assert state(p) == before
    finally:
        p.close()


def test_lists_keep_brackets_unless_they_are_a_json_array() -> None:
    from blockbudget.query.text import parse_group_by, parse_list

    assert parse_list("[1, 2]") == [1, 2]
    assert parse_list('["a,b", "[c]"]') == ["a,b", "[c]"]  # a JSON array: commas kept
    assert parse_list("[x],[y]") == ["[x]", "[y]"]  # not JSON: the raw text is split
    assert parse_list("[x]") == ["[x]"]
    assert parse_list("[a, b]") == ["[a", "b]"]  # not JSON either: nothing is stripped
    assert parse_list('["2024-03-01"]') == [{"date": "2024-03-01"}]
    assert parse_group_by("c=[x],y")["domain"] == ["[x]", "y"]
