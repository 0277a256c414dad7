"""The engine interface and its registry.

An engine reads the part files of granted blocks and computes a :class:`~blockbudget.engine.
plan.Plan`'s exact aggregates (no noise, no budget: engines never see a ledger). It also
streams rows for consumers that need them (``Grant.frame()``, training pipelines), with column
projection and predicate pushdown, in bounded memory.

Engines are registered by name, as schedulers are; a new engine is one module plus a
``register_engine`` call, and every registered engine runs the one contract suite
(``tests/engine/test_engine_contract.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar

from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    import pyarrow as pa

    from blockbudget.engine.plan import Partials, Plan, Predicate, ScanSource


class Engine(ABC):
    """Computes plans over block files. Implementations are stateless or thread-safe."""

    #: The registry name.
    name: ClassVar[str]

    @abstractmethod
    def aggregate(self, plan: Plan) -> Partials:
        """The plan's exact integer aggregates (see :mod:`blockbudget.engine.plan` for the
        semantics every engine shares).

        Raises:
            DataError: a part file is missing or unreadable.
        """

    @abstractmethod
    def batches(
        self,
        source: ScanSource,
        *,
        columns: Sequence[str] | None = None,
        predicates: Sequence[Predicate] = (),
        batch_rows: int = 65_536,
    ) -> Iterator[pa.RecordBatch]:
        """The source's rows after contribution bounding and the predicates, in stored order,
        projected to ``columns`` (default: all), as record batches of at most ``batch_rows``.

        Raises:
            DataError: a part file is missing or unreadable.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (connections, clusters started by the engine)."""


_REGISTRY: dict[str, Callable[[], Engine]] = {}


def register_engine(name: str, factory: Callable[[], Engine]) -> None:
    """Register an engine factory under ``name`` (re-registering replaces it)."""
    _REGISTRY[name] = factory


def engine_names() -> list[str]:
    """The registered engines' names, sorted."""
    _load_builtin()
    return sorted(_REGISTRY)


def get_engine(name: str | Engine) -> Engine:
    """A new engine by registry name (an :class:`Engine` is returned as is).

    Raises:
        InvalidRequestError: no engine has that name.
    """
    if isinstance(name, Engine):
        return name
    _load_builtin()
    factory = _REGISTRY.get(name)
    if factory is None:
        raise InvalidRequestError(f"unknown engine {name!r}; known: {sorted(_REGISTRY)}")
    return factory()


def _load_builtin() -> None:
    """Register the built-in engines (imported lazily: DuckDB and Ray are heavy)."""
    import blockbudget.engine.builtin  # noqa: F401  (registers on import)
