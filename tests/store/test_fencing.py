"""A stale writer is fenced out (``persistence.md`` §12 test 4) on a real bundle and a real ``piw.sqlite``.

A claims the run and writes; its lease expires (an injected clock: nothing sleeps); B claims it with the next
generation. A's next write raises ``ClaimLost("generation_changed")`` and adds no byte to any file; B cannot take
the writer lock while A holds it, and can once A lets go; A's expired claim never renews.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from piw.errors import ClaimLost, RunLocked
from piw.run.runner import ForegroundOptions, queue_run
from piw.store.bundle import open_bundle
from piw.store.db.database import close_databases
from piw.store.db.lease import Lease
from piw.store.db.rows import LEASE_MS
from piw.store.db.run_database import open_run_database
from piw.store.fold import fold
from piw.store.run_store import open_run_stores
from piw.store.writer import RunWriter
from piw.wire_models import Manifest

QUICK = """
from piw import compute, define_workflow

workflow = define_workflow(name="quick", start_at="a", nodes={"a": compute(lambda ctx: {"n": 1})})
"""


class Clock:
    def __init__(self) -> None:
        import time

        self.now = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_stale_writer_is_fenced_out_and_writes_nothing_more(piw_home: Path, tmp_path: Path) -> None:
    flow = tmp_path / "quick.workflow.py"
    flow.write_text(QUICK, encoding="utf-8")
    run_id = queue_run(str(flow), piw_home, {}, None, ForegroundOptions(record_origin=False)).run_id
    close_databases()
    clock = Clock()
    queue = open_run_database(piw_home, clock).queue
    bundle = open_bundle(piw_home, run_id)

    claim_a = queue.claim_next("elsewhere.example:1:1")
    assert claim_a is not None and claim_a.run_id == run_id
    lease_a = Lease(queue, claim_a)
    stores = open_run_stores(piw_home, "flush")
    store_a = stores.open(run_id).acquire(lease_a)
    state = fold(bundle.read_trace().events)
    manifest = Manifest.model_validate(bundle.read_manifest())
    writer_a = RunWriter(store_a, state, manifest)
    session_a = store_a.open_session()
    writer_a.append("run", "run_resumed", {"replayedSteps": 0, "resumeAt": "a"})  # A writes under its claim

    clock.now += LEASE_MS  # A stalls past its lease
    claim_b = queue.claim_run(run_id, "elsewhere.example:2:2")
    assert claim_b.generation == claim_a.generation + 1
    with pytest.raises(RunLocked):
        stores.open(run_id).acquire(Lease(queue, claim_b))  # B waits for A's lock

    before = _files(bundle.path)
    with pytest.raises(ClaimLost) as lost:
        writer_a.append("node", "node_started", {"nodeType": "compute"}, node_id="a", attempt_id="0" * 32)
    assert lost.value.reason == "generation_changed"
    with pytest.raises(ClaimLost):
        session_a.append({"role": "user", "content": "late"})
    writer_a.close()  # a writer that lost its claim does not even refresh state.json
    session_a.close()
    with pytest.raises(ClaimLost):
        lease_a.renew()  # an expired claim never renews
    assert _files(bundle.path) == before  # no byte more, in any file

    store_a.release()
    store_b = stores.open(run_id).acquire(Lease(queue, claim_b))  # now B may write
    writer_b = RunWriter(store_b, fold(bundle.read_trace().events), manifest)
    event = writer_b.append("run", "run_resumed", {"replayedSteps": 0, "resumeAt": "a"})
    assert event.seq == 3
    writer_b.close()
    store_b.release()
