"""``python -m blockbudget.cli``."""

from blockbudget.cli import app

app()
