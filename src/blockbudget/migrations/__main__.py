"""Write the next revision: ``python -m blockbudget.migrations revision -m "what" [--autogenerate]
[--rev-id 0002_short_name]`` (for developers of blockbudget; see this package's docstring).

``--autogenerate`` drafts the operations from the difference between an empty in-memory
SQLite database upgraded to the current head and the metadata of every table set; review and
complete the draft by hand (both dialects, triggers, data)."""

from __future__ import annotations

import argparse

import sqlalchemy as sa


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and write the revision file."""
    from alembic import command

    from blockbudget.migrations.runner import alembic_config, upgrade

    parser = argparse.ArgumentParser(prog="python -m blockbudget.migrations")
    sub = parser.add_subparsers(dest="action", required=True)
    rev = sub.add_parser("revision", help="write a new revision file in versions/")
    rev.add_argument("-m", "--message", required=True)
    rev.add_argument("--autogenerate", action="store_true")
    rev.add_argument("--rev-id", default=None)
    args = parser.parse_args(argv)
    engine = sa.create_engine("sqlite://")
    upgrade(engine)
    config = alembic_config()
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        command.revision(
            config, message=args.message, autogenerate=args.autogenerate, rev_id=args.rev_id
        )


if __name__ == "__main__":
    main()
