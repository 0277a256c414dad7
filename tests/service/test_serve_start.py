"""``blockbudget serve``'s start checks: a data root it cannot write to is one line and exit 2,
before ``serving on`` is printed and before any worker starts."""

from __future__ import annotations

import os
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


def test_serve_offers_the_flights_pipelines_to_every_worker(
    tmp_path: Path, no_server: list[dict[str, object]]
) -> None:
    result = runner.invoke(app, ["serve", "--home", str(tmp_path / "h")])
    assert result.exit_code == 0, result.output
    assert no_server[0]["pipelines"] == ("blockbudget.apps.flights.pipelines",)


def test_the_server_names_its_pipeline_modules_to_the_workers_and_refuses_a_bad_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    import blockbudget.service.server as service_server
    from blockbudget.errors import InvalidRequestError

    for name in ("HOME", "GROUP_COMMIT", "SCHEDULER", "PIPELINE_SCHEDULER", "PIPELINES"):
        monkeypatch.setenv(f"BLOCKBUDGET_{name}", "")  # restored after the test
    runs: list[str] = []
    monkeypatch.setattr(
        uvicorn,
        "run",
        lambda *a, **kw: runs.append(os.environ[service_server.ENV_PIPELINES]),
    )
    common = dict(home=tmp_path, database=None, host="127.0.0.1", port=0, workers=1)
    with pytest.raises(InvalidRequestError, match="PIPELINE_KINDS"):
        service_server.serve(**common, group_commit=True, pipelines=("blockbudget.errors",))
    assert runs == []
    service_server.serve(
        **common, group_commit=True, pipelines=("blockbudget.apps.flights.pipelines",)
    )
    assert runs == ["blockbudget.apps.flights.pipelines"]
