"""Running the service: ``blockbudget serve`` and the uvicorn factory its worker processes use.

Several server processes share one ledger through PostgreSQL (``--database
postgresql+psycopg://…``; every write is serialized by the ledger's head-row lock, so processes
need no other coordination) or, on one machine, through the SQLite file. The block files live
in the home folder, which every process of one deployment must share, or under ``--data-root``
(e.g. ``s3://bucket/prefix?endpoint_override=host:port&scheme=http``; credentials come from the
environment as for any AWS client), which every process then shares instead.

Configuration reaches worker processes through environment variables (uvicorn starts them by
importing :func:`app_from_env`): ``BLOCKBUDGET_HOME``, ``BLOCKBUDGET_DATABASE`` (optional),
``BLOCKBUDGET_DATA_ROOT`` (optional), ``BLOCKBUDGET_GROUP_COMMIT`` (``1``/``0``, default 1),
``BLOCKBUDGET_SCHEDULER`` and ``BLOCKBUDGET_PIPELINE_SCHEDULER`` (the task schedulers),
``BLOCKBUDGET_PIPELINES`` (comma-separated modules whose ``PIPELINE_KINDS`` the process
registers: the pipelines it offers, :mod:`blockbudget.tasks.pipeline_kinds`). Every process
accepts and lists tasks; one at a time decides (:mod:`blockbudget.tasks.leader`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fastapi import FastAPI

from blockbudget.errors import InvalidRequestError
from blockbudget.service.app import DEFAULT_PIPELINE_SCHEDULER, create_app, open_platform
from blockbudget.service.auth import KeyStore, Role
from blockbudget.tasks.pipeline_kinds import load_pipeline_modules
from blockbudget.tasks.queue import DEFAULT_SCHEDULER
from blockbudget.tasks.schedspec import parse_spec

ENV_HOME = "BLOCKBUDGET_HOME"
ENV_DATABASE = "BLOCKBUDGET_DATABASE"
ENV_DATA_ROOT = "BLOCKBUDGET_DATA_ROOT"
ENV_GROUP_COMMIT = "BLOCKBUDGET_GROUP_COMMIT"
ENV_SCHEDULER = "BLOCKBUDGET_SCHEDULER"
ENV_PIPELINE_SCHEDULER = "BLOCKBUDGET_PIPELINE_SCHEDULER"
ENV_PIPELINES = "BLOCKBUDGET_PIPELINES"


#: GIL switch interval of a server process. The group committer thread releases the GIL on
#: every database call and must get it back promptly while the event loop thread is busy with
#: HTTP; at Python's default 5 ms every statement of a batch could wait that long (a convoy).
SWITCH_INTERVAL_SECONDS = 0.0005


def app_from_env() -> FastAPI:
    """The application configured by the environment (see the module docstring)."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    home = os.environ.get(ENV_HOME, ".blockbudget")
    database = os.environ.get(ENV_DATABASE) or None
    group = os.environ.get(ENV_GROUP_COMMIT, "1") != "0"
    scheduler = os.environ.get(ENV_SCHEDULER) or DEFAULT_SCHEDULER
    pipeline_scheduler = os.environ.get(ENV_PIPELINE_SCHEDULER) or DEFAULT_PIPELINE_SCHEDULER
    data_root = os.environ.get(ENV_DATA_ROOT) or None
    modules = [m.strip() for m in os.environ.get(ENV_PIPELINES, "").split(",") if m.strip()]
    load_pipeline_modules(modules)
    platform = open_platform(home, database, group_commit=group, data_root=data_root)
    return create_app(platform, scheduler=scheduler, pipeline_scheduler=pipeline_scheduler)


def bootstrap_admin(home: str | Path, database: str | None, name: str = "admin") -> str | None:
    """Create principal ``name`` (admin) with a key if the deployment has no principal yet.

    Safe when several servers start together on an empty database: one creates the
    principal and prints its key; the others find it and return None.

    Returns:
        The new key (shown once), or None when principals already exist.
    """
    platform = open_platform(home, database, group_commit=False)
    try:
        keys = KeyStore(platform.database)
        if keys.principals():
            return None
        try:
            keys.add_principal(name, Role.ADMIN)
        except InvalidRequestError:
            if any(p.name == name for p in keys.principals()):
                return None  # another server starting at the same time created it first
            raise
        return keys.create_key(name)
    finally:
        platform.close()


def serve(
    *,
    home: str | Path,
    database: str | None,
    host: str,
    port: int,
    workers: int,
    group_commit: bool,
    log_level: str = "warning",
    scheduler: str = DEFAULT_SCHEDULER,
    pipeline_scheduler: str = DEFAULT_PIPELINE_SCHEDULER,
    data_root: str | None = None,
    metrics_token: str | None = None,
    request_log: str | None = None,
    pipelines: tuple[str, ...] = (),
) -> None:
    """Run uvicorn with ``workers`` processes serving one platform (block files under
    ``data_root`` when given). ``/metrics`` accepts admin keys and, when given,
    ``metrics_token``; request lines go to ``request_log`` (``-``: stderr, ``off``, or a file).
    Every worker registers the pipeline kinds of the modules in ``pipelines``.
    The workers' metrics share a freshly emptied ``PROMETHEUS_MULTIPROC_DIR``: a temporary
    folder, removed when the server stops, unless the variable names one (kept)."""
    import uvicorn

    from blockbudget.service.metrics import (
        ENV_METRICS_TOKEN,
        MULTIPROC_ENV,
        prepare_multiprocess_dir,
    )
    from blockbudget.service.request_log import ENV_REQUEST_LOG

    os.environ[ENV_HOME] = str(Path(home).resolve())
    if database:
        os.environ[ENV_DATABASE] = database
    if data_root:
        os.environ[ENV_DATA_ROOT] = data_root
    os.environ[ENV_GROUP_COMMIT] = "1" if group_commit else "0"
    parse_spec(scheduler)  # refuse a bad --scheduler before starting any worker
    parse_spec(pipeline_scheduler)
    os.environ[ENV_SCHEDULER] = scheduler
    os.environ[ENV_PIPELINE_SCHEDULER] = pipeline_scheduler
    load_pipeline_modules(pipelines)  # refuse a module that offers no kinds before any worker
    os.environ[ENV_PIPELINES] = ",".join(pipelines)
    if metrics_token:
        os.environ[ENV_METRICS_TOKEN] = metrics_token
    if request_log:
        os.environ[ENV_REQUEST_LOG] = request_log
    named = bool(os.environ.get(MULTIPROC_ENV))  # the user's folder: emptied, never removed
    folder = prepare_multiprocess_dir()  # before any worker imports prometheus_client
    try:
        uvicorn.run(
            "blockbudget.service.server:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
        )
    finally:
        if not named:  # the temporary folder this server made
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            os.environ.pop(MULTIPROC_ENV, None)
