"""The run database under test, in each implementation: ``sqlite`` (``piw.sqlite``) and ``postgres`` (a fresh
schema on the test server of ``tests/support/pg.py``), both with an injected clock so no test sleeps.

The queue and decision suites (``tests/store/db/test_queue.py``, ``test_decisions.py``) are parametrised by
:data:`QUEUE_IMPLEMENTATIONS`; every implementation must pass every test (``docs/many-machines.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from piw.store.db.database import close_databases
from piw.store.db.run_database import RunDatabase, open_pg_run_database, open_run_database


class FakeClock:
    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


QUEUE_IMPLEMENTATIONS = ("sqlite", "postgres")
"""The run-database implementations the conformance suites run against."""


def run_database_factory(
    request: pytest.FixtureRequest, implementation: str, home: Path, clock: FakeClock
) -> Callable[[], RunDatabase]:
    """A maker of run databases of one implementation that all share one store and ``clock``."""
    if implementation == "sqlite":
        request.addfinalizer(close_databases)
        return lambda: open_run_database(home, clock)
    from piw.store.pg.connection import PgDatabase

    setting = request.getfixturevalue("pg_setting")  # (its finalizer closes the pool and drops the schema)
    db = PgDatabase.open(setting)
    return lambda: open_pg_run_database(db, clock)
