"""A fleet of hosts on one database with a kill and a stop, and the invariants of ``multi-host.md`` §5 test 6.

:func:`run_fleet` queues ``runs`` runs of a three-step workflow (a shell step, a compute step, a shell step, each
shell step appending one effect line per execution), starts ``hosts`` ``piw host --database`` processes, and once
some runs are done ``SIGKILL``s one host and ``SIGSTOP``s another past its lease (then ``SIGCONT``). When every run
is done it checks, per run, from the database: one terminal event and last; one ``node_finished`` per step; ``seq``
contiguous; ``generation`` never decreasing; and that effects ran twice only for steps in flight at the kill or stop.
The gate runs a small fleet (``tests/multihost/test_fleet.py``); ``.ci/run`` runs 4 hosts × 200 runs.
"""

from __future__ import annotations

import signal
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.hosts import TEST_LEASE_MS, HostProcess, database_url, queue_in, wait_for

FLEET_FLOW = """
from piw import compute, define_workflow, edge, shell

def effect(node):
    def command(ctx):
        line = "echo {{}} {{}} >> {effects}; sleep 0.05".format(ctx.input["n"], node)
        return {{"command": "sh", "args": ["-c", line]}}
    return command

workflow = define_workflow(name="fleet", start_at="first", nodes={{
    "first": shell(effect("first")),
    "middle": compute(lambda ctx: {{"n": ctx.input["n"]}}),
    "last": shell(effect("last")),
}}, edges=[edge("first", "middle"), edge("middle", "last")])
"""

STEPS = ("first", "middle", "last")


@dataclass
class FleetReport:
    runs: int
    done: int
    duplicated_effects: int
    taken_over: int
    """Runs claimed again after the kill or the stop."""
    elapsed_s: float


def _count_done(server: Any, schema: str) -> int:
    found = server.execute(f"SELECT count(*) FROM \"{schema}\".run_queue WHERE status = 'done'")
    return int(found[0][0])


def _holding(server: Any, schema: str) -> set[str]:
    """The host ids that hold a run with a live lease now."""
    found = server.execute(
        f"SELECT DISTINCT split_part(runner_id, ':', 1) FROM \"{schema}\".run_queue "
        "WHERE status = 'running' AND claim_expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint"
    )
    return {str(host) for (host,) in found}


def run_fleet(
    server: Any,
    schema: str,
    folder: Path,
    *,
    hosts: int,
    runs: int,
    concurrency: int,
    timeout_s: float = 120.0,
) -> FleetReport:
    """Run the fleet scenario and assert its invariants; what it measured."""
    assert hosts >= 3, "one host is killed, one stopped, one must stay"
    url = database_url(server, schema)
    flows = folder / "flows"
    flows.mkdir(parents=True, exist_ok=True)
    effects = folder / "effects.log"
    flow = flows / "fleet.workflow.py"
    flow.write_text(textwrap.dedent(FLEET_FLOW.format(effects=effects)).lstrip())
    ids = queue_in(folder / "enqueuer", url, flow, [{"n": n} for n in range(runs)])
    started = time.monotonic()
    args = ("--database", url, "--workflows", str(flows), "--concurrency", str(concurrency))
    fleet = [HostProcess(f"host-{index}", folder / f"host-{index}", args).start() for index in range(hosts)]
    killed, stopped = fleet[0], fleet[1]
    try:
        wait_for(
            lambda: _count_done(server, schema) >= max(1, runs // 6), timeout=timeout_s, what="first runs"
        )
        # Strike while both victims hold a run, so that the kill and the stop strand work (on a busy machine a
        # host may be between two claims at any given instant).
        victims = {killed.host_id, stopped.host_id}
        wait_for(
            lambda: victims <= _holding(server, schema), timeout=timeout_s, what="both victims holding a run"
        )
        killed.signal(signal.SIGKILL)
        stopped.signal(signal.SIGSTOP)
        time.sleep(2 * TEST_LEASE_MS / 1000)  # the stop must outlast the lease: that is the scenario itself
        stopped.signal(signal.SIGCONT)
        wait_for(lambda: _count_done(server, schema) == runs, timeout=timeout_s, what="every run to complete")
        elapsed = time.monotonic() - started
    finally:
        for host in fleet:
            if host.process is not None and host.process.poll() is None:
                host.signal(signal.SIGCONT)
                host.signal(signal.SIGTERM)
        for host in fleet:
            try:
                host.finish(timeout=60)
            except Exception:
                host.kill()
    duplicated, taken_over = check_invariants(server, schema, ids, effects)
    assert duplicated <= 2 * concurrency, duplicated  # only steps in flight at the kill and at the stop
    assert 1 <= taken_over <= 2 * concurrency, (
        taken_over
    )  # the kill and the stop did strand runs, and no others
    return FleetReport(runs, _count_done(server, schema), duplicated, taken_over, elapsed)


def check_invariants(
    server: Any, schema: str, ids: list[str], effects: Path, max_runs_of_a_step: int = 2
) -> tuple[int, int]:
    """Assert §5 test 6's per-run invariants from the database; how many effects ran twice, and how many runs were
    taken over mid-step."""
    import json

    found = server.execute(
        f'SELECT run_id, seq, generation, line FROM "{schema}".trace_events WHERE run_id = ANY(%s) '
        "ORDER BY run_id, seq",
        (ids,),
    )
    traces: dict[str, list[tuple[int, int, dict[str, Any]]]] = {run_id: [] for run_id in ids}
    for run_id, seq, generation, line in found:
        traces[run_id].append((int(seq), int(generation), json.loads(bytes(line))))
    taken_over = 0
    for run_id, trace in traces.items():
        assert [seq for seq, _, _ in trace] == list(range(1, len(trace) + 1)), run_id
        generations = [gen for _, gen, _ in trace]
        assert generations == sorted(generations), run_id
        kinds = [line["type"] for _, _, line in trace]
        terminal = [
            kind for kind in kinds if kind.startswith("run_") and kind not in ("run_started", "run_resumed")
        ]
        assert terminal == ["run_completed"] and kinds[-1] == "run_completed", (run_id, kinds)
        finished = Counter(line["nodeId"] for _, _, line in trace if line["type"] == "node_finished")
        assert finished == Counter(STEPS), (run_id, finished)
        taken_over += any(
            line["type"] == "run_resumed" and line["payload"].get("abandonedAttemptId")
            for _, _, line in trace
        )
    executions = Counter(effects.read_text().splitlines())
    assert set(executions) == {f"{n} {node}" for n in range(len(ids)) for node in ("first", "last")}
    assert max(executions.values()) <= max_runs_of_a_step, executions.most_common(3)
    return sum(count - 1 for count in executions.values()), taken_over
