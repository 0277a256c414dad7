"""A histogram stream released from a platform stream's blocks, charged to those blocks.

A time-blocked platform stream (``Blocking(unit=TIME, window=…)``) is a sequence of slots: slot t
is the time window ``origin + (t − 1)·window``, where ``origin`` is the first block's window, and
its rows are the rows of the blocks with that window (the window's first block and any late ones
present when the slot is read). A window with no block is an empty slot (its PDF is the padded
uniform one; which windows have blocks is public block metadata).

:class:`PlatformStreamRelease` runs a :class:`~blockbudget.streaming.HistogramStream` over those
slots. When a release window closes it reads every slot of the window through its own grant —
:meth:`Platform.request` on exactly that slot's blocks, in the release's context, reserving the
window's budget — computes the slots' compressed PDFs (seed ``002_e6d4c77f2abb3a16.txt`` §4.1),
releases the window, and then draws the window's ε_j (or ρ_j) on every grant, so each block's
ledger records what the releases that read it spent. If any request is refused, every grant
opened for the window is closed unspent and nothing is released or charged. The slots between
releases are answered by post-processing and read nothing.

The user-level guarantee of the whole stream (Σ_j ε_j ≤ ε over all windows, for ever) is kept by
the stream's :class:`~blockbudget.streaming.StreamAccountant`; the per-block ledger additionally
shows each block's share (ε_j of the window that read it; a block belongs to one slot, so it pays
once). The public state (noisy releases, totals, a log of
slot metadata) is saved after each window's draws commit, as JSON under
``<home>/releases/<stream>/<name>.json``, so that a later call continues the same release;
nothing private (no open window's sum) is ever saved — a window is read in one call.
Rows whose category is outside the declared domain are ignored (a per-record rule, so one
user's change still moves at most that user's records).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.errors import InvalidRequestError
from blockbudget.grant import Grant
from blockbudget.mechanisms.noise import NoiseKind, NoiseSource
from blockbudget.store import Unit
from blockbudget.streaming.compression import Compression
from blockbudget.streaming.histogram import (
    HistogramConfig,
    HistogramRelease,
    HistogramState,
    HistogramStream,
)

if TYPE_CHECKING:
    from blockbudget.platform import Platform

__all__ = [
    "PlatformStreamRelease",
    "ReleasedSlot",
    "SlotSource",
    "StreamSlot",
    "open_release",
]


@dataclass(frozen=True, kw_only=True)
class SlotSource:
    """How a slot's rows become a compressed PDF (all of it public, declared up front).

    Attributes:
        item_column: the categorical column released.
        user_column: the column identifying the protected user.
        domain: the declared categories (index = bin); the data never adds one.
        min_users: the public floor n_min of users per slot (Δ₁ = 2/n_min).
    """

    item_column: str
    user_column: str
    domain: tuple[str, ...]
    min_users: int

    def __post_init__(self) -> None:
        if not self.domain or len(set(self.domain)) != len(self.domain):
            raise InvalidRequestError("the domain must list at least one category, each once")
        for name in ("item_column", "user_column"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise InvalidRequestError(f"{name} must be a non-empty column name")
        Compression(len(self.domain), self.min_users)  # validates n_min


@dataclass(frozen=True)
class StreamSlot:
    """One slot of a platform stream: its index, window start (ISO text) and blocks."""

    t: int
    key: str
    blocks: tuple[str, ...]


@dataclass(frozen=True)
class ReleasedSlot:
    """One slot's public answer with where it came from."""

    slot: StreamSlot
    release: HistogramRelease = field(repr=False)


def _fingerprint(stream: str, source: SlotSource, config: HistogramConfig) -> dict[str, Any]:
    return {
        "stream": stream,
        "source": asdict(source),
        "epsilon": repr(config.epsilon),
        "delta": repr(config.delta),
        "mode": config.mode.value,
        "noise": config.noise.value,
        "window": config.window,
        "warmup": config.warmup,
        "series": type(config.series).__name__ + repr(config.series),
        "horizon": config.horizon.value,
        "expected_slots": config.expected_slots,
        "combine": config.combine.value,
        "smoothing": repr(config.smoothing),
    }


class PlatformStreamRelease:
    """A live histogram release of a platform stream (see the module docstring).

    Args:
        platform: the platform.
        stream: a time-blocked stream.
        context: the registered context whose per-block budgets pay.
        source: the columns, the declared domain and n_min.
        config: the release's parameters.
        name: the release's name (its saved state is per stream and name).
        noise / seed: as for :class:`~blockbudget.streaming.HistogramStream` (a seed gives
            ``secure_noise=False``).
        holder: recorded on every reservation.

    Raises:
        InvalidRequestError: the stream is not time-blocked, a Gaussian release on a stream
            without RDP accounting, or a saved state made with other parameters.

    Example:
        >>> import pandas as pd, tempfile
        >>> from datetime import timedelta
        >>> from blockbudget.budget import Budget
        >>> from blockbudget.platform import Platform
        >>> from blockbudget.store import Blocking, Unit
        >>> from blockbudget.streaming import HistogramConfig, PlatformStreamRelease, SlotSource
        >>> p = Platform(tempfile.mkdtemp())
        >>> _ = p.create_stream("visits", policy=Budget(epsilon=10),
        ...     blocking=Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1)))
        >>> _ = p.add_context("dash")
        >>> rows = pd.DataFrame({"ts": pd.to_datetime(["2024-01-01"] * 4 + ["2024-01-02"] * 4),
        ...     "page": ["a", "a", "b", "a"] * 2, "user": [1, 2, 3, 4] * 2})
        >>> _ = p.ingest("visits", rows)
        >>> rel = PlatformStreamRelease(p, "visits", context="dash", name="pages", seed=3,
        ...     source=SlotSource(item_column="page", user_column="user", domain=("a", "b"),
        ...                       min_users=2), config=HistogramConfig(epsilon=1.0, window=2))
        >>> [r.slot.key[:10] for r in rel.run()]
        ['2024-01-01', '2024-01-02']
        >>> p.close()
    """

    def __init__(
        self,
        platform: Platform,
        stream: str,
        *,
        context: str,
        source: SlotSource,
        config: HistogramConfig,
        name: str = "default",
        noise: NoiseSource | None = None,
        seed: int | None = None,
        holder: str = "",
    ) -> None:
        spec = platform.stream(stream)
        if spec.blocking.unit is not Unit.TIME or spec.blocking.window is None:
            raise InvalidRequestError(
                f"a stream release reads time slots: stream {stream!r} is blocked by "
                f"{spec.blocking.unit.value}, not by time"
            )
        if config.noise is NoiseKind.GAUSSIAN and spec.accounting is not Accounting.RDP:
            raise InvalidRequestError(
                "a Gaussian (zCDP) release is charged as an RDP curve: stream "
                f"{stream!r} uses {spec.accounting.value} accounting; use Laplace or an RDP stream"
            )
        if not name or "/" in name or name.startswith("."):
            raise InvalidRequestError(f"a release name is a plain file name, got {name!r}")
        self.platform = platform
        self.stream = stream
        self.context = context
        self.source = source
        self.config = config
        self.name = name
        self.holder = holder
        self._spec = spec
        self._noise = noise
        self._seed = seed
        self._fingerprint = json.loads(json.dumps(_fingerprint(stream, source, config)))
        self._path = Path(platform.home) / "releases" / stream / f"{name}.json"
        self._hist = self._fresh()
        self._log: list[dict[str, Any]] = []
        self._answer: list[float] = list(self._hist.release)
        saved = self._load()
        if saved is not None:
            self._hist.resume(saved)
        self._index = {c: i for i, c in enumerate(source.domain)}

    # --- state ----------------------------------------------------------------------------------

    def _fresh(self) -> HistogramStream:
        seed = self._seed
        if seed is not None:  # a resumed seeded run must not replay the same noise
            seed = seed + len(getattr(self, "_log", []))
        return HistogramStream(
            config=self.config,
            compression=Compression(len(self.source.domain), self.source.min_users),
            noise=self._noise,
            seed=seed,
            name=f"{self.stream}/{self.name}",
        )

    def _load(self) -> HistogramState | None:
        if not self._path.exists():
            return None
        data = json.loads(self._path.read_text())
        if data.get("fingerprint") != self._fingerprint:
            raise InvalidRequestError(
                f"release {self.name!r} of stream {self.stream!r} was started with other "
                "parameters; use another name"
            )
        self._log = list(data["log"])
        self._answer = [float(x) for x in data["answer"]]
        self._hist = self._fresh()
        st = data["state"]
        return HistogramState(
            t=int(st["t"]),
            window=int(st["window"]),
            numerator=tuple(st["numerator"]),
            denominator=float(st["denominator"]),
            latest=None if st["latest"] is None else tuple(st["latest"]),
            spent_units=int(st["spent_units"]),
        )

    def _save(self) -> None:
        """Write the public state atomically (a temporary file renamed over the old one)."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        state = asdict(self._hist.state())
        body = {
            "fingerprint": self._fingerprint,
            "state": state,
            "answer": self._answer,
            "log": self._log,
        }
        tmp = self._path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, self._path)

    @property
    def slots_done(self) -> int:
        """Slots released (or answered) so far."""
        return self._hist.t

    @property
    def answer(self) -> dict[str, float]:
        """The latest public answer, by category."""
        return dict(zip(self.source.domain, self._answer, strict=True))

    @property
    def spent(self) -> str:
        """The release's exact user-level total so far (ε, or ρ for Gaussian)."""
        return str(self._hist.accountant.spent)

    @property
    def log(self) -> list[dict[str, Any]]:
        """One public entry per slot: t, key, window, released, cost, blocks."""
        return [dict(e) for e in self._log]

    # --- slots ----------------------------------------------------------------------------------

    def slots(self) -> list[StreamSlot]:
        """Every slot from the stream's first window to its newest one."""
        metas = [m for m in self.platform.store.blocks(self.stream) if m.window_start is not None]
        if not metas:
            return []
        window = self._spec.blocking.window
        assert window is not None
        by_start: dict[datetime, list[str]] = {}
        for m in metas:
            assert m.window_start is not None
            by_start.setdefault(m.window_start, []).append(m.block_id)
        origin = min(by_start)
        last = max(by_start)
        count = int((last - origin) / window) + 1
        out = []
        for i in range(count):
            start = origin + i * window
            out.append(
                StreamSlot(t=i + 1, key=start.isoformat(), blocks=tuple(by_start.get(start, ())))
            )
        return out

    def run(self, *, max_windows: int | None = None) -> list[ReleasedSlot]:
        """Release every complete window not yet released (at most ``max_windows``).

        Returns:
            the slots answered by this call, in order.

        One run at a time per release: an exclusive lock on ``<name>.json.lock`` is held for the
        whole call and the saved state is re-read under it, so two concurrent calls (two server
        threads or processes) never release, or charge, the same window twice.

        Raises:
            BudgetExceededError and the other refusals of :meth:`Platform.request`: a window's
                blocks cannot pay (nothing of that window is released or charged; earlier
                windows of this call stay released).
            InvalidRequestError: another call is running this release right now.
        """
        import fcntl

        self._path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._path.with_suffix(".json.lock"), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InvalidRequestError(
                    f"release {self.name!r} of stream {self.stream!r} is running in another "
                    "call; try again when it is done"
                ) from None
            try:
                saved = self._load()  # what another call saved since this object was made
                if saved is not None:
                    self._hist.resume(saved)
                return self._run_locked(max_windows)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _run_locked(self, max_windows: int | None) -> list[ReleasedSlot]:
        slots = self.slots()
        out: list[ReleasedSlot] = []
        done = 0
        while max_windows is None or done < max_windows:
            start = self._hist.t
            length = self.config.window_length(self._hist.state().window)
            chunk = slots[start : start + length]
            if len(chunk) < length:
                break
            out.extend(self._release_window(chunk))
            done += 1
        return out

    def _cost(self, budget: float) -> Cost:
        """The ledger cost of one window's release for one block."""
        if self.config.noise is NoiseKind.GAUSSIAN:
            rho = budget
            return RdpCurve.from_function(lambda alpha: alpha * rho)  # ρ-zCDP ⇒ (α, αρ)-RDP
        if self._spec.accounting is Accounting.RDP:
            return RdpCurve.from_pure_dp(budget)
        return Budget(epsilon=repr(budget))

    def _release_window(self, chunk: Sequence[StreamSlot]) -> list[ReleasedSlot]:
        before = self._hist.state()
        budget = self._hist.window_budget(before.window)
        cost = self._cost(budget)
        by_slot: dict[int, Grant] = {}
        grants: list[Grant] = []
        try:
            for slot in chunk:
                if slot.blocks:  # exactly this slot's blocks, reserving the window's budget
                    grant = self.platform.request(
                        self.stream,
                        blocks=list(slot.blocks),
                        budget=cost,
                        context=self.context,
                        holder=self.holder,
                        columns=[self.source.item_column, self.source.user_column],
                    )
                    grants.append(grant)
                    by_slot[slot.t] = grant
            releases = [self._hist.step_pdf(self._slot_pdf(by_slot.get(s.t))) for s in chunk]
            if releases[-1].released:
                for g in grants:
                    g.draw(cost, label=f"stream release {self.name!r}, window {before.window}")
        except BaseException:
            self._hist = self._fresh()
            self._hist.resume(before)  # nothing in memory changes unless the draws committed
            raise
        finally:
            for g in grants:
                g.close()
        if releases[-1].released:
            self._answer = [float(x) for x in releases[-1].pdf]
        for slot, rel in zip(chunk, releases, strict=True):
            self._log.append(
                {
                    "t": rel.t,
                    "key": slot.key,
                    "window": rel.window,
                    "released": rel.released,
                    "refused": rel.refused,
                    "cost": rel.cost,
                    "unit": rel.unit,
                    "blocks": list(slot.blocks),
                    "secure_noise": rel.secure_noise,
                }
            )
        self._save()
        return [ReleasedSlot(slot=s, release=r) for s, r in zip(chunk, releases, strict=True)]

    def _slot_pdf(self, grant: Grant | None) -> np.ndarray:
        """The slot's compressed PDF from its grant's rows (the padded uniform PDF if none)."""
        k = len(self.source.domain)
        comp = Compression(k, self.source.min_users)
        if grant is None:
            return comp.pdf(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        table = grant.data
        items = [
            self._index.get(str(v), -1) for v in table.column(self.source.item_column).to_pylist()
        ]
        item_arr = np.asarray(items, dtype=np.int64)
        users = table.column(self.source.user_column).to_pylist()
        _, user_codes = np.unique(
            np.asarray([str(u) for u in users], dtype=object), return_inverse=True
        )
        keep = item_arr >= 0
        return comp.pdf(np.asarray(user_codes, dtype=np.int64)[keep], item_arr[keep])


def open_release(
    platform: Platform,
    stream: str,
    *,
    name: str,
    context: str,
    item_column: str,
    user_column: str,
    domain: Sequence[str],
    min_users: int,
    epsilon: float,
    delta: float = 0.0,
    mode: str = "windowed",
    noise: str = "laplace",
    window: int = 30,
    warmup: bool = True,
    horizon: str = "accumulative",
    expected_slots: int | None = 365,
    holder: str = "",
) -> PlatformStreamRelease:
    """A :class:`PlatformStreamRelease` with secure noise from plain options (the CLI's and the
    service's entry point; mode, noise and horizon by their enum values).

    Raises:
        InvalidRequestError: an unknown mode, noise or horizon name, or any parameter refused by
            :class:`HistogramConfig`, :class:`SlotSource` or the release.
    """
    from blockbudget.streaming.config import Horizon
    from blockbudget.streaming.histogram import ReleaseMode

    try:
        mode_v, noise_v, horizon_v = ReleaseMode(mode), NoiseKind(noise), Horizon(horizon)
    except ValueError as exc:
        raise InvalidRequestError(
            f"mode must be windowed|per-slot, noise laplace|gaussian and horizon "
            f"accumulative|instantaneous; got {mode!r}, {noise!r}, {horizon!r}"
        ) from exc
    config = HistogramConfig(
        epsilon=epsilon,
        delta=delta,
        mode=mode_v,
        noise=noise_v,
        window=window,
        warmup=warmup,
        horizon=horizon_v,
        expected_slots=expected_slots,
    )
    source = SlotSource(
        item_column=item_column, user_column=user_column, domain=tuple(domain), min_users=min_users
    )
    return PlatformStreamRelease(
        platform, stream, context=context, source=source, config=config, name=name, holder=holder
    )
