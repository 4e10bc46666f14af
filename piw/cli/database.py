"""``--database URL``: the option every command that touches runs takes (``docs/many-machines.md``).

The command resolves its place once, first (:func:`command_home`): ``--database`` > ``PIW_DATABASE`` >
``config.toml [database]`` > SQLite in ``PIW_HOME``; everything it calls then reads and writes runs there
(``piw.store.place``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from piw.store.home import piw_home

DatabaseOption = Annotated[
    str | None,
    typer.Option(
        "--database",
        metavar="URL",
        help="The PostgreSQL database that holds the runs (postgresql://…). Precedence: --database > "
        "PIW_DATABASE > config.toml [database] > SQLite in PIW_HOME (the default).",
    ),
]


def command_home(database: str | None) -> Path:
    """``PIW_HOME``, with where this command's runs live resolved (SQLite there, or the database)."""
    from piw.store.place import use

    home = piw_home()
    use(home, database)
    return home


def where_runs_live(home: Path) -> str:
    """``PIW_HOME``, or the database URL with its password hidden."""
    from piw.store.place import database_place

    place = database_place(home)
    return str(home) if place is None else place.setting.redacted()
