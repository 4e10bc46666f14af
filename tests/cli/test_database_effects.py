"""Database mode carries effect classes and shared rate limits (``docs/effects.md``, ``docs/rate-limits.md``).

An interrupted ``effect="once"`` action parks its run ``outcome_unknown`` in the PostgreSQL queue (no host claims
it), ``piw runs --status unknown`` lists it from the database, and ``piw resolve`` continues it; the rate-limit
bucket of migration 0002 is one limit for two hosts (two pools on the same schema). Real PostgreSQL
(``tests/support/pg.py``) and real ``piw`` processes.
"""

from __future__ import annotations

import json
from pathlib import Path

from piw.config.rate_limits import RateLimit
from piw.store.db.database import now_ms
from piw.store.pg.connection import PgDatabase
from piw.store.pg.rate_limits import PgRateLimits
from piw.store.pg.setting import DatabaseSetting
from tests.support.cli import Cli
from tests.support.effects import count, effect_flow, effect_input, killed_mid_action
from tests.support.pg import PgServer
from tests.support.runs import WorkflowMaker


def test_once_parks_outcome_unknown_in_the_database_and_resolve_continues_it(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path, pg_server: PgServer, pg_setting: DatabaseSetting
) -> None:
    env = {"PIW_DATABASE": pg_setting.url + f"?schema={pg_setting.schema}"}
    raw = effect_input(tmp_path)
    run_id = killed_mid_action(cli, effect_flow(make_workflow, '"once"'), raw, env)
    Path(raw["release"]).write_text("")
    resumed = cli("resume", run_id, env=env)
    assert resumed.returncode == 1 and f"piw resolve {run_id}" in resumed.stdout, resumed.stderr
    row = pg_server.execute(
        f'SELECT status, park_reason FROM "{pg_setting.schema}".run_queue WHERE run_id = %s', (run_id,)
    )
    assert row == [("parked", "outcome_unknown")]
    listed = cli.json("runs", "--status", "unknown", env=env)
    assert [entry["runId"] for entry in listed] == [run_id]
    done = cli("resolve", run_id, "done", "--output", '{"sent": true}', "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == {"after": {"sent": True}}
    assert count(raw["counter"]) == 1


def test_one_bucket_for_two_hosts(pg_setting: DatabaseSetting) -> None:
    limit = RateLimit(concurrency=1, requests_per_minute=600)
    one, two = PgDatabase.open(pg_setting), PgDatabase.open(pg_setting)
    try:
        first, second = PgRateLimits(one), PgRateLimits(two)
        slot, wait = first.try_acquire("p", limit)
        assert slot is not None and wait == 0
        assert second.try_acquire("p", limit)[0] is None  # the other host waits for the one slot
        assert second.snapshot("p", limit)["inFlight"] == 1
        first.release("p", slot, limit, tokens=10)
        again, _ = second.try_acquire("p", limit)
        assert again is not None
        second.release("p", again, limit, tokens=10)
        first.pause("p", limit, now_ms() + 5_000, "429 slow down")  # a 429 seen by one host
        blocked, wait = second.try_acquire("p", limit)
        assert blocked is None and wait > 1_000  # holds the other one back too
        assert second.snapshot("p", limit)["pauseReason"] == "429 slow down"
        tokens = RateLimit(tokens_per_minute=100)
        spent, _ = first.try_acquire("t", tokens)
        assert spent is not None
        first.release("t", spent, tokens, tokens=150)  # more than the minute's tokens
        assert second.snapshot("t", tokens)["tokensLeft"] < 0
        assert second.try_acquire("t", tokens)[0] is None  # every host waits for the refill
    finally:
        one.close()
        two.close()
