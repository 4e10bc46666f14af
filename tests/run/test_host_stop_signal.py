"""A stop signal whose ``KeyboardInterrupt`` Python swallowed still stops ``piw host`` (``piw.stop_signal``).

CI saw it: SIGTERM reached the host's main thread inside a weakref callback, Python printed "Exception ignored
in: …" and the host served on until it was killed. The state that leaves behind is a stop request with no
exception, which is what these tests make, from another thread, while the host waits or while it joins a run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from piw.run.host import Host, HostOptions
from piw.run.runner import ForegroundOptions, queue_run
from piw.stop_signal import clear_stop_request, request_stop
from tests.run.test_host import gated_flow, queue_row
from tests.support.runs import WorkflowMaker, trace_lines


@pytest.fixture(autouse=True)
def _no_request_left_behind() -> Iterator[None]:
    clear_stop_request()
    yield
    clear_stop_request()


def signal_swallowed_once_started(gate: Path, host_returned: threading.Event) -> threading.Thread:
    """Ask for a stop without an exception once the step runs; open the gate after 30 s so a host that ignores
    the request still ends (and the test fails on the run's status instead of hanging)."""

    def act() -> None:
        deadline = time.monotonic() + 30
        while not Path(str(gate) + ".started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        request_stop()
        host_returned.wait(max(0.0, deadline - time.monotonic()))
        gate.write_text("open")

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("once", [False, True], ids=["serving", "finishing"])
def test_a_swallowed_stop_signal_parks_the_run_in_flight(
    piw_home: Path, make_workflow: WorkflowMaker, tmp_path: Path, once: bool
) -> None:
    """``serving``: the host waits for more runs; ``finishing``: ``--once`` with one run left, so the request
    arrives while the host waits for the run's thread (``serve`` -> ``_join_all``)."""
    gate = tmp_path / "gate"
    run_id = queue_run(str(gated_flow(make_workflow, gate)), piw_home, {}, None, ForegroundOptions()).run_id
    host_returned = threading.Event()
    helper = signal_swallowed_once_started(gate, host_returned)
    started = time.monotonic()
    try:
        Host(piw_home, HostOptions(once=once, poll_s=0.1)).serve()
    finally:
        host_returned.set()
    took = time.monotonic() - started
    helper.join()
    row = queue_row(piw_home, run_id)
    assert (row["status"], row["park_reason"]) == ("parked", None), f"host returned after {took:.1f} s"
    assert trace_lines(piw_home, run_id)[-1]["type"] == "node_started"  # parked mid-step, no outcome recorded
