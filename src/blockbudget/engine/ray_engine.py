"""The Ray engine: Ray Data workers read the part files themselves, one block per task.

The driver sends each worker a block's paths (never rows, never the driver's filesystem object:
a worker rebuilds the filesystem from the source's URI, with its own credentials). A worker
computes the block's exact partials with the reference kernels (:mod:`blockbudget.engine.
kernels`: bounding, predicates, groups, fixed point) and returns them as text (Python ints of any
size); the driver adds them. Bounding per block is exact because user ids are disjoint across
blocks. Noise is added once, later, by the query layer — never on a worker.

:meth:`RayEngine.batches` streams the bounded, filtered rows back in stored order (Ray Data with
``preserve_order``), for consumers that need rows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.fs as pafs

from blockbudget import errors
from blockbudget.engine.arrow_engine import find_damaged_file
from blockbudget.engine.base import Engine
from blockbudget.engine.kernels import output_columns
from blockbudget.engine.plan import Partials, zero_partials
from blockbudget.errors import BlockBudgetError, DataError

if TYPE_CHECKING:
    from blockbudget.engine.plan import Plan, Predicate, ScanSource

#: Environment variable naming a Ray cluster address (used when none is given).
ADDRESS_ENV = "BLOCKBUDGET_RAY_ADDRESS"


class RayEngine(Engine):
    """Computes plans on Ray Data, a task per block.

    Args:
        address: a Ray cluster to connect to (default: ``$BLOCKBUDGET_RAY_ADDRESS``). When Ray
            is already initialised in this process it is used as is; otherwise, with no address,
            a local Ray is started on first use (and shut down by :meth:`close`).
        num_cpus: CPUs of a local Ray started here (default: all).

    Example:
        >>> engine = RayEngine(num_cpus=2)  # doctest: +SKIP
        >>> engine.aggregate(plan).of("n")  # doctest: +SKIP
        (3,)
    """

    name = "ray"

    def __init__(self, *, address: str | None = None, num_cpus: int | None = None) -> None:
        self._address = address or os.environ.get(ADDRESS_ENV) or None
        self._num_cpus = num_cpus
        self._started = False

    def _ray(self) -> Any:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=self._address,
                num_cpus=None if self._address else self._num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            self._started = True
        return ray

    def aggregate(self, plan: Plan) -> Partials:
        source = plan.source
        if not source.blocks:
            return zero_partials(plan)
        self._ray()
        import ray.data

        task = replace(plan, source=_portable(source))
        items = [{"block": i} for i in range(len(source.blocks))]
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        ds.context.enable_progress_bars = False
        rows = _run(lambda: ds.map(_BlockAggregate(task)).take_all())
        total = zero_partials(plan)
        for row in rows:
            total = total + _decode(row["partials"])
        return total

    def batches(
        self,
        source: ScanSource,
        *,
        columns: Sequence[str] | None = None,
        predicates: Sequence[Predicate] = (),
        batch_rows: int = 65_536,
    ) -> Iterator[pa.RecordBatch]:
        out = output_columns(source, columns, predicates, batch_rows)
        return self._stream(source, out, tuple(predicates), batch_rows)

    def _stream(
        self,
        source: ScanSource,
        out: list[str],
        predicates: tuple[Predicate, ...],
        batch_rows: int,
    ) -> Iterator[pa.RecordBatch]:
        if not source.blocks:
            return
        self._ray()
        import ray.data

        reader = _BlockRows(_portable(source), out, predicates, batch_rows)
        items = [{"block": i} for i in range(len(source.blocks))]
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        ds.context.enable_progress_bars = False
        ds.context.execution_options.preserve_order = True
        mapped = ds.map_batches(reader, batch_size=1, batch_format="pyarrow", zero_copy_batch=True)
        try:
            for chunk in mapped.iter_batches(batch_size=None, batch_format="pyarrow"):
                table = cast(pa.Table, chunk)
                for batch in table.select(out).to_batches(max_chunksize=batch_rows):
                    if batch.num_rows:
                        yield batch
        except Exception as exc:
            # Ray Data keeps only the text of a worker's exception, which must not be passed
            # on: name the damaged file if there is one (a metadata check, on this path only).
            raise (find_damaged_file(source) or _failure(exc)) from None

    def close(self) -> None:
        """Shut Ray down if this engine started it."""
        if self._started:
            import ray

            if ray.is_initialized():
                ray.shutdown()
            self._started = False


def _portable(source: ScanSource) -> ScanSource:
    """The source without its filesystem object (workers rebuild it from the URI)."""
    return replace(source, filesystem=None)


def _filesystem(uri: str) -> pafs.FileSystem:
    """The filesystem of a data root as a worker sees it (credentials from its environment)."""
    if "://" in uri:
        fs, _ = pafs.FileSystem.from_uri(uri)
        return fs
    return pafs.LocalFileSystem()


def _failure(exc: BaseException) -> DataError:
    """A Ray failure as a data error, without its text."""
    return DataError(f"the Ray engine failed to read the blocks ({type(exc).__name__})")


def _run(action: Any) -> Any:
    try:
        return action()
    except BlockBudgetError:
        raise
    except Exception as exc:  # a Ray task failure: never pass its text on
        raise _failure(exc) from None


def _encode(partials: Partials) -> str:
    return json.dumps({k: list(v) for k, v in partials.values.items()})


def _decode(text: str) -> Partials:
    payload = json.loads(text)
    if "error" in payload:
        raise _decode_error(text)
    return Partials({k: tuple(int(x) for x in v) for k, v in payload.items()})


def _error_text(exc: BlockBudgetError) -> str:
    return json.dumps({"error": type(exc).__name__, "message": str(exc)})


def _decode_error(text: str) -> Exception:
    """A worker's contract error, re-raised on the driver as the same class."""
    payload = json.loads(text)
    cls = getattr(errors, str(payload.get("error")), None)
    if not (isinstance(cls, type) and issubclass(cls, BlockBudgetError)):
        cls = DataError
    return cls(str(payload.get("message", "")))


class _BlockAggregate:
    """A worker's task: one block's exact partials (a Ray Data row mapper)."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        from blockbudget.engine.arrow_engine import ArrowEngine

        plan = self._plan
        block = plan.source.blocks[int(row["block"])]
        source = replace(plan.source, blocks=(block,), filesystem=_filesystem(plan.source.uri))
        try:
            partials = ArrowEngine().aggregate(replace(plan, source=source))
        except BlockBudgetError as exc:
            return {"block": row["block"], "partials": _error_text(exc)}
        return {"block": row["block"], "partials": _encode(partials)}


class _BlockRows:
    """A worker's task: one block's bounded, filtered rows (a Ray Data batch mapper)."""

    def __init__(
        self,
        source: ScanSource,
        out: list[str],
        predicates: tuple[Predicate, ...],
        batch_rows: int,
    ) -> None:
        self._source = source
        self._out = out
        self._predicates = predicates
        self._batch_rows = batch_rows

    def __call__(self, items: pa.Table) -> Iterator[pa.Table]:
        from blockbudget.engine.arrow_engine import ArrowEngine

        for index in items.column("block").to_pylist():
            source = replace(
                self._source,
                blocks=(self._source.blocks[int(index)],),
                filesystem=_filesystem(self._source.uri),
            )
            batches = list(
                ArrowEngine().batches(
                    source,
                    columns=self._out,
                    predicates=self._predicates,
                    batch_rows=self._batch_rows,
                )
            )
            if batches:
                yield pa.Table.from_batches(batches)
