"""Channel posts, answer tokens and poll cursors on PostgreSQL (``docs/channels.md``, ``docs/many-machines.md``).

The rows and rules are SQLite mode's (:class:`~piw.channels.store.ChannelStore` through the PostgreSQL dialect):
every lease and token check is a compare-and-set ``UPDATE`` on one row, so two hosts never both send one post,
poll one bot or use one token. Tables: migration ``0005_channels.sql``.
"""

from __future__ import annotations

from typing import ClassVar

from piw.channels.store import ChannelStore
from piw.store.db.dialect import POSTGRES, Dialect
from piw.store.pg.clock import ClockedDatabase


class PgChannelStore(ChannelStore):
    """:class:`~piw.channels.store.ChannelStore` over PostgreSQL."""

    dialect: ClassVar[Dialect] = POSTGRES

    def __init__(self, db: ClockedDatabase) -> None:
        self.db = db  # type: ignore[assignment]  # (transaction()/connection() shaped like SQLite's Database)
        self.clock = db.clock
