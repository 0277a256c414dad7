"""Value types: blocking rules, stream specs, block ids and key formats."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest

from blockbudget import (
    Accounting,
    Budget,
    InvalidBudgetError,
    InvalidRequestError,
    UnknownBlockError,
)
from blockbudget.store import (
    Blocking,
    LatePolicy,
    StreamSpec,
    Unit,
    make_block_id,
    parse_block_id,
)
from blockbudget.store.keys import encode_key, key_ordinal, time_key, user_key

POLICY = Budget(epsilon=1, delta=1e-6)


def spec(name: str = "s", blocking: Blocking | None = None, **kw: object) -> StreamSpec:
    late = kw.pop("late_policy", LatePolicy.REJECT)
    return StreamSpec(
        name,
        POLICY,
        Accounting.BASIC,
        blocking or Blocking.by_time("t"),
        late,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("name", ["flights", "a", "0x", "user_ids-2"])
def test_valid_stream_names(name: str) -> None:
    assert spec(name).name == name


@pytest.mark.parametrize("name", ["", "Flights", "_x", "-x", "a b", "a/b", "é", "a" * 65])
def test_invalid_stream_names(name: str) -> None:
    with pytest.raises(InvalidRequestError, match="stream name"):
        spec(name)


def test_blocking_constructors_and_validation() -> None:
    assert Blocking.by_time("t").window == timedelta(days=1)
    assert Blocking.by_user("uid").ids_per_block == 1000
    assert Blocking.by_attribute("dest").unit is Unit.ATTRIBUTE
    with pytest.raises(InvalidRequestError, match="whole number of seconds"):
        Blocking.by_time("t", timedelta(milliseconds=1500))
    with pytest.raises(InvalidRequestError, match="whole number of seconds"):
        Blocking.by_time("t", timedelta(0))
    with pytest.raises(InvalidRequestError, match="ids_per_block"):
        Blocking.by_user("uid", 0)
    with pytest.raises(InvalidRequestError, match="time blocking only"):
        Blocking(Unit.USER, "uid", window=timedelta(days=1), ids_per_block=5)
    with pytest.raises(InvalidRequestError, match="non-empty"):
        Blocking.by_attribute("")


def test_spec_rules() -> None:
    with pytest.raises(InvalidRequestError, match="user-level blocks"):
        spec(blocking=Blocking.by_user("uid"), late_policy=LatePolicy.NEW_BLOCK)
    with pytest.raises(InvalidRequestError, match="ordered blocks"):
        spec(blocking=Blocking.by_attribute("dest"), close_after=1)
    with pytest.raises(InvalidRequestError, match="close_after"):
        spec(close_after=0)
    with pytest.raises(InvalidBudgetError):  # strong composition needs delta > 0
        StreamSpec(
            "s", Budget(epsilon=1), Accounting.STRONG, Blocking.by_time("t"), LatePolicy.REJECT
        )


def test_spec_json_round_trip() -> None:
    for s in (
        spec(close_after=3, description="d", slack_delta=None),
        spec(blocking=Blocking.by_user("uid", 250), close_after=1),
        spec(blocking=Blocking.by_attribute("dest"), late_policy=LatePolicy.NEW_BLOCK),
        spec(blocking=Blocking.by_time("t", timedelta(hours=6))),
    ):
        assert StreamSpec.from_json(s.to_json()) == s


def test_block_ids() -> None:
    assert make_block_id("f", "2013-01-01", 1) == "f/2013-01-01"
    assert make_block_id("f", "2013-01-01", 3) == "f/2013-01-01#3"
    assert parse_block_id("f/2013-01-01#3") == ("f", "2013-01-01", 3)
    assert parse_block_id("f/New%20York") == ("f", "New%20York", 1)
    for bad in ["nostream", "F/x", "f/", "f/x#1", "f/x#a", 3]:
        with pytest.raises(UnknownBlockError):
            parse_block_id(bad)


def test_time_keys() -> None:
    day = Blocking.by_time("t")
    us = (datetime(2013, 1, 1) - datetime(1970, 1, 1)) // timedelta(microseconds=1)
    info = time_key(day, us)
    assert (info.key, info.window_start, info.window_end) == (
        "2013-01-01",
        datetime(2013, 1, 1),
        datetime(2013, 1, 2),
    )
    six = Blocking.by_time("t", timedelta(hours=6))
    assert time_key(six, us + 6 * 3600 * 10**6).key == "2013-01-01T06:00"
    odd = Blocking.by_time("t", timedelta(seconds=90))
    assert time_key(odd, us + 90 * 10**6).key == "2013-01-01T00:01:30"
    assert key_ordinal(day, "2013-01-05") == key_ordinal(day, date(2013, 1, 5))
    assert key_ordinal(day, datetime(2013, 1, 5, 23, 59)) == key_ordinal(day, "2013-01-05")
    assert key_ordinal(six, "2013-01-01T07:30") == us + 6 * 3600 * 10**6


def test_user_keys() -> None:
    b = Blocking.by_user("uid", 1000)
    assert user_key(b, 0).key == "u000000-000999"
    assert user_key(b, 1_000_000).key == "u1000000-1000999"
    assert (user_key(b, 2000).id_start, user_key(b, 2000).id_end) == (2000, 2999)
    assert key_ordinal(b, 2500) == 2000
    assert key_ordinal(b, "u002000-002999") == 2000
    with pytest.raises(InvalidRequestError):
        key_ordinal(b, -1)
    with pytest.raises(InvalidRequestError, match="no public order"):
        key_ordinal(Blocking.by_attribute("dest"), "JFK")


def test_attribute_key_encoding_is_injective_and_path_safe() -> None:
    values = ["JFK", "New York", "New_York", "a/b", "..", ".", "%41", "A", "é", "a#2"]
    keys = [encode_key(v) for v in values]
    assert len(set(keys)) == len(values)
    assert keys[:3] == ["JFK", "New%20York", "New_York"]
    assert encode_key("..") == "%2E%2E"
    assert all(
        set(k) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-%")
        for k in keys
    )
