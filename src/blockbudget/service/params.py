"""The names the HTTP API takes in paths and queries, each declared with the rule the server
checks, so the OpenAPI schema says what validation does.

Each pattern is built from the one place that defines the name's form: stream names from
:mod:`blockbudget.store.model`, context names from :mod:`blockbudget.ledger.types`, principal
names from :mod:`blockbudget.service.identity`. A name that breaks its rule is a 422 before the
route runs (after the key is checked: an unauthenticated request is still a 401), and tells
nothing about which names exist.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import Field

from blockbudget.ledger import CONTEXT_NAME_PATTERN
from blockbudget.service.identity import PRINCIPAL_NAME_PATTERN
from blockbudget.store.content import INGEST_ID_RE
from blockbudget.store.model import MAX_STREAM_NAME, STREAM_NAME_RE

#: A stream's name: ``[a-z0-9][a-z0-9_-]*``, at most 64 characters.
STREAM_PATTERN = f"^{STREAM_NAME_RE.pattern}$"
#: A context's name: 1–64 letters, digits and ``_ . : -``, first a letter or digit.
CONTEXT_PATTERN = f"^{CONTEXT_NAME_PATTERN.pattern}$"
#: A principal's name: 1–64 letters, digits and ``_ . : - @``, first a letter or digit.
PRINCIPAL_PATTERN = f"^{PRINCIPAL_NAME_PATTERN.pattern}$"
#: An ingest's id: 1–128 of ``A-Z a-z 0-9 . _ : @ / + = -``.
INGEST_ID_PATTERN = f"^{INGEST_ID_RE.pattern}$"
#: A stream release's name: 1–64 letters, digits, ``-`` and ``_``.
RELEASE_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"

StreamPath = Annotated[
    str, Path(pattern=STREAM_PATTERN, max_length=MAX_STREAM_NAME, description="a stream's name")
]
StreamQuery = Annotated[
    str | None,
    Query(pattern=STREAM_PATTERN, max_length=MAX_STREAM_NAME, description="a stream's name"),
]
#: A context's name in a repeated query parameter (``?context=a&context=b``).
ContextItem = Annotated[str, Field(min_length=1, max_length=64, pattern=CONTEXT_PATTERN)]
ContextQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=64, pattern=CONTEXT_PATTERN, description="a context's name"),
]
ContextPath = Annotated[
    str, Path(pattern=CONTEXT_PATTERN, max_length=64, description="a context's name")
]
PrincipalPath = Annotated[
    str, Path(pattern=PRINCIPAL_PATTERN, max_length=64, description="a principal's name")
]
ReleasePath = Annotated[
    str, Path(pattern=RELEASE_PATTERN, max_length=64, description="the release's name")
]

__all__ = [
    "CONTEXT_PATTERN",
    "INGEST_ID_PATTERN",
    "PRINCIPAL_PATTERN",
    "RELEASE_PATTERN",
    "STREAM_PATTERN",
    "ContextItem",
    "ContextPath",
    "ContextQuery",
    "PrincipalPath",
    "ReleasePath",
    "StreamPath",
    "StreamQuery",
]
