"""Anchor: many queued runs of a 3-step workflow through a DBOS queue on SQLite (runs in its own venv).

    python dbos_queue.py prepare DB RUNS CONCURRENCY POLL_S   # enqueue RUNS workflows, run none, exit
    python dbos_queue.py work DB RUNS CONCURRENCY POLL_S      # launch a worker, wait until all RUNS are done

The workflow is what ``bench/bench_host_throughput.py`` runs through ``piw host``: a trivial step, a step that runs
``true`` as a subprocess, a trivial step. The queue has ``worker_concurrency=CONCURRENCY`` and polls every
``POLL_S`` seconds (DBOS's default is 1 s; its queue thread only polls, a finished workflow does not wake it).
``work`` prints one JSON object: when each workflow finished (``time.time()``), how many times each workflow's
subprocess step ran, the SUCCESS rows and step rows the system database holds, and this process's peak RSS.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import threading
import time
from importlib.metadata import version

from dbos import DBOS, DBOSConfig

lock = threading.Lock()
finished: dict[str, float] = {}
shell_runs: dict[str, int] = {}
expected = 0
all_done = threading.Event()


@DBOS.step()
def first(n: int) -> int:
    return n


@DBOS.step()
def shell(workflow_id: str) -> int:
    code = subprocess.run(["true"], check=True).returncode
    with lock:
        shell_runs[workflow_id] = shell_runs.get(workflow_id, 0) + 1
    return code


@DBOS.step()
def last(n: int) -> int:
    return n + 1


@DBOS.workflow()
def three(n: int) -> int:
    value = first(n)
    shell(DBOS.workflow_id or "")
    result = last(value)
    with lock:
        finished[DBOS.workflow_id or ""] = time.time()
        if len(finished) >= expected:
            all_done.set()
    return result


def main() -> None:
    global expected
    mode, db, runs, concurrency, poll = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
        sys.argv[5],
    )
    expected = runs
    config: DBOSConfig = {
        "name": "piw-bench-queue",
        "system_database_url": f"sqlite:///{db}",
        "run_admin_server": False,
    }
    DBOS(config=config)
    if mode == "prepare":
        DBOS.listen_queues([])  # this process enqueues only: no worker dequeues before ``work`` starts
    DBOS.launch()
    queue = DBOS.register_queue("bench", worker_concurrency=concurrency, polling_interval_sec=float(poll))
    if mode == "prepare":
        for n in range(runs):
            queue.enqueue(three, n)
        DBOS.destroy()
        return
    all_done.wait(timeout=3600)
    DBOS.destroy()
    import sqlite3

    with sqlite3.connect(db) as conn:
        success = conn.execute("SELECT count(*) FROM workflow_status WHERE status = 'SUCCESS'").fetchone()[0]
        created = [row[0] / 1000 for row in conn.execute("SELECT created_at FROM workflow_status")]
        steps = conn.execute("SELECT count(*) FROM operation_outputs").fetchone()[0]
    print(
        json.dumps(
            {
                "done_at": sorted(finished.values()),
                "queued_at_max": max(created),
                "outputs": len(finished),
                "shell_counts": sorted(set(shell_runs.values())),
                "shell_runs": sum(shell_runs.values()),
                "success_rows": success,
                "step_rows": steps,
                "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "versions": {"dbos": version("dbos")},
            }
        )
    )


if __name__ == "__main__":
    main()
