"""What the migration tests share: the revisions an upgrade from nothing applies, in order."""

from __future__ import annotations

from blockbudget.migrations import script_directory

#: Every revision from the baseline to the head, oldest first.
CHAIN: tuple[str, ...] = tuple(reversed([r.revision for r in script_directory().walk_revisions()]))
