"""An opaque block id is resolved without listing the stream again: the first look-up lists
the stream once, later ones read only the blocks the ledger registered since."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from userids_support import make_known

from blockbudget.budget import Budget
from blockbudget.errors import UnknownBlockError
from blockbudget.platform import Platform
from blockbudget.service.blocknames import BlockNames
from blockbudget.store import Blocking, LatePolicy, Unit


def test_new_blocks_resolve_without_relisting_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = Platform(tmp_path / "home")
    p.create_stream(
        "u",
        policy=Budget(epsilon=1),
        blocking=Blocking(unit=Unit.USER, column="uid", ids_per_block=10),
        late_policy=LatePolicy.DROP,
    )
    p.ingest("u", pd.DataFrame({"uid": [1, 15]}))
    make_known(p, "u")  # a user stream is gated until its maximum id is released
    names = BlockNames(p, p.ledger.engine)
    first, second = (m.block_id for m in p.store.blocks("u"))
    assert names.resolve("u", names.opaque(first)) == first  # lists the stream once
    listings: list[str] = []

    def listing(what: str) -> Callable[..., list[object]]:
        def record(*args: object, **kwargs: object) -> list[object]:
            listings.append(what)
            return []

        return record

    monkeypatch.setattr(p.store, "blocks", listing("store"))
    monkeypatch.setattr(p.ledger, "blocks", listing("ledger"))
    assert names.resolve("u", names.opaque(second).partition("/")[2]) == second
    p.ingest("u", pd.DataFrame({"uid": [25]}))  # a new block after the listing
    (third,) = (b for b, _ in p.ledger.added_blocks(0)[0] if b not in (first, second))
    assert names.resolve("u", names.opaque(third)) == third
    with pytest.raises(UnknownBlockError, match="has no block 'u/b0000"):
        names.resolve("u", "u/b" + "0" * 24)
    assert listings == []
    p.close()
