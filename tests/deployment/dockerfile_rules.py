"""A small Dockerfile linter for the offline deployment tests (no container runtime here).

It parses a Dockerfile into instructions (continuation lines joined, comments dropped) and checks
the rules an image reviewer applies, in the spirit of hadolint: a pinned base image (no ``latest``,
no untagged image), a non-root ``USER`` in the final stage, ``pip install --no-cache-dir``, no
dev tools in the final stage, a ``HEALTHCHECK`` on ``/healthz``, ``EXPOSE`` equal to the port the
server listens on, ``COPY`` rather than ``ADD``, and build-context sources that ``.dockerignore``
lets through. :func:`check` returns the violations; an empty list means the file passes.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

DEV_TOOLS = ("gcc", "g++", "make", "build-essential", "git", "curl", "wget", "vim")


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its keyword (upper case), argument text and first line."""

    keyword: str
    args: str
    line: int


@dataclass(frozen=True)
class Violation:
    """A broken rule, where, and why."""

    rule: str
    line: int
    message: str


def parse(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile, continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        keyword, _, args = " ".join(p for p in pending if p).partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    return out


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """The instructions split into build stages (each starts with its ``FROM``)."""
    result: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def _words(args: str) -> list[str]:
    """The words of an instruction's arguments (exec form as JSON, else shell words)."""
    import json

    if args.startswith("["):
        value = json.loads(args)
        return [str(v) for v in value]
    return shlex.split(args)


def _flags_and_rest(args: str) -> tuple[dict[str, str], list[str]]:
    words = _words(args)
    flags = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        flags[name] = value
    return flags, words


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore`` ``patterns`` keep ``path`` (or a parent folder) out of the
    build context; the last matching pattern wins and ``!`` re-includes."""
    parts = Path(path.rstrip("/")).parts
    result = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip("/")
        for depth in range(1, len(parts) + 1):
            candidate = "/".join(parts[:depth])
            if _match(candidate, pattern):
                result = not negate
                break
    return result


def _match(candidate: str, pattern: str) -> bool:
    if pattern.startswith("**/"):
        tail = pattern[3:]
        segments = candidate.split("/")
        return any(fnmatch.fnmatchcase("/".join(segments[i:]), tail) for i in range(len(segments)))
    return fnmatch.fnmatchcase(candidate, pattern) and candidate.count("/") == pattern.count("/")


def dockerignore_patterns(text: str) -> list[str]:
    """The patterns of a ``.dockerignore`` file (comments and blank lines dropped)."""
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def check(text: str, *, dockerignore: str, port_env: str = "BLOCKBUDGET_PORT") -> list[Violation]:
    """Every rule ``text`` (a Dockerfile) breaks, given its ``.dockerignore`` text."""
    instructions = parse(text)
    found: list[Violation] = []
    all_stages = stages(instructions)
    if not all_stages:
        return [Violation("from", 0, "no FROM instruction")]
    names = set()
    for stage in all_stages:
        found += _check_from(stage[0], names)
    final = all_stages[-1]
    patterns = dockerignore_patterns(dockerignore)
    for ins in instructions:
        found += _check_run(ins, final_stage=ins in final)
        found += _check_copy(ins, patterns)
    found += _check_user(final)
    found += _check_ports(final, port_env)
    return found


def _check_from(ins: Instruction, names: set[str]) -> list[Violation]:
    words = [w for w in _words(ins.args) if not w.startswith("--")]
    image = words[0]
    if len(words) >= 3 and words[1].upper() == "AS":
        names.add(words[2])
    if image in names:
        return []
    if "@sha256:" in image:
        return []
    _, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    if not tag:
        return [Violation("pinned-base", ins.line, f"base image {image!r} has no tag")]
    if tag == "latest" or not re.search(r"\d", tag):
        return [Violation("pinned-base", ins.line, f"base image {image!r} is not pinned")]
    return []


def _check_run(ins: Instruction, *, final_stage: bool) -> list[Violation]:
    found = []
    if ins.keyword == "RUN":
        for command in re.split(r"&&|;|\|\|", ins.args):
            words = command.split()
            if "pip" in words and "install" in words and "--no-cache-dir" not in words:
                found.append(Violation("pip-cache", ins.line, "pip install without --no-cache-dir"))
            if final_stage and "install" in words and ("apt-get" in words or "apt" in words):
                tools = sorted(set(words) & set(DEV_TOOLS))
                if tools:
                    found.append(
                        Violation("dev-tools", ins.line, f"dev tools in the final image: {tools}")
                    )
            if final_stage and any("[dev]" in w or ",dev" in w for w in words):
                found.append(Violation("dev-tools", ins.line, "the dev extra in the final image"))
    if ins.keyword == "ADD":
        found.append(Violation("no-add", ins.line, "use COPY (ADD fetches URLs and unpacks)"))
    return found


def _check_copy(ins: Instruction, patterns: list[str]) -> list[Violation]:
    if ins.keyword not in ("COPY", "ADD"):
        return []
    flags, words = _flags_and_rest(ins.args)
    if "from" in flags:
        return []
    found = []
    for source in words[:-1]:
        if ignored(source, patterns):
            found.append(
                Violation("dockerignore", ins.line, f"COPY {source}: .dockerignore excludes it")
            )
    return found


def _check_user(final: list[Instruction]) -> list[Violation]:
    users = [i for i in final if i.keyword == "USER"]
    if not users:
        return [Violation("non-root", final[0].line, "the final stage sets no USER (runs as root)")]
    user = users[-1].args.split(":")[0]
    if user in ("root", "0"):
        return [Violation("non-root", users[-1].line, f"the final stage runs as {user!r}")]
    return []


def _check_ports(final: list[Instruction], port_env: str) -> list[Violation]:
    found = []
    env: dict[str, str] = {}
    for ins in final:
        if ins.keyword == "ENV":
            for word in shlex.split(ins.args):
                key, _, value = word.partition("=")
                env[key] = value
    port = env.get(port_env)
    exposed = {w.split("/")[0] for i in final if i.keyword == "EXPOSE" for w in i.args.split()}
    if port is None:
        found.append(Violation("expose", final[0].line, f"ENV {port_env} is not set"))
    elif exposed != {port}:
        found.append(
            Violation("expose", final[0].line, f"EXPOSE {sorted(exposed)} != {port_env}={port}")
        )
    checks = [i for i in final if i.keyword == "HEALTHCHECK"]
    if not checks or checks[-1].args.upper().startswith("NONE"):
        found.append(Violation("healthcheck", final[0].line, "no HEALTHCHECK"))
    elif "/healthz" not in checks[-1].args or (port and port not in checks[-1].args):
        found.append(
            Violation("healthcheck", checks[-1].line, "HEALTHCHECK does not probe /healthz")
        )
    return found
