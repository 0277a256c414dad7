"""The audit log's high-water mark: the judge (pure), the policy's text, and the mark files on a
local directory and on an S3-compatible store — the largest mark wins whoever writes, a damaged
file never looks newer, pruning never removes the largest, and writes are atomic."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from blockbudget.errors import InvalidRequestError
from blockbudget.store.files import DataFiles
from blockbudget.store.markfiles import MarkFiles
from blockbudget.store.watermark import (
    MARK_DIR,
    Head,
    Mark,
    MarkPolicy,
    MarkState,
    judge,
    mark_name,
    parse_mark_name,
    parse_policy,
)

DB, OTHER = "d" * 64, "e" * 64


def mark(seq: int, *, epoch: int = 0, h: str | None = None, db: str = DB) -> Mark:
    return Mark(epoch=epoch, seq=seq, hash=h or f"{seq:064x}", database=db, ts=float(seq))


# --- the judge ---------------------------------------------------------------------------------


def test_the_judge() -> None:
    m = mark(81)
    same = f"{81:064x}"
    assert judge(None, Head(0, "0" * 64, None), at_mark=None) is MarkState.NONE
    assert judge(m, Head(81, same, DB), at_mark=same) is MarkState.OK
    assert judge(m, Head(90, "f" * 64, DB), at_mark=same) is MarkState.OK  # past the mark
    assert judge(m, Head(78, "f" * 64, DB), at_mark=None) is MarkState.BEHIND
    # restored to 78, then written to up to 85: another event at the mark's seq
    assert judge(m, Head(85, "f" * 64, DB), at_mark="a" * 64) is MarkState.DIVERGED
    assert judge(m, Head(81, same, OTHER), at_mark=same) is MarkState.FOREIGN
    assert judge(m, Head(0, "0" * 64, None), at_mark=None) is MarkState.FOREIGN  # empty
    refusing = {s for s in MarkState if s.refuses}
    assert refusing == {
        MarkState.BEHIND,
        MarkState.DIVERGED,
        MarkState.FOREIGN,
        MarkState.UNREADABLE,
    }


def test_names_sort_as_keys() -> None:
    marks = [mark(9), mark(10), mark(100), mark(3, epoch=1), mark(12, epoch=1)]
    names = [mark_name(m) for m in marks]
    assert sorted(names) == names  # text order = (epoch, seq) order
    assert [parse_mark_name(n) for n in names] == [m.key for m in marks]
    assert parse_mark_name("mark-1-2.json") is None and parse_mark_name(".tmp-x") is None
    assert Mark.from_json(json.loads(marks[2].encode())) == marks[2]
    with pytest.raises(InvalidRequestError):
        Mark.from_json({"format": 2})


def test_the_policy_text() -> None:
    default = parse_policy(None)
    assert default == parse_policy("charge") == parse_policy("charge,1s") == MarkPolicy()
    assert default.before_answers and not default.every_commit
    assert parse_policy("commit").every_commit and parse_policy("commit").before_answers
    assert parse_policy("charge,5s") == MarkPolicy(seconds=5.0)
    assert parse_policy("100") == MarkPolicy(events=100, seconds=None, on_charge=False)
    assert parse_policy("5s") == MarkPolicy(seconds=5.0, on_charge=False)
    assert parse_policy("100,5s") == MarkPolicy(events=100, seconds=5.0, on_charge=False)
    assert not parse_policy("100,5s").before_answers
    assert parse_policy("off").enabled is False
    for bad in ("0", "-1", "x", "1,2", "5s,6s", "0s", "charge,10", "charge,charge"):
        with pytest.raises(InvalidRequestError, match="mark policy"):
            parse_policy(bad)
    every = parse_policy("commit")
    assert every.due(behind_events=1, age_seconds=0)
    assert not every.due(behind_events=0, age_seconds=99)
    # the default: at once after a charge (an answer may follow), else within a second
    assert default.due(behind_events=1, age_seconds=0, charged=True)
    assert not default.due(behind_events=40, age_seconds=0.5)
    assert default.due(behind_events=1, age_seconds=1.0)
    batched = parse_policy("100,5s")
    assert not batched.due(behind_events=99, age_seconds=4.9, charged=True)
    assert batched.due(behind_events=100, age_seconds=0)
    assert batched.due(behind_events=1, age_seconds=5.0)
    texts = ("charge", "charge,5s", "commit", "100", "5s", "100,5s", "off")
    assert [parse_policy(t).describe() for t in texts] == [
        "charge,1s",
        "charge,5s",
        "commit",
        "100",
        "5s",
        "100,5s",
        "off",
    ]
    assert all(parse_policy(parse_policy(t).describe()) == parse_policy(t) for t in texts)


# --- the files -----------------------------------------------------------------------------------


def _local(tmp_path: Path) -> MarkFiles:
    return MarkFiles(DataFiles(tmp_path / "blocks"))


def test_local_mark_files(tmp_path: Path) -> None:
    files = _local(tmp_path)
    assert files.read() is None
    files.write(mark(5))
    files.write(mark(7))
    files.write(mark(6))
    assert files.read() == mark(7)
    marks_dir = tmp_path / "blocks" / MARK_DIR
    assert sorted(os.listdir(marks_dir)) == [mark_name(mark(s)) for s in (5, 6, 7)]  # no temps
    files.write(mark(2, epoch=1))
    assert files.read() == mark(2, epoch=1)
    assert files.prune(mark(2, epoch=1).key) == 3
    assert os.listdir(marks_dir) == [mark_name(mark(2, epoch=1))]
    # the mark lives beside the block files, where no stream can be named
    assert files.where.endswith(f"/{MARK_DIR}") and files.where.startswith(str(tmp_path))


def test_a_damaged_mark_never_looks_newer(tmp_path: Path) -> None:
    files = _local(tmp_path)
    files.write(mark(7))
    marks_dir = tmp_path / "blocks" / MARK_DIR
    (marks_dir / mark_name(mark(9))).write_text("{not json")  # torn or damaged
    (marks_dir / mark_name(mark(11))).write_text(json.dumps(mark(10).to_json()))  # misnamed
    (marks_dir / "mark-notes.txt").write_text("x")
    assert files.read() == mark(7)


def test_a_read_whose_listed_mark_was_pruned_lists_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader lists 25 and 13; before it opens 25, a writer puts 33 and prunes 25 (13 not
    yet): the reader must answer 33 from a fresh listing, not fall back to 13 — the mark would
    look as if it had moved backwards (the concurrent test below caught it, once in a while)."""
    root = tmp_path / "blocks"
    writer, reader = MarkFiles(DataFiles(root)), MarkFiles(DataFiles(root))
    writer.write(mark(13))
    writer.write(mark(25))
    stale = reader.names()
    listings = iter([stale])
    real = MarkFiles.names

    def names(self: MarkFiles) -> list[tuple[tuple[int, int], str]]:
        return next(listings, None) or real(self)

    monkeypatch.setattr(MarkFiles, "names", names)
    writer.write(mark(33))
    os.unlink(root / "_blockbudget" / "marks" / stale[0][1])  # 25 pruned, 13 still there
    got = reader.read()
    assert got is not None and got.seq == 33


def test_concurrent_writers_leave_the_largest(tmp_path: Path) -> None:
    """Eight writers (separate MarkFiles, as separate processes would have) interleave their
    marks; whatever the order, the mark read afterwards is the largest written, and at no time
    does a reader see it go backwards."""
    root = tmp_path / "blocks"
    writers = [MarkFiles(DataFiles(root)) for _ in range(8)]
    reader = MarkFiles(DataFiles(root))
    seen: list[int] = []
    stop = threading.Event()

    def read_loop() -> None:
        while not stop.is_set():
            m = reader.read()
            if m is not None:
                seen.append(m.seq)

    def write(i: int) -> None:
        for seq in range(i + 1, 200, 8):
            writers[i].write(mark(seq))
            if seq % 40 == 1:
                writers[i].prune(mark(seq).key)

    t = threading.Thread(target=read_loop)
    t.start()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for w in threads:
        w.start()
    for w in threads:
        w.join()
    stop.set()
    t.join()
    assert reader.read() == mark(199)
    assert seen == sorted(seen)  # never backwards


def test_mark_files_on_s3(s3_root: str) -> None:
    files = MarkFiles(DataFiles(s3_root))
    assert files.read() is None
    files.write(mark(5))
    files.write(mark(7))
    files.write(mark(6))
    assert files.read() == mark(7)
    files.write(mark(2, epoch=1))
    assert files.read() == mark(2, epoch=1)
    assert files.prune(mark(2, epoch=1).key) == 3
    assert [name for _, name in files.names()] == [mark_name(mark(2, epoch=1))]
    fs, base = pafs.FileSystem.from_uri(s3_root)
    listed = fs.get_file_info(pafs.FileSelector(f"{base}/{MARK_DIR}"))
    assert [i.base_name for i in listed] == [mark_name(mark(2, epoch=1))]
    assert files.where.startswith("s3://") and "endpoint_override" not in files.where
