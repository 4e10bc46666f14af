"""The run queue protocol (``persistence.md`` §10.2), parametrised by implementation.

Every test here takes ``make_queue``, once per implementation of ``QUEUE_IMPLEMENTATIONS`` (SQLite, and PostgreSQL
for many machines, ``tests/support/run_databases.py``): each must pass the same suite. Time is an injected clock: no
test sleeps.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from piw.errors import ClaimLost, RunFinished, RunLocked, RunNotFound
from piw.store.db.holders import holder_is_dead, runner_id
from piw.store.db.lease import Lease
from piw.store.db.queue import RENEW_MS, RunQueue, SqliteQueue
from piw.store.db.rows import LEASE_MS, NewRun
from tests.support.run_databases import QUEUE_IMPLEMENTATIONS, FakeClock, run_database_factory

MakeQueue = Callable[..., RunQueue]


@pytest.fixture(params=QUEUE_IMPLEMENTATIONS)
def make_queue(request: pytest.FixtureRequest, piw_home: Path) -> MakeQueue:
    """A queue factory: every queue it makes shares one store and one clock (``clock`` attribute)."""
    clock = FakeClock()
    databases = run_database_factory(request, request.param, piw_home, clock)

    def make() -> RunQueue:
        return databases().queue

    make.clock = clock  # type: ignore[attr-defined]
    return make


def new_run(run_id: str, **extra: object) -> NewRun:
    return NewRun(
        run_id=run_id,
        workflow_ref="/work/flow.workflow.py",
        workflow_source={"kind": "file", "path": "/work/flow.workflow.py", "hash": "0" * 64},
        definition_digest="sha256:" + "1" * 64,
        input={"n": 1},
        **extra,  # type: ignore[arg-type]
    )


def test_claim_next_takes_affinity_first_then_oldest_and_skips_unavailable(make_queue: MakeQueue) -> None:
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.enqueue(new_run("r1"))
    clock.advance(1)
    queue.enqueue(new_run("r2", affinity_runner_id="host-b"))
    clock.advance(1)
    queue.enqueue(new_run("r3", available_at=clock.now + 5_000))
    queue.enqueue(new_run("r4"))
    queue.request_pause("r4")

    first = queue.claim_next("host-b")
    second = queue.claim_next("host-a")
    assert (first and first.run_id, second and second.run_id) == ("r2", "r1")
    assert queue.claim_next("host-a") is None  # r3 not yet available, r4 paused
    clock.advance(5_000)
    third = queue.claim_next("host-a")
    assert third is not None and third.run_id == "r3"
    assert queue.claim_next("host-a") is None


def test_a_claim_is_a_fresh_token_and_the_next_generation(make_queue: MakeQueue) -> None:
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.enqueue(new_run("r1"))
    claim = queue.claim_next("a")
    assert claim is not None and claim.generation == 1 and len(claim.token) == 32
    assert claim.expires_at == clock.now + LEASE_MS
    row = queue.get("r1")
    assert row is not None and row.status == "starting" and row.runner_id == "a"
    queue.park(claim)
    again = queue.claim_next("b")
    assert again is not None and again.generation == 2 and again.token != claim.token


def test_parked_rows_with_a_reason_are_left_for_a_named_claim(make_queue: MakeQueue) -> None:
    queue = make_queue()
    queue.enqueue(new_run("r1"))
    claim = queue.claim_next("a")
    assert claim is not None
    queue.park(claim, "needs-origin-session")
    assert queue.claim_next("host") is None
    named = queue.claim_run("r1", "resumer")
    row = queue.get("r1")
    assert named.generation == 2 and row is not None and row.park_reason is None


def test_a_live_lease_blocks_claims_until_it_expires(make_queue: MakeQueue) -> None:
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.enqueue(new_run("r1"))
    holder = f"elsewhere.example:{1}:123"  # another host: only expiry frees it
    claim = queue.claim_next(holder)
    assert claim is not None
    assert queue.claim_next("b") is None
    with pytest.raises(RunLocked):
        queue.claim_run("r1", "b")
    clock.advance(LEASE_MS)
    taken = queue.claim_run("r1", "b")
    assert taken.generation == claim.generation + 1


def test_expired_claims_and_queued_rows_are_claimed_in_one_order(make_queue: MakeQueue) -> None:
    """A live claim, even the claimer's own, is never handed out again; once expired, held rows are claimed again
    in each queue's order: by age among queued rows on SQLite (one machine), ahead of them on PostgreSQL
    (recovery first, ``piw.store.pg.queue``)."""
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    elsewhere = "elsewhere.example:1:123"  # another host: only expiry frees its claims
    for run_id in ("old", "mid", "young"):
        queue.enqueue(new_run(run_id))
        clock.advance(1)
    held = [queue.claim_next(elsewhere) for _ in range(3)]
    assert [claim and claim.run_id for claim in held] == ["old", "mid", "young"]
    queue.park(held[1])  # type: ignore[arg-type]
    mine = queue.claim_next("a")
    assert mine is not None and mine.run_id == "mid"
    assert queue.claim_next("a") is None  # its own live claim and the other host's
    queue.park(mine)
    clock.advance(LEASE_MS)  # old and young expire; mid waits, queued
    order = [claim.run_id for claim in iter(lambda: queue.claim_next("b"), None)]
    assert order == (["old", "mid", "young"] if isinstance(queue, SqliteQueue) else ["old", "young", "mid"])


def test_renewal_extends_a_live_lease_and_an_expired_claim_never_renews(make_queue: MakeQueue) -> None:
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.enqueue(new_run("r1"))
    claim = queue.claim_next("a")
    assert claim is not None
    clock.advance(RENEW_MS)
    renewed = queue.renew(claim)
    assert renewed.expires_at == clock.now + LEASE_MS
    clock.advance(LEASE_MS)
    with pytest.raises(ClaimLost) as lost:
        queue.renew(renewed)
    assert lost.value.reason == "expired"
    with pytest.raises(ClaimLost) as fenced:
        queue.fence(renewed)
    assert fenced.value.reason == "expired"


def test_fence_reasons(make_queue: MakeQueue) -> None:
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.enqueue(new_run("r1"))
    a = queue.claim_next("a")
    assert a is not None
    assert queue.fence(a).status == "starting"
    queue.mark_running(a)
    assert queue.fence(a).status == "running"
    clock.advance(LEASE_MS)
    b = queue.claim_next("b")
    assert b is not None
    with pytest.raises(ClaimLost) as lost:
        queue.fence(a)
    assert lost.value.reason == "generation_changed"
    queue.release(b, "done")
    with pytest.raises(ClaimLost) as released:
        queue.fence(b)
    assert released.value.reason in ("status_changed", "token_changed")
    with pytest.raises(ClaimLost) as missing:
        queue.fence(type(a)("nope", "t", 1, "a", clock.now + 1))
    assert missing.value.reason == "missing"


def test_stale_writer_is_fenced_by_its_lease(make_queue: MakeQueue) -> None:
    """§12 test 4 at the lease level: after B takes over, A's next fence raises, and A never renews."""
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.enqueue(new_run("r1"))
    claim = queue.claim_next("elsewhere.example:1:1")
    assert claim is not None
    lost: list[str] = []
    lease = Lease(queue, claim, on_lost=lost.append)
    lease.fence()  # inside the lease: a clock comparison
    assert lease.row_reads == 0
    clock.advance(LEASE_MS + 1)
    b = make_queue().claim_run("r1", "b")
    assert b.generation == 2
    with pytest.raises(ClaimLost) as fenced:
        lease.fence()
    assert fenced.value.reason == "generation_changed" and lost == ["generation_changed"]
    with pytest.raises(ClaimLost):
        lease.renew()
    with pytest.raises(ClaimLost):
        lease.fence()


def test_lease_reads_the_row_once_a_renewal_is_due_and_takes_in_flags(make_queue: MakeQueue) -> None:
    queue, clock = make_queue(), make_queue.clock  # type: ignore[attr-defined]
    queue.enqueue(new_run("r1"))
    claim = queue.claim_next("a")
    assert claim is not None
    cancels: list[bool] = []
    lease = Lease(queue, claim, on_cancel=lambda: cancels.append(True))
    for _ in range(100):
        lease.fence()
    assert lease.row_reads == 0
    queue.request_pause("r1")
    queue.request_cancel("r1")
    clock.advance(RENEW_MS)
    lease.fence()
    assert lease.row_reads == 1 and lease.pause_requested and lease.cancel_requested and cancels == [True]
    lease.tick()  # a renewal is due: the lease moves forward
    assert lease.claim.expires_at == clock.now + LEASE_MS
    lease.tick()
    assert cancels == [True]  # signalled once


def test_release_clears_the_claim_and_the_input(make_queue: MakeQueue) -> None:
    queue = make_queue()
    queue.enqueue(new_run("r1"))
    claim = queue.claim_next("a")
    assert claim is not None
    queue.release(claim, "done")
    row = queue.get("r1")
    assert row is not None and row.status == "done" and row.input is None and row.claim_token is None
    assert queue.claim_next("a") is None
    with pytest.raises(RunFinished):
        queue.claim_run("r1", "a")
    with pytest.raises(RunNotFound):
        queue.claim_run("nope", "a")


def test_finalize_sets_an_unheld_row_final(make_queue: MakeQueue) -> None:
    queue = make_queue()
    queue.enqueue(new_run("r1"))
    claim = queue.claim_next("a")
    assert claim is not None
    queue.release(claim, "done")
    assert queue.finalize("r1", "cancelled") is not None  # final rows stay as they are
    row = queue.get("r1")
    assert row is not None and row.status == "done"
    queue.enqueue(new_run("r2"))
    row2 = queue.finalize("r2", "cancelled")
    assert row2 is not None and row2.status == "cancelled"


def test_one_continuation_per_parent_is_enforced_by_the_store(make_queue: MakeQueue) -> None:
    queue = make_queue()
    queue.enqueue(new_run("c1", parent_run_id="parent"))
    with pytest.raises(Exception) as duplicate:
        queue.enqueue(new_run("c2", parent_run_id="parent"))
    assert "UNIQUE" in str(duplicate.value).upper()
    assert queue.get("c2") is None


def test_dead_holder_on_this_host_is_taken_over_at_once(make_queue: MakeQueue) -> None:
    queue = make_queue()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        holder = runner_id(child.pid)
        assert holder.startswith(socket.gethostname() + ":") and not holder_is_dead(holder)
        queue.enqueue(new_run("r1"))
        queue.enqueue(new_run("r2"), claim_for=holder)
        with pytest.raises(RunLocked):
            queue.claim_run("r2", "me")
    finally:
        child.kill()
        child.wait()
    assert holder_is_dead(holder)
    assert not holder_is_dead(f"{socket.gethostname()}:{child.pid}x:1")  # unparsable: never "dead"
    taken = queue.claim_run("r2", "me")
    assert taken.generation == 2


def test_claim_next_under_threads_hands_each_row_out_once(make_queue: MakeQueue) -> None:
    seed = make_queue()
    for index in range(20):
        seed.enqueue(new_run(f"r{index:02d}"))
    claimed: list[str] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        queue = make_queue()
        while True:
            claim = queue.claim_next(name)
            if claim is None:
                return
            with lock:
                claimed.append(claim.run_id)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == [f"r{index:02d}" for index in range(20)]
