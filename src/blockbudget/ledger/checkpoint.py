"""Verified checkpoints of the ledger's replayed state, so that :meth:`Ledger.verify` replays
only the events after the last one (see :mod:`blockbudget.ledger.verify`).

A checkpoint is one row of ``ledger_checkpoints``: the seq and hash of the last event a
successful verification replayed, the replayed state at that point — registered and closed
contexts, every block's registration, every (block, context) vector, the open reservations and
a multiset hash of the closed ones — as compressed canonical JSON, and the SHA-256 digest of
that JSON. It is written in a transaction of its own after the verification succeeded (a crash
before its commit leaves the previous checkpoint), and it is derived data: an incremental
verification trusts the log up to it, so tampering with events before it (and the checkpoint
to match) is found only by a full replay (``verify(full=True)``).

Closed reservations are not kept one by one (a long log holds millions): the replay and the
table comparison each add one element per closed reservation to a multiset hash — LtHash
(Bellare and Micciancio, "A New Paradigm for Collision-Free Hashing: Incrementality at Reduced
Cost", EUROCRYPT 1997, §5 "AdHash"/"LtHash"; parameters of Lewi, Kim, Maykov and Weis,
"Securing Update Propagation with Homomorphic Hashing", 2019, §3: 1024 lanes of 16 bits) — and
the two hashes must be equal.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, delete, insert, select

from blockbudget.ledger.schema import checkpoints

#: Lanes of the multiset hash (16 bits each): 2048 bytes of SHAKE-256 per element.
LANES = 1024

#: Version of the checkpoint's JSON layout.
STATE_VERSION = 1


class MultisetHash:
    """An order-independent hash of a multiset of byte strings (LtHash16, see the module
    docstring): the lane-wise sum, modulo 2¹⁶, of each element's 1024-lane SHAKE-256 digest.

    Example:
        >>> a, b = MultisetHash(), MultisetHash()
        >>> a.add(b"x"); a.add(b"y"); b.add(b"y"); b.add(b"x")
        >>> a == b and a.count == 2
        True
    """

    def __init__(self, lanes: bytes | None = None, count: int = 0) -> None:
        self.lanes = (
            np.zeros(LANES, dtype=np.uint16)
            if lanes is None
            else np.frombuffer(lanes, dtype=np.uint16).copy()
        )
        self.count = count

    def add(self, item: bytes) -> None:
        digest = hashlib.shake_256(item).digest(2 * LANES)
        self.lanes += np.frombuffer(digest, dtype=np.uint16)  # wraps modulo 2**16
        self.count += 1

    def hex(self) -> str:
        return self.lanes.tobytes().hex()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultisetHash):
            return NotImplemented
        return self.count == other.count and bool(np.array_equal(self.lanes, other.lanes))

    __hash__ = None  # type: ignore[assignment]


def closed_element(rid: str, state: str, blocks: list[str]) -> bytes:
    """The multiset element of one closed reservation: its id, final state and blocks."""
    return json.dumps([rid, state, sorted(blocks)], separators=(",", ":")).encode()


@dataclass(frozen=True)
class Checkpoint:
    """A stored checkpoint: the last verified event's seq and hash, and the state then."""

    seq: int
    hash: str
    digest: str
    state: dict[str, Any]


def encode_state(state: dict[str, Any]) -> tuple[bytes, str]:
    """(compressed canonical JSON, its SHA-256 digest) of a replayed state."""
    text = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    return zlib.compress(text, 6), hashlib.sha256(text).hexdigest()


def load_latest(conn: Connection) -> tuple[Checkpoint | None, str | None]:
    """The newest checkpoint, or (None, why it cannot be used) — (None, None) when there is
    none at all."""
    row = conn.execute(select(checkpoints).order_by(checkpoints.c.seq.desc()).limit(1)).first()
    if row is None:
        return None, None
    try:
        text = zlib.decompress(bytes(row.state))
    except zlib.error:
        return None, f"checkpoint at seq {row.seq} is corrupt (its state does not decompress)"
    if hashlib.sha256(text).hexdigest() != row.digest:
        return None, f"checkpoint at seq {row.seq} is corrupt (its state does not match its digest)"
    state = json.loads(text)
    if state.get("version") != STATE_VERSION or state.get("seq") != int(row.seq):
        return None, f"checkpoint at seq {row.seq} has an unknown layout"
    return Checkpoint(int(row.seq), str(row.hash), str(row.digest), state), None


def store(conn: Connection, *, seq: int, hash_: str, state: dict[str, Any], now: float) -> bool:
    """Store a checkpoint at ``seq`` in the caller's (write) transaction, replacing the older
    ones and one at the same seq (a full replay rewrites a corrupt checkpoint). Nothing is
    stored when a later one exists. Returns whether it was stored."""
    newest = conn.execute(select(checkpoints.c.seq).order_by(checkpoints.c.seq.desc())).first()
    if newest is not None and int(newest[0]) > seq:
        return False
    blob, digest = encode_state(state)
    conn.execute(delete(checkpoints).where(checkpoints.c.seq <= seq))
    conn.execute(
        insert(checkpoints).values(seq=seq, hash=hash_, digest=digest, state=blob, created_at=now)
    )
    return True
