"""Part B of the run database: decisions, checkpoint answers, idempotency and the outbox (§10.3).

Parametrised by implementation like ``test_queue.py`` (``QUEUE_IMPLEMENTATIONS``: SQLite and PostgreSQL, each must
pass these). Time is the injected clock; concurrency uses real threads and real processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from piw.store.db.decisions import AnswerRecord, NewDecision
from piw.store.db.outbox import DELIVERY_LEASE_MS, NewNotification
from piw.store.db.rows import NewRun
from piw.store.db.run_database import RunDatabase, open_run_database
from tests.support.paths import REPO
from tests.support.run_databases import QUEUE_IMPLEMENTATIONS, FakeClock, run_database_factory

MakeDatabase = Callable[..., RunDatabase]


@pytest.fixture(params=QUEUE_IMPLEMENTATIONS)
def make_database(request: pytest.FixtureRequest, piw_home: Path) -> MakeDatabase:
    clock = FakeClock()
    databases = run_database_factory(request, request.param, piw_home, clock)

    def make() -> RunDatabase:
        return databases()

    make.clock = clock  # type: ignore[attr-defined]
    return make


def gate(decision_id: str = "dec_1", expires_at: int | None = None, title: str = "Ship it?") -> NewDecision:
    request = {"kind": "human_decision", "decisionId": decision_id, "request": {"title": title}}
    return NewDecision(decision_id, "parent", "approve", "att1", request, "sha256:" + "a" * 64, expires_at,
                       {"choice": "yes", "afterMinutes": 10} if expires_at else None)  # fmt: skip


def continuation(run_id: str, parent: str = "parent") -> NewRun:
    return NewRun(
        run_id=run_id,
        workflow_ref="/work/flow.workflow.py",
        workflow_source={"kind": "file", "path": "/work/flow.workflow.py", "hash": "0" * 64},
        definition_digest="sha256:" + "1" * 64,
        input={"continuation": {"runId": run_id}},
        parent_run_id=parent,
    )


def answer(
    run_id: str, choice: str, *, scope: str = "decision.answer", provenance: str = "human", **extra: Any
) -> AnswerRecord:
    decision = gate() if scope == "decision.answer" else None
    return AnswerRecord(
        scope=scope,  # type: ignore[arg-type]
        key="dec_1" if scope == "decision.answer" else "parent",
        fingerprint=f"fp-{choice}",
        receipt={"continuation": {"runId": run_id}, "provenance": provenance},
        continuation=continuation(run_id),
        decision=decision,
        response={"choice": choice, "provenance": provenance},
        provenance=provenance,
        answered_by="ada@host",
        **extra,
    )


def test_a_gate_records_its_request_once_and_a_rerun_adopts_it(make_database: MakeDatabase) -> None:
    database = make_database()
    first = database.decisions.open_decision(gate(expires_at=5_000, title="first"))
    again = database.decisions.open_decision(
        gate(expires_at=9_999, title="second")
    )  # a rerun opened it again
    assert first == again and again.request["request"]["title"] == "first" and again.expires_at == 5_000
    assert again.status == "open" and database.decisions.decisions_of("parent") == [again]


def test_the_first_answer_wins_and_repeats_adopt_or_conflict(make_database: MakeDatabase) -> None:
    database = make_database()
    won = database.decisions.resolve_answer(answer("c1", "yes", claim_for="me"))
    assert won.outcome == "won" and won.claim is not None and won.claim.run_id == "c1"
    row = database.decisions.get_decision("dec_1")
    assert row is not None and row.status == "resolved" and row.provenance == "human"
    assert row.response == {"choice": "yes", "provenance": "human"} and row.continuation_run_id == "c1"
    assert row.answered_by == "ada@host" and row.request_sha256 == "sha256:" + "a" * 64
    continued = database.decisions.continuation_of("parent")
    assert continued is not None and continued.run_id == "c1" and continued.status == "starting"
    same = database.decisions.resolve_answer(answer("c2", "yes"))
    assert same.outcome == "adopted" and same.receipt == {
        "continuation": {"runId": "c1"},
        "provenance": "human",
    }
    other = database.decisions.resolve_answer(answer("c3", "no"))
    assert other.outcome == "conflict" and other.receipt is not None
    assert (
        database.queue.get("c2") is None and database.queue.get("c3") is None
    )  # the losers left nothing behind
    assert database.decisions.idempotent_receipt("decision.answer", "dec_1", "fp-yes")[0] == "adopted"
    assert database.decisions.idempotent_receipt("decision.answer", "dec_1", "fp-no")[0] == "conflict"
    assert database.decisions.idempotent_receipt("decision.answer", "dec_2", "fp-no") == ("none", None)


def test_a_checkpoint_has_one_continuation(make_database: MakeDatabase) -> None:
    database = make_database()
    assert database.decisions.resolve_answer(answer("c1", "ok", scope="run.answer")).outcome == "won"
    assert database.decisions.resolve_answer(answer("c2", "ok", scope="run.answer")).outcome == "adopted"
    assert database.decisions.resolve_answer(answer("c3", "other", scope="run.answer")).outcome == "conflict"
    row = database.decisions.continuation_of("parent")
    assert row is not None and row.run_id == "c1" and row.status == "queued"  # no claim asked: for a host


def test_a_cancelled_waiting_run_accepts_no_answer(make_database: MakeDatabase) -> None:
    database = make_database()
    database.decisions.open_decision(gate())
    assert database.decisions.cancel_decisions("parent", "ops@host") == 1
    row = database.decisions.get_decision("dec_1")
    assert row is not None and (row.status, row.provenance) == ("cancelled", "cancel")
    assert database.decisions.resolve_answer(answer("c1", "yes")).outcome == "cancelled"
    assert database.decisions.continuation_of("parent") is None
    assert database.decisions.cancel_decisions("parent") == 0


def test_due_decisions_follow_the_fixed_deadline(make_database: MakeDatabase) -> None:
    database, clock = make_database(), make_database.clock  # type: ignore[attr-defined]
    database.decisions.open_decision(gate(expires_at=clock.now + 600_000))
    assert database.decisions.due_decisions() == []
    clock.advance(600_000)
    (due,) = database.decisions.due_decisions()
    assert due.decision_id == "dec_1" and due.on_timeout == {"choice": "yes", "afterMinutes": 10}
    timed = database.decisions.resolve_answer(answer("c1", "yes", provenance="timeout"))
    assert timed.outcome == "won" and database.decisions.due_decisions() == []
    late = database.decisions.resolve_answer(answer("c2", "no"))  # a person after the sweeper
    assert late.outcome == "conflict" and late.provenance == "timeout"


def test_concurrent_answers_from_threads_make_one_continuation(make_database: MakeDatabase) -> None:
    databases = [make_database() for _ in range(8)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(databases))

    def race(index: int) -> None:
        barrier.wait()
        result = databases[index].decisions.resolve_answer(answer(f"c{index}", "yes" if index % 2 else "no"))
        outcomes.append(result.outcome)

    threads = [threading.Thread(target=race, args=(index,)) for index in range(len(databases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("won") == 1 and len(outcomes) == 8
    winner = databases[0].decisions.continuation_of("parent")
    assert winner is not None
    stored = databases[0].decisions.get_decision("dec_1")
    assert stored is not None and stored.continuation_run_id == winner.run_id
    index = int(winner.run_id[1:])
    same = "yes" if index % 2 else "no"
    assert set(outcomes) <= {"won", "adopted", "conflict"}
    assert outcomes.count("adopted") == sum(
        1 for i in range(8) if i != index and ("yes" if i % 2 else "no") == same
    )


RACER = """
import json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from {module} import answer
from piw.store.db.run_database import open_run_database
database = open_run_database(Path({home!r}))
print(json.dumps(database.decisions.resolve_answer(answer(sys.argv[1], sys.argv[2])).outcome))
"""


def test_concurrent_answers_from_processes_make_one_continuation(piw_home: Path) -> None:
    open_run_database(piw_home)  # create the database before the race
    code = RACER.format(repo=str(REPO), module=__name__, home=str(piw_home))
    racers = [
        subprocess.Popen([sys.executable, "-c", code, f"p{i}", "yes" if i % 2 else "no"], stdout=subprocess.PIPE,
                         text=True)
        for i in range(6)
    ]  # fmt: skip
    outcomes = [json.loads(racer.communicate(timeout=60)[0]) for racer in racers]
    assert outcomes.count("won") == 1 and set(outcomes) <= {"won", "adopted", "conflict"}
    database = open_run_database(piw_home)
    winner = database.decisions.continuation_of("parent")
    assert winner is not None
    assert sum(1 for i in range(6) if database.queue.get(f"p{i}") is not None) == 1


def note(index: int = 1, content: str = "hello", target: str | None = "ses_1") -> NewNotification:
    return NewNotification(
        f"ntf_{index}", "run1", "tell", "att1", index, "progress", target, content, "sha256:x"
    )


def test_the_outbox_keeps_one_row_per_node_execution(make_database: MakeDatabase) -> None:
    database = make_database()
    first = database.outbox.queue_notification(note(content="first"))
    rerun = database.outbox.queue_notification(
        note(content="rerun text")
    )  # a rerun after a crash: same index
    assert first == rerun and rerun.content == "first"
    assert [row.notification_id for row in database.outbox.notifications_of("run1")] == ["ntf_1"]


def test_delivery_leases_expire_and_redeliver_the_same_notification(make_database: MakeDatabase) -> None:
    database, clock = make_database(), make_database.clock  # type: ignore[attr-defined]
    database.outbox.queue_notification(note(1))
    database.outbox.queue_notification(note(2))
    database.outbox.queue_notification(note(3, target=None))  # no origin session: a host's
    (held,) = database.outbox.lease_for_run("run1", limit=1)
    assert held.notification_id == "ntf_1" and held.delivery_token
    other = make_database()
    assert [row.notification_id for row in other.outbox.lease_for_run("run1")] == ["ntf_2"]
    assert other.outbox.lease_for_run("run1") == []  # both leased; ntf_3 is not the session's
    clock.advance(DELIVERY_LEASE_MS)
    again = other.outbox.lease_for_run("run1")
    assert [row.notification_id for row in again] == ["ntf_1", "ntf_2"]  # redelivered under new tokens
    assert not database.outbox.mark_delivered(
        "ntf_1", str(held.delivery_token)
    )  # the expired lease was taken over
    assert other.outbox.mark_delivered("ntf_1", str(again[0].delivery_token))
    (hosted,) = database.outbox.lease_untargeted()
    assert hosted.notification_id == "ntf_3" and database.outbox.lease_untargeted() == []
    assert database.outbox.mark_delivered("ntf_3", str(hosted.delivery_token))
    clock.advance(DELIVERY_LEASE_MS)
    assert [row.notification_id for row in database.outbox.lease_for_run("run1")] == ["ntf_2"]
    delivered = [
        row.notification_id
        for row in database.outbox.notifications_of("run1")
        if row.delivered_at is not None
    ]
    assert delivered == ["ntf_1", "ntf_3"]
