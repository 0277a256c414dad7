"""The authenticator's key cache follows the cache rule: an entry never reflects a state older
than the last committed change that invalidated it. A lookup that began before
``invalidate()`` (it may have read the principal before the change) neither fills the cache
nor answers requests that arrive after the invalidation."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from blockbudget.service.access import Authenticator
from blockbudget.service.auth import KeyStore, Permission, Principal, Role

OLD = Principal("ana", Role.ANALYST, ("team-a",), (("flights", Permission.READ),))
NEW = Principal("ana", Role.ANALYST, ("team-a",), ())  # its read access revoked


class SlowKeys:
    """The first lookup reads the old principal and is held until ``gate`` is set; every later
    lookup reads the new one."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.gate = threading.Event()

    def authenticate(self, key: str) -> Principal | None:
        self.calls += 1
        if self.calls == 1:
            self.started.set()
            assert self.gate.wait(30)
            return OLD
        return NEW


def request(key: str) -> Any:
    return SimpleNamespace(headers={"x-api-key": key}, state=SimpleNamespace())


async def wait_for(condition: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


def test_a_request_after_invalidate_never_gets_a_lookup_begun_before_it() -> None:
    keys = SlowKeys()
    auth = Authenticator(cast(KeyStore, keys), ttl_seconds=60)

    async def scenario() -> tuple[Principal, Principal, Principal]:
        before = asyncio.create_task(auth(request("k")))
        await wait_for(keys.started.is_set, 30)
        auth.invalidate()  # the revocation committed; this process drops its cache
        after = asyncio.create_task(auth(request("k")))
        await wait_for(lambda: keys.calls >= 2, 2)  # its own lookup (joining would not call)
        keys.gate.set()
        first, second = await asyncio.gather(before, after)
        third = await auth(request("k"))  # from the cache: the new state, not the old
        return first, second, third

    first, second, third = asyncio.run(scenario())
    assert first == OLD  # began before the change: may answer with what it read
    assert second == NEW
    assert third == NEW and keys.calls == 2
