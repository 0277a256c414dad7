"""A histogram stream released from a platform stream's blocks, charged to those blocks.

A time-blocked platform stream (``Blocking(unit=TIME, window=…)``) is a sequence of slots: slot t
is the time window ``origin + (t − 1)·window``, where ``origin`` is the earliest window present at
the release's first run (saved; earlier blocks arriving later are never read). A slot is read
once, when it is closed — its window ended ``grace`` ago (one window by default) — and its rows
are then the rows of every block with that window start. A window with no block, or whose blocks
are retired or cannot pay in the release's context (public ledger state), is an empty slot (its
PDF is the padded uniform one; which windows have blocks is public block metadata). Rows with a
null user id are dropped.

:class:`PlatformStreamRelease` runs a :class:`~blockbudget.streaming.HistogramStream` over those
slots. When a release window closes it reads every slot of the window through its own grant —
:meth:`Platform.request` on exactly that slot's blocks, in the release's context, reserving the
window's budget — computes the slots' compressed PDFs (seed ``002_e6d4c77f2abb3a16.txt`` §4.1),
releases the window, and then draws the window's ε_j (or ρ_j) on every grant, so each block's
ledger records what the releases that read it spent. If anything fails, every grant opened for
the window is closed unspent and nothing is released or charged. Each draw carries a ledger
request id derived from (stream, context, release name, the slot's first block), so the ledger —
not the saved file — says which slots a release has read: a window with a block already charged
by this release is closed unread (its budget counted again, nothing published: a crash after the
draws, or a rolled-back or deleted file), and a saved state the ledger and the configuration do
not bear out is refused on resume. The slots
between releases are answered by post-processing and read nothing.

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

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from blockbudget.budget import Cost
from blockbudget.errors import BudgetExceededError, InvalidRequestError, RetiredBlockError
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
from blockbudget.streaming.release_slots import ZCDP_COSTS as ZCDP_COSTS
from blockbudget.streaming.release_slots import ReleasedSlot as ReleasedSlot
from blockbudget.streaming.release_slots import SlotSource as SlotSource
from blockbudget.streaming.release_slots import StreamSlot as StreamSlot
from blockbudget.streaming.release_slots import _fingerprint

if TYPE_CHECKING:
    from blockbudget.platform import Platform

__all__ = [
    "PlatformStreamRelease",
    "ReleasedSlot",
    "SlotSource",
    "StreamSlot",
    "open_release",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,200}$")


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
        grace: how long after its window ends a slot is closed (default: one window); rows of
            a slot arriving after it was released are never read by this release.

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
        grace: timedelta | None = None,
    ) -> None:
        spec = platform.stream(stream)
        if spec.blocking.unit is not Unit.TIME or spec.blocking.window is None:
            raise InvalidRequestError(
                f"a stream release reads time slots: stream {stream!r} is blocked by "
                f"{spec.blocking.unit.value}, not by time"
            )
        if config.noise is NoiseKind.GAUSSIAN and spec.accounting.rule.cost_kind not in ZCDP_COSTS:
            raise InvalidRequestError(
                "a Gaussian (zCDP) release is charged as an RDP curve: stream "
                f"{stream!r} uses {spec.accounting.value} accounting; use Laplace or an RDP stream"
            )
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidRequestError(
                f"a release name has 1-200 letters, digits, '-' or '_', got {name!r}"
            )
        self.platform = platform
        self.stream = stream
        self.context = context
        self.source = source
        self.config = config
        self.name = name
        self.holder = holder
        self.grace = spec.blocking.window if grace is None else grace
        if self.grace < timedelta(0):
            raise InvalidRequestError(f"grace must be >= 0, got {self.grace}")
        self._spec = spec
        self._noise = noise
        self._seed = seed
        self._fingerprint = json.loads(json.dumps(_fingerprint(stream, source, config)))
        self._path = Path(platform.home) / "releases" / stream / f"{name}.json"
        ident = json.dumps([stream, context, name])
        self._charge_prefix = f"stream-release/{hashlib.sha256(ident.encode()).hexdigest()[:40]}"
        self._origin: datetime | None = None
        self._hist = self._fresh()
        self._log: list[dict[str, Any]] = []
        self._answer: list[float] = list(self._hist.release)
        saved = self._load()
        if saved is not None:
            self._hist.resume(saved)
        self._index = {c: i for i, c in enumerate(source.domain)}
        self._check_affordable(platform)

    def _check_affordable(self, platform: Platform) -> None:
        """Refuse a release whose next window costs more than a fresh block of the stream can
        ever pay (public parameters only): its slots would all be empty, forever."""
        budget = self._hist.window_budget(self._hist.state().window)
        cost = self._cost(budget)
        f = platform.filter(self.stream)
        if not f.fits_with(f.zero(), f.features(cost)):
            raise InvalidRequestError(
                f"a window of release {self.name!r} charges each block ε={budget:.6g}, more than "
                f"a fresh block of stream {self.stream!r} can pay (policy "
                f"ε={self._spec.policy.epsilon}); lower the release's ε"
            )

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
        self._origin = (
            None if data.get("origin") is None else datetime.fromisoformat(data["origin"])
        )
        self._hist = self._fresh()
        st = data["state"]
        state = HistogramState(
            t=int(st["t"]),
            window=int(st["window"]),
            numerator=tuple(st["numerator"]),
            denominator=float(st["denominator"]),
            latest=None if st["latest"] is None else tuple(st["latest"]),
            spent_units=int(st["spent_units"]),
        )
        self._verify(state)
        return state

    def _charge_id(self, block: str) -> str:
        """The ledger request id of this release's one charge on the slot whose first block is
        ``block`` (per stream, context and release name: a block pays this release once)."""
        return f"{self._charge_prefix}/{block}"

    def _verify(self, state: HistogramState) -> None:
        """Refuse a saved state the ledger and the configuration do not bear out.

        The ledger is the source of truth: the slots and totals follow from the window number
        (t = the windows' lengths, spent = their budgets), the last slot the log says was read
        must have its charge in the ledger, and the next slot's must not (a rolled-back or
        edited file would otherwise read and charge slots again).
        """
        j = state.window
        bad = not 1 <= j <= state.t + 1 or len(self._log) != state.t
        if not bad:
            probe = self._fresh()
            for i in range(1, j):  # replay the accountant: refusals included
                budget = probe.budget_of(i)
                if budget > 0.0:
                    probe.accountant.try_charge(budget)
            lengths = sum(self.config.window_length(i) for i in range(1, j))
            bad = state.t != lengths or state.spent_units != probe.accountant.spent_units
        reads = [e for e in self._log if e.get("read")]
        last = reads[-1]["read"][0] if reads else None
        if not bad and last is not None:
            bad = self.platform.ledger.request(self._charge_id(last)) is None
        if bad:
            raise InvalidRequestError(
                f"the saved state of release {self.name!r} of stream {self.stream!r} does not "
                f"match the ledger (window {j}, slot {state.t}); it was edited or lost — the "
                "ledger keeps every slot this release charged, so it cannot be replayed"
            )

    def _save(self) -> None:
        """Write the public state atomically (a temporary file renamed over the old one)."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        state = asdict(self._hist.state())
        body = {
            "fingerprint": self._fingerprint,
            "origin": None if self._origin is None else self._origin.isoformat(),
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

    def slots(self, *, now: datetime | None = None) -> list[StreamSlot]:
        """The closed slots, from the release's origin to the newest closed one.

        The origin is the earliest window present at the release's first run, saved with its
        state: blocks of earlier windows arriving later are never read (slot numbers never
        move). A slot is closed once its window ended at least ``grace`` ago (UTC wall clock,
        ``now`` by default the current time; the release's ``grace`` defaults to one window):
        the newest closed slot is the last one whose window ended by ``now − grace``, and empty
        slots up to it are empty slots.
        """
        metas = [m for m in self.platform.store.blocks(self.stream) if m.window_start is not None]
        if not metas:
            return []
        window = self._spec.blocking.window
        assert window is not None
        origin = self._origin or min(m.window_start for m in metas if m.window_start)
        by_start: dict[datetime, list[tuple[str, bool]]] = {}  # (block, sealed)
        for m in metas:
            if m.window_start is not None and m.window_start >= origin:
                by_start.setdefault(m.window_start, []).append((m.block_id, m.sealed))
        if not by_start:
            return []
        if now is None:
            now = datetime.now(UTC).replace(tzinfo=None)  # window starts are naive UTC
        count = int((max(by_start) - origin) / window) + 1
        out: list[StreamSlot] = []
        for i in range(count):
            start = origin + i * window
            if start + window > now - self.grace:
                break  # this window (and every later one) may still be filling
            blocks = sorted(b for b, _ in by_start.get(start, []))
            out.append(StreamSlot(t=i + 1, key=start.isoformat(), blocks=tuple(blocks)))
        self._origin = origin
        return out

    def run(
        self, *, max_windows: int | None = None, now: datetime | None = None
    ) -> list[ReleasedSlot]:
        """Release every complete window of closed slots (:meth:`slots`) not yet released (at
        most ``max_windows``); ``now`` as for :meth:`slots`.

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
                return self._run_locked(max_windows, now)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _run_locked(self, max_windows: int | None, now: datetime | None) -> list[ReleasedSlot]:
        slots = self.slots(now=now)
        out: list[ReleasedSlot] = []
        done = 0
        while max_windows is None or done < max_windows:
            start = self._hist.t
            length = self.config.window_length(self._hist.state().window)
            chunk = slots[start : start + length]
            if len(chunk) < length:
                break
            lost = self._charged_before(chunk)
            out.extend(self._skip_lost(chunk, lost) if lost else self._release_window(chunk))
            done += 1
        return out

    def _cost(self, budget: float) -> Cost:
        """The ledger cost of one window's release for one block."""
        rule = self._spec.accounting.rule
        if self.config.noise is NoiseKind.GAUSSIAN:
            return ZCDP_COSTS[rule.cost_kind](budget)  # kinds without one refused at __init__
        return rule.pure(budget)  # ε-DP: the rule's price of a pure ε (its float read exactly)

    def _release_window(self, chunk: Sequence[StreamSlot]) -> list[ReleasedSlot]:
        before = self._hist.state()
        budget = self._hist.window_budget(before.window)
        cost = self._cost(budget)
        by_slot: dict[int, Grant] = {}
        grants: list[Grant] = []
        try:
            for slot in chunk:
                if slot.blocks:  # exactly this slot's blocks, reserving the window's budget
                    grant = self._request(slot, cost)
                    if grant is not None:
                        grants.append(grant)
                        by_slot[slot.t] = grant
            releases = [self._hist.step_pdf(self._slot_pdf(by_slot.get(s.t))) for s in chunk]
            if releases[-1].released:
                for t, g in by_slot.items():
                    g.draw(
                        cost,
                        label=f"stream release {self.name!r}, window {before.window}",
                        request_id=self._charge_id(chunk[t - chunk[0].t].blocks[0]),
                    )
        except BaseException:
            self._hist = self._fresh()
            self._hist.resume(before)  # nothing in memory changes unless the draws committed
            raise
        finally:
            for g in grants:
                g.close()
        charged = releases[-1].released
        if charged:
            self._answer = [float(x) for x in releases[-1].pdf]
        for slot, rel in zip(chunk, releases, strict=True):
            self._log_slot(slot, rel, read=slot.t in by_slot and charged)
        self._save()
        return [ReleasedSlot(slot=s, release=r) for s, r in zip(chunk, releases, strict=True)]

    def _log_slot(
        self, slot: StreamSlot, rel: HistogramRelease, *, read: bool, lost: bool = False
    ) -> None:
        """Append slot's public log entry (``read``: its blocks were read and charged)."""
        self._log.append(
            {
                "t": rel.t,
                "key": slot.key,
                "window": rel.window,
                "released": rel.released,
                "refused": rel.refused,
                "lost": lost,
                "cost": rel.cost,
                "unit": rel.unit,
                "blocks": list(slot.blocks),
                "read": list(slot.blocks) if read else [],
                "secure_noise": rel.secure_noise,
            }
        )

    def _charged_before(self, chunk: Sequence[StreamSlot]) -> set[int]:
        """The slots of the window whose blocks the ledger says this release already charged
        (a crash after the draws, or a saved state rolled back or deleted)."""
        ledger = self.platform.ledger
        return {s.t for s in chunk if any(ledger.request(self._charge_id(b)) for b in s.blocks)}

    def _skip_lost(self, chunk: Sequence[StreamSlot], lost: set[int]) -> list[ReleasedSlot]:
        """Close a window the ledger says was already charged without reading anything: its
        budget counts again in the accountant, nothing new is published."""
        releases = self._hist.skip_window()
        for slot, rel in zip(chunk, releases, strict=True):
            self._log_slot(slot, rel, read=slot.t in lost, lost=True)
        self._save()
        return [ReleasedSlot(slot=s, release=r) for s, r in zip(chunk, releases, strict=True)]

    def _request(self, slot: StreamSlot, cost: Cost) -> Grant | None:
        """A grant on exactly the slot's blocks, or None when one of them is retired or cannot
        afford ``cost`` in this context (public ledger metadata: the slot is then released as
        an empty one, so one spent block never stalls the release)."""
        try:
            return self.platform.request(
                self.stream,
                blocks=list(slot.blocks),
                budget=cost,
                context=self.context,
                holder=self.holder,
                columns=[self.source.item_column, self.source.user_column],
            )
        except (BudgetExceededError, RetiredBlockError):
            return None

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
        # rows outside the domain, and rows with no user id (no user to bound), are dropped
        keep = (item_arr >= 0) & np.asarray([u is not None for u in users], dtype=bool)
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
