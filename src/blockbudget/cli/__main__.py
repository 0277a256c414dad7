"""``python -m blockbudget.cli``."""

from blockbudget.cli import main

main()
