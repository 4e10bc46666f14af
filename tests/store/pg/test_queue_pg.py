"""The PostgreSQL queue on the server's own clock (no pinned test clock), across processes: what the shared
conformance suite (``tests/store/db/test_queue.py``, pinned clock) cannot show (``docs/many-machines.md``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from piw.errors import ClaimLost, RunLocked
from piw.store.db.rows import LEASE_MS, NewRun
from piw.store.db.run_database import open_pg_run_database
from piw.store.db.serve_keys import serve_key
from piw.store.pg.connection import PgDatabase
from piw.store.pg.queue import PostgresQueue
from piw.store.pg.setting import DatabaseSetting
from tests.support.paths import REPO
from tests.support.pg import PgServer


def new_run(run_id: str, path: str = "/work/flow.workflow.py") -> NewRun:
    return NewRun(run_id, path, {"kind": "file", "path": path, "hash": "0" * 64}, "sha256:1", {"n": 1})


CLAIMER = """
import json, sys
sys.path.insert(0, {repo!r})
from piw.store.db.run_database import open_pg_run_database
from piw.store.pg.connection import PgDatabase
from piw.store.pg.setting import DatabaseSetting
queue = open_pg_run_database(PgDatabase.open(DatabaseSetting({url!r}, {schema!r}), pool_size=2)).queue
claimed = []
while (claim := queue.claim_next(sys.argv[1])) is not None:
    claimed.append([claim.run_id, claim.generation])
print(json.dumps(claimed))
"""


def test_claimers_in_four_processes_take_each_row_once(
    pg_server: PgServer, pg_setting: DatabaseSetting
) -> None:
    queue = open_pg_run_database(PgDatabase.open(pg_setting)).queue
    for index in range(60):
        queue.enqueue(new_run(f"r{index:03d}"))
    code = CLAIMER.format(repo=str(REPO), url=pg_setting.url, schema=pg_setting.schema)
    claimers = [
        subprocess.Popen([sys.executable, "-c", code, f"host-{i}:1:1"], stdout=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    claimed = [json.loads(claimer.communicate(timeout=90)[0]) for claimer in claimers]
    ids = [run_id for each in claimed for run_id, _ in each]
    assert sorted(ids) == [f"r{index:03d}" for index in range(60)]  # every row, none twice
    assert {generation for each in claimed for _, generation in each} == {1}
    rows = pg_server.execute(
        f'SELECT count(*), count(DISTINCT runner_id) FROM "{pg_setting.schema}".run_queue WHERE status = %s',
        ("starting",),
    )
    assert rows[0][0] == 60


def test_leases_follow_the_database_clock_not_the_hosts(
    pg_server: PgServer, pg_setting: DatabaseSetting
) -> None:
    """A host whose clock runs 60 s fast (multi-host.md §5 test 9) neither takes a live lease early nor renews an
    expired one: every comparison is ``now_ms()`` on the server."""
    db = PgDatabase.open(pg_setting)
    a = open_pg_run_database(db).queue
    skewed = PostgresQueue(db)
    skewed.clock = lambda: int(time.time() * 1000) + 60_000  # what it would believe, were it asked
    a.enqueue(new_run("r1"))
    before = db.server_now_ms()
    claim = a.claim_next("elsewhere.example:1:1")
    assert claim is not None and before + LEASE_MS <= claim.expires_at <= db.server_now_ms() + LEASE_MS
    with pytest.raises(RunLocked):
        skewed.claim_run("r1", "skewed.example:2:2")
    assert skewed.claim_next("skewed.example:2:2") is None
    assert skewed.fence(claim).status == "starting"  # the holder's claim is live for the server
    pg_server.execute(
        f'UPDATE "{pg_setting.schema}".run_queue SET claim_expires_at = "{pg_setting.schema}".now_ms() - 1'
    )  # the lease runs out on the server's clock
    with pytest.raises(ClaimLost) as lost:
        a.renew(claim)
    assert lost.value.reason == "expired"
    taken = skewed.claim_next("skewed.example:2:2")
    assert taken is not None and taken.generation == 2 and taken.taken_from == "elsewhere.example:1:1"
    with pytest.raises(ClaimLost) as fenced:
        a.fence(claim)
    assert fenced.value.reason == "generation_changed"


def test_serve_keys_limit_what_a_host_claims(pg_setting: DatabaseSetting) -> None:
    db = PgDatabase.open(pg_setting)
    queue = open_pg_run_database(db).queue
    queue.enqueue(new_run("a", "/flows/a.workflow.py"))
    other = {"kind": "file", "path": "/flows/b.workflow.py", "hash": "1" * 64}  # another file (version)
    queue.enqueue(NewRun("b", "/flows/b.workflow.py", other, "sha256:1", {"n": 1}))
    only_b = PostgresQueue(db, serve_keys=[serve_key(other, "sha256:1")])  # (the path is no part of the key)
    claim = only_b.claim_next("host:1:1")
    assert claim is not None and claim.run_id == "b" and only_b.claim_next("host:1:1") is None
    assert PostgresQueue(db, serve_keys=[]).claim_next("host:1:1") is None
    rest = queue.claim_next("host:1:1")
    assert rest is not None and rest.run_id == "a"


def test_pause_and_cancel_requests_notify_the_flags_channel(pg_setting: DatabaseSetting) -> None:
    import psycopg

    db = PgDatabase.open(pg_setting)
    queue = open_pg_run_database(db).queue
    queue.enqueue(new_run("r1"))
    with psycopg.connect(pg_setting.url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{db.channel("flags")}"')
        queue.request_pause("r1")
        queue.request_cancel("r1")
        got = [(note.channel, note.payload) for note in listener.notifies(timeout=5, stop_after=2)]
    assert got == [(f"{pg_setting.schema}_flags", "r1")] * 2


def test_claim_next_takes_a_dead_holder_on_this_host_at_once(pg_setting: DatabaseSetting) -> None:
    from piw.store.db.holders import runner_id

    queue = open_pg_run_database(PgDatabase.open(pg_setting)).queue
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        holder = runner_id(child.pid)
        queue.enqueue(new_run("r1"), claim_for=holder)
        assert queue.claim_next(runner_id()) is None  # alive, its lease live: nobody takes it
    finally:
        child.kill()
        child.wait()
    taken = queue.claim_next(runner_id())
    assert taken is not None and taken.run_id == "r1" and taken.generation == 2 and taken.taken_from == holder
