"""The API is its schema: schemathesis runs every check it has (its ``--checks all``: server
errors, status codes, content types, headers, response bodies, schema-valid requests accepted,
schema-violating ones refused, a missing key refused, unsupported methods and ``Allow``) over
every operation, in its coverage and fuzzing phases, as an admin (with the real ``flights``
stream in every stream path, so generated bodies reach the platform) and as an analyst (random
paths). Any failure fails the test, except those of the list below, each with its reason (also
in docs/service.md, "The API contract").

The examples are bounded (a few per operation, a fixed seed, no shrinking), so both passes take
well under a minute; ``docs/service.md`` records the longer run of the schemathesis CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import schemathesis
from schemathesis.engine import Status, events, from_schema

from blockbudget.service import create_app
from service.support import seed

#: Generated cases per operation and phase.
EXAMPLES = 8

#: Refusals of schema-valid requests by rules that are not the request's form but the state of
#: the service or of the data (docs/service.md, "The API contract", gives each reason): (error
#: class, a pattern of its detail). Each is a 422 that names the rule, decided before anything
#: is reserved or charged. A ``RequestValidationError`` is never here: the declared types are
#: the schema, so they refuse only what it forbids.
SEMANTIC: list[tuple[str, str]] = [
    # Names that must exist: contexts, columns, blocks, schedulers, releases.
    ("UnknownContextError", r"^unknown context"),
    ("InvalidRequestError", r"^unknown context\(s\)"),
    ("InvalidRequestError", r"already exists with description"),
    ("UnknownColumnError", r"has no column"),
    ("InvalidRequestError", r"are not blocks of stream|^unknown block"),
    ("UnknownBlockError", r""),
    ("InvalidRequestError", r"^unknown scheduler"),
    ("InvalidRequestError", r"has no maximum-id release|^no release "),
    # What the caller is: the context a request without one spends in.
    ("InvalidRequestError", r"names no 'context'"),
    ("InvalidRequestError", r"cannot disable itself"),
    # What the stream is: its blocking and its rule.
    ("InvalidRequestError", r"needs a stream blocked by user id|is sized only on streams"),
    # Choices between fields (exactly one of blocks/last/reservation_id).
    ("InvalidRequestError", r"give exactly one of|reservation_id|pricing takes"),
    # A user-blocked stream keeps each user's rows in one block: no late rows to a new block.
    ("InvalidRequestError", r"user-level blocks must keep each user's records in one block"),
    # A budget split below the ledger's smallest value (ε over many slots).
    ("InvalidBudgetError", r"^epsilon must be 0 or of magnitude"),
    # Rows: CSV text or JSON records that do not fit the stream's columns.
    ("InvalidRequestError", r"^ingest |CSV|column"),
    ("DataError", r""),
]


def _seeded_app(home: Path, who: str) -> tuple[Any, dict[str, str], Any]:
    seeded = seed(home)
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=60)
    key = seeded.admin if who == "admin" else seeded.analyst
    return app, seeded.headers(key), seeded


def _config(headers: dict[str, str], *, fix_stream: bool) -> schemathesis.Config:
    no_responses = {"extra-data-sources": {"responses": False}}
    return schemathesis.Config.from_dict(
        {
            "seed": 20261129,
            "headers": headers,
            "workers": 1,
            "parameters": {"path.stream": "flights"} if fix_stream else {},
            "generation": {"max-examples": EXAMPLES, "no-shrink": True, "database": "none"},
            "phases": {
                "examples": {"enabled": False},
                "stateful": {"enabled": False},
                # Names read from answers could be the caller's own (a key rotated away).
                "coverage": no_responses,
                "fuzzing": no_responses,
            },
        }
    )


def _failures(schema: Any) -> Iterator[tuple[str, str, Any, Any]]:
    """(operation, check, case, response) of every failed check of the run."""
    for event in from_schema(schema).execute():
        if isinstance(event, events.FatalError):
            raise AssertionError(f"schemathesis stopped: {event.exception!r}")
        if not isinstance(event, events.ScenarioFinished):
            continue
        recorder = event.recorder
        for case_id, checks in recorder.checks.items():
            for check in checks:
                if check.status is Status.FAILURE:
                    interaction = recorder.interactions.get(case_id)
                    response = interaction.response if interaction else None
                    yield recorder.label, check.name, recorder.cases[case_id].value, response


def _violates_schema(openapi: dict[str, Any], case: Any) -> bool:
    """Whether ``case`` breaks its operation's declared schema after all: schemathesis' coverage
    phase marks some cases as valid that are not (a value below a field's ``minimum`` beside a
    ``null`` alternative); the server refusing those is right."""
    operation = openapi["paths"][case.operation.path][case.method.lower()]
    components = {"components": openapi["components"]}
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None and isinstance(case.body, dict):
        validator = jsonschema.Draft202012Validator({**body["schema"], **components})
        if not validator.is_valid(case.body):
            return True
    for parameter in operation.get("parameters", []):
        values = {"path": case.path_parameters, "query": case.query}.get(parameter["in"]) or {}
        if parameter["name"] in values:
            schema = {**parameter["schema"], **components}
            if not jsonschema.Draft202012Validator(schema).is_valid(values[parameter["name"]]):
                return True
    return False


def _at(value: Any, path: str) -> Any:
    """The value at a dotted error location (``charges.0.epsilon``) in a body, else None."""
    for step in path.split("."):
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    return value


def _text_budget(case: Any, response: Any) -> bool:
    """Whether the refusal is of budgets the case sent as decimal text: the schema says such a
    field is a number or decimal text, and cannot state the range of the number the text
    holds."""
    try:
        body = json.loads(response.content)
    except (ValueError, AttributeError):
        return False
    fields = re.findall(r"body\.([\w.]+):", body.get("detail", ""))
    return (
        body.get("error") == "RequestValidationError"
        and bool(fields)
        and all(isinstance(_at(case.body, field), str) for field in fields)
    )


def _semantic(response: Any) -> bool:
    try:
        body = json.loads(response.content)
    except (ValueError, AttributeError):
        return False
    return response.status_code == 422 and any(
        body.get("error") == error and re.search(pattern, body.get("detail", ""))
        for error, pattern in SEMANTIC
    )


@pytest.mark.parametrize("who, fix_stream", [("admin", True), ("analyst", False)])
def test_every_check_of_schemathesis_passes(tmp_path: Path, who: str, fix_stream: bool) -> None:
    app, headers, seeded = _seeded_app(tmp_path / "home", who)
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", app, config=_config(headers, fix_stream=fix_stream)
    )
    openapi = app.openapi()
    failed: list[str] = []
    for label, check, case, response in _failures(schema):
        if check == "positive_data_acceptance" and (
            _semantic(response) or _text_budget(case, response) or _violates_schema(openapi, case)
        ):
            continue
        status = response.status_code if response is not None else None
        text = response.content[:300] if response is not None else b""
        failed.append(f"{label} {check}: {status} {text!r}")
    assert not failed, "\n".join(sorted(set(failed)))
    assert seeded.platform.verify().ok
    seeded.platform.close()
