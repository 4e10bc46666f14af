"""Answers, timeouts and notifications across hosts on PostgreSQL, on the server's clock, from separate processes
(multi-host.md §5 tests 12 and 13): one winner, one continuation, each notification delivered once."""

from __future__ import annotations

import json
import subprocess
import sys

from piw.store.db.outbox import NewNotification
from piw.store.db.run_database import open_pg_run_database
from piw.store.pg.connection import PgDatabase
from piw.store.pg.setting import DatabaseSetting
from tests.support.paths import REPO

PRELUDE = """
import json, sys
sys.path.insert(0, {repo!r})
from piw.store.db.run_database import open_pg_run_database
from piw.store.pg.connection import PgDatabase
from piw.store.pg.setting import DatabaseSetting
database = open_pg_run_database(PgDatabase.open(DatabaseSetting({url!r}, {schema!r}), pool_size=2))
"""
ANSWER = """
from tests.store.db.test_decisions import answer
print(json.dumps(database.decisions.resolve_answer(answer(sys.argv[1], sys.argv[2], provenance=sys.argv[3])).outcome))
"""
DELIVER = """
delivered = []
for _ in range(40):
    for row in database.outbox.lease_untargeted(limit=3):
        assert database.outbox.mark_delivered(row.notification_id, row.delivery_token)
        delivered.append(row.notification_id)
print(json.dumps(delivered))
"""


def _spawn(setting: DatabaseSetting, body: str, *args: str) -> subprocess.Popen[str]:
    code = PRELUDE.format(repo=str(REPO), url=setting.url, schema=setting.schema) + body
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, cwd=REPO)


def test_answers_and_a_timeout_sweeper_on_several_hosts_make_one_continuation(
    pg_setting: DatabaseSetting,
) -> None:
    database = open_pg_run_database(PgDatabase.open(pg_setting))
    racers = [
        _spawn(pg_setting, ANSWER, f"p{i}", "yes" if i % 2 else "no", "timeout" if i == 0 else "human")
        for i in range(5)
    ]
    outcomes = [json.loads(racer.communicate(timeout=90)[0]) for racer in racers]
    assert outcomes.count("won") == 1 and set(outcomes) <= {"won", "adopted", "conflict"}
    winner = database.decisions.continuation_of("parent")
    assert winner is not None
    decision = database.decisions.get_decision("dec_1")
    assert (
        decision is not None
        and decision.status == "resolved"
        and decision.continuation_run_id == winner.run_id
    )
    assert sum(1 for i in range(5) if database.queue.get(f"p{i}") is not None) == 1  # the losers left no row


def test_two_hosts_deliver_each_untargeted_notification_once(pg_setting: DatabaseSetting) -> None:
    database = open_pg_run_database(PgDatabase.open(pg_setting))
    for index in range(1, 31):
        database.outbox.queue_notification(
            NewNotification(
                f"ntf_{index:02d}", "run1", "tell", "att1", index, "progress", None, "hi", "sha256:x"
            )
        )
    hosts = [_spawn(pg_setting, DELIVER) for _ in range(2)]
    delivered = [json.loads(host.communicate(timeout=90)[0]) for host in hosts]
    ids = [ident for each in delivered for ident in each]
    assert sorted(ids) == [f"ntf_{index:02d}" for index in range(1, 31)]  # all of them, none twice
    assert all(row.delivered_at is not None for row in database.outbox.notifications_of("run1"))
