"""The registered DP statistics, one module each (see :mod:`blockbudget.query.statistic`).

Each module defines a :class:`~blockbudget.query.statistic.DPStatistic` and ends with
``STATISTIC = register_statistic(...)``; :data:`~blockbudget.query.statistic.STATISTIC_MODULES`
lists them.
"""
