"""``blockbudget blocks --check-files [--remove-orphans]`` (issue 30, item 5): the block files
under the data root compared with the catalog — orphans a killed ingest left, and listed parts
whose file is missing (a restored store) — exit 1 while anything needs attention; orphans are
removed only when asked, only past ``--grace``, and never a file the catalog lists."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cli.support import invoke, invoke_json, make_home

TWO_DAYS = 2 * 86_400


def _plant(blocks: Path, rel: str, *, age_seconds: float = 0.0) -> str:
    path = blocks / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": [1]}), path)
    then = time.time() - age_seconds
    os.utime(path, (then, then))
    return rel


def _parts(blocks: Path) -> set[str]:
    return {str(p.relative_to(blocks)) for p in blocks.rglob("*.parquet")}


def test_check_files_finds_orphans_and_missing_files_and_removes_old_orphans(
    tmp_path: Path,
) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    blocks = home / "blocks"
    h = ["--home", str(home)]
    r = invoke("blocks", "b", "--check-files", *h)
    assert r.exit_code == 0, r.output
    assert "3 part file(s) found, 3 listed in the catalog" in r.output and "ok" in r.output
    listed = _parts(blocks)
    old = _plant(blocks, "b/2024-03-09/1/part-dead.parquet", age_seconds=TWO_DAYS)
    young = _plant(blocks, "b/2024-03-08/1/part-young.parquet")
    lost = sorted(p for p in listed if p.startswith("b/2024-03-02/"))[0]
    (blocks / lost).unlink()  # as after restoring the block files from an older backup
    r = invoke("blocks", "b", "--check-files", *h)
    text = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert f"orphan {old}" in text and "older than --grace: remove with --remove-orphans" in text
    assert f"orphan {young}" in text and "an ingest may still commit it; kept" in text
    assert f"missing {lost}: the catalog lists it but the file is gone" in text
    code, doc = invoke_json("blocks", "b", "--check-files", *h)
    assert code == 1 and doc["ok"] is False and doc["missing"] == [lost]
    assert [o["path"] for o in doc["orphans"]] == [young, old]
    assert all(o["modified"].endswith("Z") for o in doc["orphans"]) and doc["removed"] == []
    assert _parts(blocks) == (listed - {lost}) | {old, young}  # a check removes nothing
    # the whole data root: the other streams are clean
    code, doc = invoke_json("blocks", "--check-files", *h)
    assert doc["stream"] is None and doc["parts"] == 9 and doc["missing"] == [lost]
    # removing: the old orphan only; the young one and every listed file stay
    code, doc = invoke_json("blocks", "b", "--check-files", "--remove-orphans", *h)
    assert doc["removed"] == [old] and [o["path"] for o in doc["orphans"]] == [young]
    assert code == 1  # the missing file still needs attention
    assert _parts(blocks) == (listed - {lost}) | {young}
    os.utime(blocks / young)  # young again: the commands above may have taken a second
    code, doc = invoke_json("blocks", "b", "--check-files", "--remove-orphans", "--grace", "1s", *h)
    assert code == 1 and doc["removed"] == [] and doc["missing"] == [lost]  # 1 s: still young
    time.sleep(1.1)
    code, doc = invoke_json("blocks", "b", "--check-files", "--remove-orphans", "--grace", "1s", *h)
    assert doc["removed"] == [young] and doc["orphans"] == [] and code == 1
    assert _parts(blocks) == listed - {lost}


def test_check_files_refusals(tmp_path: Path) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    h = ["--home", str(home)]
    r = invoke("blocks", "b", "--remove-orphans", *h)
    assert r.exit_code == 2 and "--remove-orphans goes with --check-files" in r.output
    r = invoke("blocks", "nope", "--check-files", *h)
    assert r.exit_code == 2 and "nope" in r.output
    r = invoke("blocks", "b", "--check-files", "--grace", "soon", *h)
    assert r.exit_code == 2 and "--grace must look like" in r.output
    r = invoke("blocks", "b", "--check-files", "--server", "http://127.0.0.1:9", "--api-key", "k")
    assert r.exit_code == 2 and "run it where the store is" in " ".join(r.output.split())
    r = invoke("blocks", *h)
    assert r.exit_code == 2 and "give a stream" in r.output
