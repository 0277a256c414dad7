"""Block part files on a local path or any pyarrow filesystem.

Layout: ``root/{stream}/{key}/{seq}/part-{uuid}.parquet``. The key's directory name is the key
with every character outside ``[A-Za-z0-9_%-]`` percent-encoded (a sub-day time key
``2013-01-01T06:00`` lives in ``2013-01-01T06%3A00``). The catalog stores each part's path
relative to the root, and readers use only the catalog's list, so a file left behind by a crashed
ingest is never read (:meth:`BlockStore.vacuum` removes such orphans).

Durability. :meth:`DataFiles.sync` makes written part files durable before the catalog commit
that references them: on a local filesystem it fsyncs each file and then each directory on its
path up to the root (so that the new directory entries survive a power loss too); on an object
store it does nothing, because a part is written as one object whose upload completes (a finished
PUT, or the completing request of a multipart upload) when the file is closed, and a completed
upload is durable and, on S3, immediately visible to every reader.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from blockbudget.errors import DataError, InvalidRequestError

#: Threads that fsync part files and directories at once.
SYNC_THREADS = 16

_SAFE_SEGMENT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_%-")


@dataclass(frozen=True)
class WrittenPart:
    """A part file written to the store.

    Attributes:
        path: relative to the root.
        rows: rows in the file.
        nbytes: size of the file.
    """

    path: str
    rows: int
    nbytes: int


def fsync_path(path: str) -> None:
    """Flush a local file's or directory's data and metadata to stable storage.

    A path that no longer exists is skipped: a part file deleted before its commit (by a
    vacuum) is reported by the commit's check under the stream's lock, not here.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def path_segment(key: str) -> str:
    """The directory name of a block key."""
    return "".join(
        ch if ch in _SAFE_SEGMENT else "".join(f"%{b:02X}" for b in ch.encode("utf-8"))
        for ch in key
    )


#: Query parameters of a filesystem URI that carry secrets (pyarrow's S3 URI form).
_SECRET_PARAMETERS = frozenset({"access_key", "secret_key", "session_token"})


def refuse_credentials(uri: str) -> None:
    """Refuse a data-root URI that carries credentials (``s3://KEY:SECRET@bucket``, or an
    ``access_key`` / ``secret_key`` / ``session_token`` parameter): the URI is stored, logged
    and shipped to engine workers, so credentials come from the environment instead.

    Raises:
        InvalidRequestError: the URI carries credentials (the message does not repeat them).

    Example:
        >>> refuse_credentials("s3://bucket/blocks?region=eu-west-1")
        >>> refuse_credentials("s3://AKIA:wJal@bucket/blocks")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        blockbudget.errors.InvalidRequestError: a data-root URI must not carry credentials ...
    """
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(uri)
    params = {name.lower() for name, _ in parse_qsl(parts.query, keep_blank_values=True)}
    if "@" in parts.netloc or params & _SECRET_PARAMETERS:
        raise InvalidRequestError(
            "a data-root URI must not carry credentials (user info before '@' or an "
            "access_key/secret_key/session_token parameter); set them in the environment "
            "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE)"
        )


class DataFiles:
    """Reads and writes Parquet part files under a root.

    Args:
        root: a local directory (created if missing) or a filesystem URI understood by
            :meth:`pyarrow.fs.FileSystem.from_uri` (``file:///data/blocks``, ``s3://bucket/x``,
            ``mock://`` — the in-memory mock filesystem lives as long as this object).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        text = os.fspath(root)
        if "://" in text:
            refuse_credentials(text)
            fs, base = pafs.FileSystem.from_uri(text)
        else:
            fs, base = pafs.LocalFileSystem(), os.path.abspath(text)
        self.fs: pafs.FileSystem = fs
        self.base = base.rstrip("/")
        self.local = isinstance(fs, pafs.LocalFileSystem)
        self.uri = text
        if self.base:
            self.fs.create_dir(self.base, recursive=True)

    def full(self, rel: str) -> str:
        """The filesystem path of a root-relative path."""
        return f"{self.base}/{rel}" if self.base else rel

    def write_part(self, stream: str, key: str, seq: int, table: pa.Table) -> WrittenPart:
        """Write one part file with a unique name; creates its directories."""
        rel_dir = f"{stream}/{path_segment(key)}/{seq}"
        rel = f"{rel_dir}/part-{uuid.uuid4().hex}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        buf = sink.getvalue()
        for attempt in range(3):
            # A concurrent rollback may remove an empty directory between create and write.
            self.fs.create_dir(self.full(rel_dir), recursive=True)
            try:
                with self.fs.open_output_stream(self.full(rel)) as out:
                    out.write(buf)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        return WrittenPart(path=rel, rows=table.num_rows, nbytes=buf.size)

    def open_part(self, stream: str, key: str, seq: int) -> tuple[str, pa.NativeFile]:
        """Create a new part file with a unique name (and its directories) for writing.

        Returns:
            Its root-relative path and an output stream that the caller closes.
        """
        rel_dir = f"{stream}/{path_segment(key)}/{seq}"
        rel = f"{rel_dir}/part-{uuid.uuid4().hex}.parquet"
        for attempt in range(3):
            # A concurrent rollback may remove an empty directory between create and open.
            self.fs.create_dir(self.full(rel_dir), recursive=True)
            try:
                return rel, self.fs.open_output_stream(self.full(rel))
            except FileNotFoundError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def move_part(self, rel: str, seq: int) -> str:
        """Move a part file into the directory of another seq of its block (a re-plan).

        Returns:
            The new root-relative path.
        """
        stream, key, old_seq, name = rel.split("/")
        rel_dir = f"{stream}/{key}/{seq}"
        self.fs.create_dir(self.full(rel_dir), recursive=True)
        new = f"{rel_dir}/{name}"
        self.fs.move(self.full(rel), self.full(new))
        self._remove_dir_if_empty(self.full(f"{stream}/{key}/{old_seq}"))
        return new

    def sync(self, rels: Sequence[str]) -> None:
        """Make part files durable (see the module docstring): on a local filesystem fsync
        each file, then every directory from its own up to the root; elsewhere nothing."""
        if not self.local or not rels:
            return
        dirs: set[str] = set()
        for rel in rels:
            parts = rel.split("/")
            dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        # fsync releases the GIL and devices take concurrent flushes well: files in parallel,
        # then their directories, then the root.
        with ThreadPoolExecutor(max_workers=SYNC_THREADS) as pool:
            list(pool.map(fsync_path, [self.full(r) for r in rels]))
            list(pool.map(fsync_path, [self.full(d) for d in dirs]))
        fsync_path(self.base)

    def missing(self, rels: Sequence[str]) -> list[str]:
        """Which of the part files ``rels`` do not exist (one ``get_file_info`` call for all:
        a ``stat`` each locally, a ``HEAD`` each on an object store)."""
        if not rels:
            return []
        infos = self.fs.get_file_info([self.full(r) for r in rels])
        return [r for r, info in zip(rels, infos, strict=True) if info.type != pafs.FileType.File]

    def read_part(self, rel: str, columns: Sequence[str] | None) -> pa.Table:
        """Read one part file.

        Raises:
            DataError: when the file is missing or unreadable (the store was damaged).
        """
        try:
            with self.fs.open_input_file(self.full(rel)) as handle:
                return pq.read_table(handle, columns=list(columns) if columns else None)
        except (OSError, pa.ArrowException) as exc:
            raise DataError(
                f"part file {rel!r} under {self.uri!r} is missing or unreadable; the store's "
                f"files were changed outside blockbudget: {exc}"
            ) from exc

    def remove_parts(self, rels: Sequence[str]) -> None:
        """Delete part files and then their directories where empty (best effort)."""
        dirs: set[str] = set()
        for rel in rels:
            with contextlib.suppress(OSError, pa.ArrowException):
                self.fs.delete_file(self.full(rel))
            parts = rel.split("/")
            dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        for rel_dir in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
            self._remove_dir_if_empty(self.full(rel_dir))

    def _remove_dir_if_empty(self, path: str) -> None:
        if self.local:
            with contextlib.suppress(OSError):
                os.rmdir(path)  # atomic; refuses a non-empty directory
            return
        try:
            info = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
            if not info:
                self.fs.delete_dir(path)
        except (OSError, pa.ArrowException):
            pass

    def list_files(self, prefix: str) -> list[tuple[str, datetime | None]]:
        """Every file under ``root/prefix`` as (relative path, modification time)."""
        selector = pafs.FileSelector(self.full(prefix), recursive=True, allow_not_found=True)
        start = len(self.base) + 1 if self.base else 0
        out = []
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                out.append((info.path[start:], info.mtime))
        return sorted(out)
