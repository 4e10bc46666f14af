"""Part B of the queue protocol: decisions, checkpoint answers, idempotency and the outbox (§10.3).

Parametrised by implementation like ``test_queue.py`` (a PostgreSQL queue joins ``QUEUE_IMPLEMENTATIONS`` there
and must pass these too). Time is the injected clock; concurrency uses real threads and real processes.
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

from piw.store.db.database import close_databases
from piw.store.db.decisions import AnswerRecord, NewDecision
from piw.store.db.outbox import DELIVERY_LEASE_MS, NewNotification
from piw.store.db.queue import NewRun, RunQueue, SqliteQueue
from tests.store.db.test_queue import QUEUE_IMPLEMENTATIONS, FakeClock
from tests.support.paths import REPO

MakeQueue = Callable[..., RunQueue]


@pytest.fixture(params=QUEUE_IMPLEMENTATIONS, ids=lambda impl: impl.__name__.strip("_"))
def make_queue(request: pytest.FixtureRequest, piw_home: Path) -> MakeQueue:
    clock = FakeClock()
    impl = request.param

    def make() -> RunQueue:
        return impl(piw_home, clock)

    make.clock = clock  # type: ignore[attr-defined]
    request.addfinalizer(close_databases)
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


def test_a_gate_records_its_request_once_and_a_rerun_adopts_it(make_queue: MakeQueue) -> None:
    queue = make_queue()
    first = queue.open_decision(gate(expires_at=5_000, title="first"))
    again = queue.open_decision(gate(expires_at=9_999, title="second"))  # a rerun opened it again
    assert first == again and again.request["request"]["title"] == "first" and again.expires_at == 5_000
    assert again.status == "open" and queue.decisions_of("parent") == [again]


def test_the_first_answer_wins_and_repeats_adopt_or_conflict(make_queue: MakeQueue) -> None:
    queue = make_queue()
    won = queue.resolve_answer(answer("c1", "yes", claim_for="me"))
    assert won.outcome == "won" and won.claim is not None and won.claim.run_id == "c1"
    row = queue.get_decision("dec_1")
    assert row is not None and row.status == "resolved" and row.provenance == "human"
    assert row.response == {"choice": "yes", "provenance": "human"} and row.continuation_run_id == "c1"
    assert row.answered_by == "ada@host" and row.request_sha256 == "sha256:" + "a" * 64
    continued = queue.continuation_of("parent")
    assert continued is not None and continued.run_id == "c1" and continued.status == "starting"
    same = queue.resolve_answer(answer("c2", "yes"))
    assert same.outcome == "adopted" and same.receipt == {
        "continuation": {"runId": "c1"},
        "provenance": "human",
    }
    other = queue.resolve_answer(answer("c3", "no"))
    assert other.outcome == "conflict" and other.receipt is not None
    assert queue.get("c2") is None and queue.get("c3") is None  # the losers left nothing behind
    assert queue.idempotent_receipt("decision.answer", "dec_1", "fp-yes")[0] == "adopted"
    assert queue.idempotent_receipt("decision.answer", "dec_1", "fp-no")[0] == "conflict"
    assert queue.idempotent_receipt("decision.answer", "dec_2", "fp-no") == ("none", None)


def test_a_checkpoint_has_one_continuation(make_queue: MakeQueue) -> None:
    queue = make_queue()
    assert queue.resolve_answer(answer("c1", "ok", scope="run.answer")).outcome == "won"
    assert queue.resolve_answer(answer("c2", "ok", scope="run.answer")).outcome == "adopted"
    assert queue.resolve_answer(answer("c3", "other", scope="run.answer")).outcome == "conflict"
    row = queue.continuation_of("parent")
    assert row is not None and row.run_id == "c1" and row.status == "queued"  # no claim asked: for a host


def test_a_cancelled_waiting_run_accepts_no_answer(make_queue: MakeQueue) -> None:
    queue = make_queue()
    queue.open_decision(gate())
    assert queue.cancel_decisions("parent", "ops@host") == 1
    row = queue.get_decision("dec_1")
    assert row is not None and (row.status, row.provenance) == ("cancelled", "cancel")
    assert queue.resolve_answer(answer("c1", "yes")).outcome == "cancelled"
    assert queue.continuation_of("parent") is None
    assert queue.cancel_decisions("parent") == 0


def test_due_decisions_follow_the_fixed_deadline(make_queue: MakeQueue) -> None:
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.open_decision(gate(expires_at=clock.now + 600_000))
    assert queue.due_decisions() == []
    clock.advance(600_000)
    (due,) = queue.due_decisions()
    assert due.decision_id == "dec_1" and due.on_timeout == {"choice": "yes", "afterMinutes": 10}
    timed = queue.resolve_answer(answer("c1", "yes", provenance="timeout"))
    assert timed.outcome == "won" and queue.due_decisions() == []
    late = queue.resolve_answer(answer("c2", "no"))  # a person after the sweeper
    assert late.outcome == "conflict" and late.provenance == "timeout"


def test_concurrent_answers_from_threads_make_one_continuation(make_queue: MakeQueue) -> None:
    queues = [make_queue() for _ in range(8)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(queues))

    def race(index: int) -> None:
        barrier.wait()
        result = queues[index].resolve_answer(answer(f"c{index}", "yes" if index % 2 else "no"))
        outcomes.append(result.outcome)

    threads = [threading.Thread(target=race, args=(index,)) for index in range(len(queues))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("won") == 1 and len(outcomes) == 8
    winner = queues[0].continuation_of("parent")
    assert winner is not None
    stored = queues[0].get_decision("dec_1")
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
from piw.store.db.queue import SqliteQueue
queue = SqliteQueue.open(Path({home!r}))
print(json.dumps(queue.resolve_answer(answer(sys.argv[1], sys.argv[2])).outcome))
"""


def test_concurrent_answers_from_processes_make_one_continuation(piw_home: Path) -> None:
    SqliteQueue.open(piw_home)  # create the database before the race
    code = RACER.format(repo=str(REPO), module=__name__, home=str(piw_home))
    racers = [
        subprocess.Popen([sys.executable, "-c", code, f"p{i}", "yes" if i % 2 else "no"], stdout=subprocess.PIPE,
                         text=True)
        for i in range(6)
    ]  # fmt: skip
    outcomes = [json.loads(racer.communicate(timeout=60)[0]) for racer in racers]
    assert outcomes.count("won") == 1 and set(outcomes) <= {"won", "adopted", "conflict"}
    queue = SqliteQueue.open(piw_home)
    winner = queue.continuation_of("parent")
    assert winner is not None
    assert sum(1 for i in range(6) if queue.get(f"p{i}") is not None) == 1


def note(index: int = 1, content: str = "hello", target: str | None = "ses_1") -> NewNotification:
    return NewNotification(
        f"ntf_{index}", "run1", "tell", "att1", index, "progress", target, content, "sha256:x"
    )


def test_the_outbox_keeps_one_row_per_node_execution(make_queue: MakeQueue) -> None:
    queue = make_queue()
    first = queue.queue_notification(note(content="first"))
    rerun = queue.queue_notification(note(content="rerun text"))  # a rerun after a crash: same index
    assert first == rerun and rerun.content == "first"
    assert [row.notification_id for row in queue.notifications_of("run1")] == ["ntf_1"]


def test_delivery_leases_expire_and_redeliver_the_same_notification(make_queue: MakeQueue) -> None:
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.queue_notification(note(1))
    queue.queue_notification(note(2))
    queue.queue_notification(note(3, target=None))  # no origin session: a host's
    (held,) = queue.lease_notifications(run_id="run1", limit=1)
    assert held.notification_id == "ntf_1" and held.delivery_token
    other = make_queue()
    assert [row.notification_id for row in other.lease_notifications(run_id="run1")] == ["ntf_2"]
    assert other.lease_notifications(run_id="run1") == []  # both leased; ntf_3 is not the session's
    clock.advance(DELIVERY_LEASE_MS)
    again = other.lease_notifications(run_id="run1")
    assert [row.notification_id for row in again] == ["ntf_1", "ntf_2"]  # redelivered under new tokens
    assert not queue.mark_delivered("ntf_1", str(held.delivery_token))  # the expired lease was taken over
    assert other.mark_delivered("ntf_1", str(again[0].delivery_token))
    (hosted,) = queue.lease_notifications(untargeted=True)
    assert hosted.notification_id == "ntf_3" and queue.lease_notifications(untargeted=True) == []
    assert queue.mark_delivered("ntf_3", str(hosted.delivery_token))
    clock.advance(DELIVERY_LEASE_MS)
    assert [row.notification_id for row in queue.lease_notifications(run_id="run1")] == ["ntf_2"]
    delivered = [
        row.notification_id for row in queue.notifications_of("run1") if row.delivered_at is not None
    ]
    assert delivered == ["ntf_1", "ntf_3"]
