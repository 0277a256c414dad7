"""Leadership: which one of several server processes decides.

Every process accepts task submissions (rows in the task table) and answers reads; only the
process that holds the leadership of a database pumps the scheduler and runs the work, so
fairness is one scheduler's, not one per process. A leadership is a *lease that dies with its
holder*: a process that crashes, is killed with ``SIGKILL`` or loses its database connection
loses the leadership at once, and the next ``try_acquire`` of another process succeeds.

- :class:`PostgresLeadership` — a session-level ``pg_try_advisory_lock`` on a dedicated
  connection that stays open while the lock is held (PostgreSQL releases a session lock when the
  session ends, however it ends). ``held`` asks the server whether this session still holds the
  lock, so a broken or terminated connection means the leadership is lost.
- :class:`FileLeadership` — ``flock(LOCK_EX | LOCK_NB)`` on a lock file beside a SQLite database
  (the kernel drops the lock when the holding process dies).
- :class:`AlwaysLeader` — one process, no contention (tests, in-memory databases).

:func:`leadership_for` picks one for a SQLAlchemy engine.

A holder must check ``held`` before each decision it makes. Leadership only orders *who*
decides; it is not what keeps budgets safe — every grant is a ledger transaction that refuses
overspending on its own, so a stale holder between two checks can at worst make a decision the
new holder then sees in the ledger, never overspend a block.

Example:
    >>> import sqlalchemy as sa
    >>> one = leadership_for(sa.create_engine("sqlite://"), name="scheduler")
    >>> one.try_acquire(), one.held
    (True, True)
    >>> one.release(); one.held
    False
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Any

import sqlalchemy as sa

from blockbudget.errors import InvalidRequestError

__all__ = [
    "AlwaysLeader",
    "FileLeadership",
    "Leadership",
    "PostgresLeadership",
    "leadership_for",
    "leadership_key",
]


class Leadership(ABC):
    """A non-blocking, process-scoped lease: at most one holder per database and name.

    Example:
        >>> with AlwaysLeader() as lead:
        ...     lead.held
        True
    """

    @abstractmethod
    def try_acquire(self) -> bool:
        """Take the leadership if nobody holds it; never blocks.

        Returns:
            True when this object holds the leadership after the call (it already held it, or
            it just took it); False when another holder has it.
        """

    @property
    @abstractmethod
    def held(self) -> bool:
        """Whether this object holds the leadership now (re-checked, not remembered)."""

    @abstractmethod
    def release(self) -> None:
        """Give the leadership up (a no-op when not held); another holder may then take it."""

    def __enter__(self) -> Leadership:
        self.try_acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class AlwaysLeader(Leadership):
    """The leadership of a single process: ``try_acquire`` always succeeds.

    For tests and in-memory databases, which no other process can open. ``held`` is True from a
    ``try_acquire`` until the next ``release``.

    Example:
        >>> lead = AlwaysLeader()
        >>> lead.held, lead.try_acquire(), lead.held
        (False, True, True)
    """

    def __init__(self) -> None:
        self._held = False

    def try_acquire(self) -> bool:
        self._held = True
        return True

    @property
    def held(self) -> bool:
        return self._held

    def release(self) -> None:
        self._held = False

    def __repr__(self) -> str:
        return f"AlwaysLeader(held={self._held})"


class FileLeadership(Leadership):
    """Leadership by an exclusive ``flock`` on a lock file (for a SQLite database).

    The lock belongs to the open file description, so the kernel releases it when the holding
    process exits or is killed, and two objects in one process contend like two processes.
    ``held`` also checks that the lock file at ``path`` is still the file this object locked:
    if it was deleted or replaced, another process could lock the new file, so the leadership
    counts as lost. The holder's process id is written into the file for operators.

    Limits: the file must be on a local file system (``flock`` over NFS is emulated or absent);
    a child made by ``fork`` without ``exec`` shares the lock — fork before acquiring.

    Args:
        path: the lock file; created (mode 0600) if absent, never deleted.

    Example:
        >>> import tempfile, pathlib
        >>> lock = pathlib.Path(tempfile.mkdtemp()) / "ledger.db.leader.lock"
        >>> a, b = FileLeadership(lock), FileLeadership(lock)
        >>> a.try_acquire(), b.try_acquire()
        (True, False)
        >>> a.release(); b.try_acquire()
        True
        >>> b.release()
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._mutex = threading.Lock()

    def try_acquire(self) -> bool:
        with self._mutex:
            if self._fd is not None:
                if self._same_file(self._fd):
                    return True
                self._drop()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            if not self._same_file(fd):  # replaced between open and flock
                os.close(fd)
                return False
            self._fd = fd
            with contextlib.suppress(OSError):  # informational only
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return True

    @property
    def held(self) -> bool:
        with self._mutex:
            if self._fd is None:
                return False
            if self._same_file(self._fd):
                return True
            self._drop()
            return False

    def release(self) -> None:
        with self._mutex:
            self._drop()

    def _same_file(self, fd: int) -> bool:
        try:
            mine, there = os.fstat(fd), os.stat(self.path)
        except OSError:
            return False
        return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)

    def _drop(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __repr__(self) -> str:
        return f"FileLeadership({str(self.path)!r}, held={self._fd is not None})"


class PostgresLeadership(Leadership):
    """Leadership by a session-level PostgreSQL advisory lock.

    ``try_acquire`` runs ``pg_try_advisory_lock(key)`` on a dedicated connection (detached from
    the engine's pool, in autocommit, so no transaction stays open) and keeps that connection
    open while the lock is held; PostgreSQL releases a session-level lock when its session ends,
    so the leadership dies with the holder's process or connection. ``held`` asks the server
    (``pg_locks``) whether this session still holds the lock: a broken connection, a terminated
    backend or a server restart all read as *lost*, and the connection is then discarded.

    The server notices a silently vanished client (a host lost without a TCP reset) only when
    TCP keepalives or ``tcp_user_timeout`` tell it; set them in the engine's ``connect_args``
    where that matters.

    Args:
        engine: an engine for the PostgreSQL database all processes share.
        key: the advisory-lock key, a signed 64-bit integer (see :func:`leadership_key`).

    Raises:
        InvalidRequestError: ``engine`` is not PostgreSQL, or ``key`` is not a signed 64-bit
            integer.

    Example (needs a server):
        >>> lead = PostgresLeadership(engine, leadership_key("scheduler"))  # doctest: +SKIP
        >>> lead.try_acquire()  # doctest: +SKIP
        True
    """

    def __init__(self, engine: sa.Engine, key: int) -> None:
        if engine.dialect.name != "postgresql":
            raise InvalidRequestError(
                f"PostgresLeadership needs a PostgreSQL engine, got {engine.dialect.name!r}"
            )
        if isinstance(key, bool) or not isinstance(key, int) or not -(2**63) <= key < 2**63:
            raise InvalidRequestError(f"an advisory-lock key is a signed 64-bit int, got {key!r}")
        self.engine = engine
        self.key = key
        self._conn: sa.Connection | None = None
        self._held = False
        self._mutex = threading.Lock()

    def try_acquire(self) -> bool:
        with self._mutex:
            if self._held and self._check():
                return True
            try:
                conn = self._connection()
                got = conn.execute(
                    sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}
                ).scalar_one()
            except sa.exc.DBAPIError:
                self._discard()
                return False
            self._held = bool(got)
            return self._held

    @property
    def held(self) -> bool:
        with self._mutex:
            return self._held and self._check()

    def release(self) -> None:
        with self._mutex:
            if self._held and self._conn is not None:
                # If the session is gone, its lock went with it.
                with contextlib.suppress(sa.exc.DBAPIError):
                    self._conn.execute(
                        sa.text("SELECT pg_advisory_unlock(:key)"), {"key": self.key}
                    )
            self._discard()

    def _connection(self) -> sa.Connection:
        if self._conn is None:
            conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            conn.detach()  # closing it closes the session: never back to the pool locked
            self._conn = conn
        return self._conn

    def _check(self) -> bool:
        """Whether this session still holds the lock; on any failure, the leadership is lost."""
        conn = self._conn
        if conn is None:
            self._held = False
            return False
        hi, lo = (self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF
        try:
            still = conn.execute(
                sa.text(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
                    " AND pid = pg_backend_pid() AND granted AND objsubid = 1"
                    " AND classid = CAST(:hi AS bigint)::oid AND objid = CAST(:lo AS bigint)::oid)"
                ),
                {"hi": hi, "lo": lo},
            ).scalar_one()
        except sa.exc.DBAPIError:
            still = False
        if not still:
            self._discard()
        return bool(still)

    def _discard(self) -> None:
        self._held = False
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def __repr__(self) -> str:
        return f"PostgresLeadership(key={self.key}, held={self._held})"


def leadership_key(name: str) -> int:
    """A stable advisory-lock key for ``name``: the first 8 bytes of SHA-256, signed.

    Stable across processes, machines and Python versions (unlike ``hash``), so every server
    of one deployment contends for the same lock.

    Example:
        >>> leadership_key("scheduler")
        918435440980297251
        >>> -(2**63) <= leadership_key("scheduler") < 2**63
        True
    """
    digest = hashlib.sha256(f"blockbudget.tasks.leader:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _sqlite_path(url: sa.URL) -> Path | None:
    """The database file of a SQLite URL, or None for an in-memory database."""
    database = url.database or ""
    query: dict[str, Any] = dict(url.query)
    if database in ("", ":memory:"):
        return None
    if database.startswith("file:"):  # a URI filename (uri=true)
        rest, _, params = database[len("file:") :].partition("?")
        if rest in ("", ":memory:") or "mode=memory" in params:
            return None
        database = rest
    if query.get("mode") == "memory":
        return None
    return Path(database).absolute()


def leadership_for(engine: sa.Engine, *, name: str) -> Leadership:
    """The leadership of ``name`` over ``engine``'s database, by dialect.

    - a SQLite file ``/d/ledger.db`` → :class:`FileLeadership` on
      ``/d/ledger.db.<name>.leader.lock``;
    - an in-memory SQLite database (only this process can open it) → :class:`AlwaysLeader`;
    - PostgreSQL → :class:`PostgresLeadership` with key :func:`leadership_key` of ``name``.

    Args:
        engine: the engine of the shared database (the ledger's).
        name: what is led (e.g. ``"scheduler"``); letters, digits, ``.``, ``_`` and ``-``.

    Raises:
        InvalidRequestError: for an empty or ill-formed ``name``, or a database other than
            SQLite and PostgreSQL.

    Example:
        >>> import sqlalchemy as sa, tempfile, os
        >>> db = os.path.join(tempfile.mkdtemp(), "ledger.db")
        >>> lead = leadership_for(sa.create_engine(f"sqlite:///{db}"), name="scheduler")
        >>> lead.path.name
        'ledger.db.scheduler.leader.lock'
    """
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name or ""):
        raise InvalidRequestError(
            f"a leadership name is 1-64 letters, digits, '.', '_' or '-', got {name!r}"
        )
    dialect = engine.dialect.name
    if dialect == "sqlite":
        path = _sqlite_path(engine.url)
        if path is None:
            return AlwaysLeader()
        return FileLeadership(path.with_name(f"{path.name}.{name}.leader.lock"))
    if dialect == "postgresql":
        return PostgresLeadership(engine, leadership_key(name))
    raise InvalidRequestError(
        f"leadership needs SQLite or PostgreSQL (the ledger's databases), not {dialect!r}"
    )
