"""Tasks: work that the configured scheduler decides on the live ledger."""
