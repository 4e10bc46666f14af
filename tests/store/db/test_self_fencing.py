"""Self-fencing: a holder past its own conservative deadline writes nothing and aborts its node
(``multi-host.md`` §4.4, ``docs/detached.md``, "Self-fencing").

The deadline runs on the holder's local clock from when it *sent* the claim or renewal, so these tests move
``sent_at`` into the past instead of sleeping; the queue row itself stays live on its own clock throughout,
which is the point: the holder stops before anyone else could take the run.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from piw.errors import ClaimLost
from piw.store.db.deadline import SAFETY_MS, holder_clock
from piw.store.db.lease import Lease
from piw.store.db.queue import RunQueue
from piw.store.db.rows import LEASE_MS, Claim, NewRun
from piw.store.db.run_database import open_run_database


def _claimed(home: Path) -> tuple[RunQueue, Claim]:
    queue = open_run_database(home).queue
    queue.enqueue(NewRun("r1", "flow.workflow.py", {"kind": "file"}, "d", {}))
    claim = queue.claim_run("r1", "me")
    return queue, claim


def test_past_its_deadline_a_holder_refuses_to_write_without_reading_the_row(piw_home: Path) -> None:
    queue, claim = _claimed(piw_home)
    lost: list[str] = []
    lease = Lease(queue, claim, sent_at=holder_clock() - LEASE_MS / 1000, on_lost=lost.append)
    with pytest.raises(ClaimLost) as refused:
        lease.fence()
    assert refused.value.reason == "expired" and lost == ["expired"] and lease.row_reads == 0
    with pytest.raises(ClaimLost):
        lease.renew()  # a self-fenced claim never renews, though the row is still live on its own clock
    row = queue.get("r1")
    assert row is not None and row.status == "starting" and row.claim_token == claim.token


def test_the_watchdog_aborts_the_node_at_the_deadline(piw_home: Path) -> None:
    queue, claim = _claimed(piw_home)
    fired = threading.Event()
    budget_s = (LEASE_MS - SAFETY_MS) / 1000
    lease = Lease(queue, claim, sent_at=holder_clock() - budget_s + 0.2, on_lost=lambda _: fired.set())
    lease.start()
    try:
        lease.fence()  # still before the deadline
        assert fired.wait(
            10
        )  # no renewal happens in 0.2 s: the watchdog fires, whatever the lease thread does
        assert lease.lost == "expired"
    finally:
        lease.stop()


def test_a_renewal_moves_the_deadline_from_when_it_was_sent(piw_home: Path) -> None:
    queue, claim = _claimed(piw_home)
    lease = Lease(queue, claim, sent_at=holder_clock() - (LEASE_MS - SAFETY_MS) / 1000 + 0.5)
    before = lease.deadline.at
    lease.renew()
    assert lease.deadline.at > before + 0.4
    lease.fence()


def test_the_test_hook_turns_self_fencing_off(piw_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIW_TEST_NO_SELF_FENCE", "1")
    queue, claim = _claimed(piw_home)
    lease = Lease(queue, claim, sent_at=holder_clock() - 3600)
    lease.fence()  # only the row decides now (it is live)
