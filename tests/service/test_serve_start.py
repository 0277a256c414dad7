"""``blockbudget serve``'s start checks: a data root it cannot write to is one line and exit 2,
before ``serving on`` is printed and before any worker starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from s3_support import S3Server
from typer.testing import CliRunner

from blockbudget.cli import app
from blockbudget.cli import server as cli_server

runner = CliRunner()


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record a server start instead of starting uvicorn."""
    started: list[object] = []
    import blockbudget.service.server as service_server

    monkeypatch.setattr(service_server, "serve", lambda **kw: started.append(kw))
    return started


def test_a_data_root_that_is_a_file_is_refused_before_serving(
    tmp_path: Path, no_server: list[object]
) -> None:
    not_a_dir = tmp_path / "blocks"
    not_a_dir.write_text("a file", encoding="utf-8")
    home = tmp_path / "home"
    result = runner.invoke(app, ["serve", "--home", str(home), "--data-root", str(not_a_dir)])
    assert result.exit_code == 2, result.output
    assert "the data root" in result.output and str(not_a_dir) in result.output
    assert "Traceback" not in result.output
    assert "serving on" not in result.output and "created principal" not in result.output
    assert no_server == []


def test_a_missing_bucket_is_refused_before_serving(
    tmp_path: Path, s3_server: S3Server, no_server: list[object]
) -> None:
    root = s3_server.root("no-such-bucket-bb")
    result = runner.invoke(app, ["serve", "--home", str(tmp_path / "h"), "--data-root", root])
    assert result.exit_code == 2, result.output
    assert "s3://no-such-bucket-bb/blocks is not usable" in " ".join(result.output.split())
    assert "serving on" not in result.output
    assert no_server == []


def test_a_writable_data_root_starts_and_keeps_no_probe(
    tmp_path: Path, s3_server: S3Server, no_server: list[object]
) -> None:
    import pyarrow.fs as pafs

    bucket = s3_server.create_bucket()
    root = s3_server.root(bucket)
    result = runner.invoke(app, ["serve", "--home", str(tmp_path / "h"), "--data-root", root])
    assert result.exit_code == 0, result.output
    assert "serving on" in result.output
    assert len(no_server) == 1
    fs, base = pafs.FileSystem.from_uri(root)
    left = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    assert [f.path for f in left] == []  # the probe file is gone


def test_the_local_default_root_is_created(tmp_path: Path) -> None:
    cli_server.check_data_root(tmp_path / "home" / "blocks")
    assert (tmp_path / "home" / "blocks").is_dir()
    assert list((tmp_path / "home" / "blocks").iterdir()) == []
