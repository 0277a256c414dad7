"""The registered statistics by name, with their one-line summaries: the registration list.

Each entry names a module of :mod:`blockbudget.query.statistics` (named as its statistic) that
defines and registers a :class:`~blockbudget.query.statistic.DPStatistic`, and the summary the
CLI shows for its ``blockbudget query <name>`` command. This module imports nothing, so the CLI
lists its commands without loading the statistics (or pandas). Registering a new statistic:
its module, and one line here.

Example:
    >>> [name for name, _ in STATISTICS][:3]
    ['count', 'sum', 'mean']
"""

STATISTICS: tuple[tuple[str, str], ...] = (
    ("count", "DP count of rows (or of a column's non-null values)."),
    ("sum", "DP sum of a clipped numeric column."),
    ("mean", "DP mean of a clipped numeric column."),
    ("variance", "DP variance of a clipped numeric column."),
    ("quantiles", "DP quantiles from a noisy histogram between the bounds."),
    ("histogram", "DP counts over declared categories."),
    ("top_k", "DP top-k of declared categories by count (one-shot Gumbel; ranks only)."),
    ("covariance", "DP covariance and correlation of two clipped numeric columns."),
)
