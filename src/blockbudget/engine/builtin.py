"""Registers the built-in engines (each imports its heavy library only when created)."""

from __future__ import annotations

from blockbudget.engine.base import Engine, register_engine


def _duckdb() -> Engine:
    from blockbudget.engine.duckdb_engine import DuckDBEngine

    return DuckDBEngine()


def _arrow() -> Engine:
    from blockbudget.engine.arrow_engine import ArrowEngine

    return ArrowEngine()


def _ray() -> Engine:
    from blockbudget.engine.ray_engine import RayEngine

    return RayEngine()


register_engine("duckdb", _duckdb)
register_engine("arrow", _arrow)
register_engine("ray", _ray)
