"""The high-water mark's files beside the block files (:mod:`blockbudget.store.watermark` says
what a mark is), on the block store's own filesystem: a local directory or an object store.

* **Write**: a local mark is written to a temporary name in the marks directory, fsynced,
  renamed to its final name and the directory fsynced (atomic and durable); on an object store
  it is one PUT of a small object (atomic: a reader sees all of it or nothing). A writer never
  replaces another's name: names are the marks' order keys.
* **Read**: list the marks directory and read the largest name (a file that does not parse is
  skipped for the next one: a damaged file can only make the mark look older — it can never be
  mistaken for a newer one).
* **Prune**: names below the largest are deleted now and then (the largest is never deleted,
  so the mark never moves backwards).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from blockbudget.errors import InvalidRequestError
from blockbudget.store.files import DataFiles, fsync_path
from blockbudget.store.watermark import MARK_DIR, TOMBSTONE_DIR, Mark, mark_name, parse_mark_entry

#: Listings :meth:`MarkFiles.read` takes while the largest listed mark keeps being pruned under
#: it (each retry means a larger mark was written meanwhile).
READ_TRIES = 20


class MarkFiles:
    """Reads and writes the marks under a data root (see the module docstring).

    Args:
        files: the block store's files (the same filesystem and root).
    """

    def __init__(self, files: DataFiles) -> None:
        self.files = files
        self.dir = files.full(MARK_DIR)
        self._made = False

    @property
    def where(self) -> str:
        """The marks' location as an operator reads it (no query string: no endpoint)."""
        return f"{self.files.uri.split('?', 1)[0].rstrip('/')}/{MARK_DIR}"

    def names(self) -> list[tuple[tuple[int, int], str]]:
        """Every mark file's (order key, name), largest first.

        Raises:
            OSError, pyarrow.ArrowException: the store did not answer.
        """
        return [(key, name) for key, _, name in self.entries()]

    def entries(self) -> list[tuple[tuple[int, int], str | None, str]]:
        """Every mark file's (order key, hash named by the file name or None, name), largest
        first.

        Raises:
            OSError, pyarrow.ArrowException: the store did not answer.
        """
        out = []
        for name in self._listing():
            entry = parse_mark_entry(name)
            if entry is not None:
                out.append(((entry[0], entry[1]), entry[2], name))
        return sorted(out, reverse=True)

    def load(self, name: str) -> Mark | None:
        """The mark in the file ``name`` (None when it is gone, damaged or misnamed).

        Raises:
            OSError, pyarrow.ArrowException: the store did not answer.
        """
        try:
            return self._load(name)
        except FileNotFoundError:
            return None

    def _load(self, name: str) -> Mark | None:
        """:meth:`load`, but a file that is gone raises FileNotFoundError."""
        entry = parse_mark_entry(name)
        if entry is None:
            return None
        try:
            with self.files.fs.open_input_stream(f"{self.dir}/{name}") as handle:
                mark = Mark.from_json(json.loads(handle.read()))
        except (ValueError, InvalidRequestError):
            return None
        if mark.key != (entry[0], entry[1]) or entry[2] not in (None, mark.hash):
            return None
        return mark

    def _listing(self) -> list[str]:
        if self.files.local:  # names only: a file pruned meanwhile is no error
            try:
                return os.listdir(self.dir)
            except FileNotFoundError:
                return []
        selector = pafs.FileSelector(self.dir, recursive=False, allow_not_found=True)
        for attempt in range(3):
            try:
                return [
                    info.base_name
                    for info in self.files.fs.get_file_info(selector)
                    if info.type == pafs.FileType.File
                ]
            except FileNotFoundError:  # an entry went while it was listed: list again
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def read(self) -> Mark | None:
        """The mark: the largest readable one (None when there is none).

        Raises:
            OSError, pyarrow.ArrowException: the store did not answer.
        """
        for _ in range(READ_TRIES):
            pruned = False
            for _, name in self.names():
                try:
                    mark = self._load(name)
                except FileNotFoundError:
                    # pruned since the listing: a larger mark was written meanwhile, which a
                    # fresh listing shows (falling back to an older file here would make the
                    # mark look as if it had moved backwards)
                    pruned = True
                    break
                if mark is not None:  # damaged or misnamed: skip (it can only look older)
                    return mark
            if not pruned:
                return None
        raise OSError(f"the marks at {self.where} kept changing under {READ_TRIES} listings")

    def write(self, mark: Mark) -> None:
        """Write ``mark`` under its own name, atomically and durably.

        Raises:
            OSError, pyarrow.ArrowException: the store did not take it.
        """
        name = mark_name(mark)
        data = mark.encode()
        if self.files.local:
            self._write_local(name, data)
            return
        if not self._made:  # S3 needs none; an in-memory (mock://) store does, as block files
            self.files.fs.create_dir(self.dir, recursive=True)
            self._made = True
        with self.files.fs.open_output_stream(f"{self.dir}/{name}") as out:
            out.write(data)

    def _write_local(self, name: str, data: bytes) -> None:
        if not self._made:
            os.makedirs(self.dir, exist_ok=True)
            for d in (os.path.dirname(self.dir), os.path.dirname(os.path.dirname(self.dir))):
                fsync_path(d)  # the new directories' entries survive a power loss
            self._made = True
        tmp = os.path.join(self.dir, f".tmp-{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, os.path.join(self.dir, name))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_path(self.dir)

    def record_tombstones(self, epoch: int, blocks: Sequence[tuple[str, str]]) -> None:
        """Keep the (block id, stream) of a reconciliation's tombstones beside the marks, in a
        file of their own (``_blockbudget/tombstones/``; never pruned): they are in the
        reconciled database only, and the orphan part files they came from may be removed
        once it is reconciled — a later restore of an older backup must still find them.

        Raises:
            OSError, pyarrow.ArrowException: the store did not take it.
        """
        if not blocks:
            return
        where = self.files.full(TOMBSTONE_DIR)
        name = f"tombstones-{epoch:010d}-{uuid.uuid4().hex}.json"
        data = json.dumps([{"block_id": b, "stream": s} for b, s in blocks]).encode()
        self.files.fs.create_dir(where, recursive=True)
        if self.files.local:
            tmp = os.path.join(where, f".tmp-{uuid.uuid4().hex}")
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, os.path.join(where, name))
            fsync_path(where)
            return
        with self.files.fs.open_output_stream(f"{where}/{name}") as stream:
            stream.write(data)

    def recorded_tombstones(self) -> list[tuple[str, str]]:
        """Every (block id, stream) :meth:`record_tombstones` kept (a damaged file is
        skipped).

        Raises:
            OSError, pyarrow.ArrowException: the store did not answer.
        """
        where = self.files.full(TOMBSTONE_DIR)
        selector = pafs.FileSelector(where, recursive=False, allow_not_found=True)
        found: dict[str, str] = {}
        for info in self.files.fs.get_file_info(selector):
            if info.type != pafs.FileType.File or not info.base_name.startswith("tombstones-"):
                continue
            try:
                with self.files.fs.open_input_stream(info.path) as handle:
                    rows = json.loads(handle.read())
                for row in rows:
                    found[str(row["block_id"])] = str(row["stream"])
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError):
                continue
        return sorted(found.items())

    def prune(self, below: tuple[int, int]) -> int:
        """Delete the mark files whose key is below ``below`` (a key that exists, written by
        the caller: the largest is never among them). Best effort; returns how many went."""
        gone = 0
        try:
            names = self.names()
        except (OSError, pa.ArrowException):
            return 0
        for key, name in names:
            if key >= below:
                continue
            with contextlib.suppress(OSError, pa.ArrowException):
                self.files.fs.delete_file(f"{self.dir}/{name}")
                gone += 1
        return gone
