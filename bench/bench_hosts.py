"""Many hosts on one PostgreSQL: takeover latency after ``kill -9``, and a 4-host smoke (docs/many-machines.md).

Prints, beside the local fdatasync floor measured in the same run:

- **takeover latency**: a host holding a run in a shell step is ``SIGKILL``ed while a second, idle host polls;
  the time until the second host's claim commits (a new ``claim_generation`` on the row), over ``--samples``
  kills, for the lease given (``--lease-ms``, default the tests' 2 s; 30000 is the production lease).
  Target: lease + 1 s at most.
- **smoke**: ``--hosts`` hosts × ``--concurrency`` over ``--runs`` short runs (a compute step and an action step):
  runs/s, trace events/s, and the p50/p99 of a synchronous fenced append measured by a probe writer
  (``bench/bench_pg_trace.py``'s) while the hosts run.

Hosts are real ``piw host --database`` processes with their own ``PIW_HOME`` and ``PIW_HOST_ID``. The server is a
throwaway one (``tests/support/pg.py``) with ``fsync = on``. Not a test: figures only.

    python bench/bench_hosts.py [--samples 5] [--lease-ms 2000] [--hosts 4] [--concurrency 8] [--runs 1000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import secrets
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_engine import fsync_append_ms  # noqa: E402
from bench.bench_pg_trace import writer  # noqa: E402
from tests.support.hosts import HostProcess, gated_flow, marks, queue_in, wait_for  # noqa: E402

SHORT = """
from piw import action, compute, define_workflow, edge

workflow = define_workflow(name="short", start_at="work", nodes={
    "work": action(lambda ctx: {"n": ctx.input["n"]}),
    "done": compute(lambda ctx: ctx.outputs["work"]),
}, edges=[edge("work", "done")])
"""


def _fresh(server: Any) -> tuple[str, str]:
    schema = "bench_" + secrets.token_hex(4)
    return schema, f"{server.url()}?schema={schema}"


def _generation(server: Any, schema: str, run_id: str) -> int:
    return int(
        server.execute(f'SELECT claim_generation FROM "{schema}".run_queue WHERE run_id = %s', (run_id,))[0][
            0
        ]
    )


def takeover(server: Any, folder: Path, lease_ms: int) -> float:
    """Seconds from ``SIGKILL`` of the holder to the idle host's claim."""
    schema, url = _fresh(server)
    folder.mkdir(parents=True)
    env = {"PIW_TEST_LEASE_MS": str(lease_ms)}
    flow = gated_flow(lambda name, source: _write(folder / f"{name}.workflow.py", source), folder)
    (run_id,) = queue_in(folder / "enqueuer", url, flow, [{}])
    holder = HostProcess("holder", folder / "holder", ("--database", url, "--max-runs", "1"), env=env).start()
    spare = HostProcess("spare", folder / "spare", ("--database", url, "--max-runs", "1"), env=env)
    try:
        wait_for(lambda: marks(folder / "work.marks"), timeout=60, what="the holder's shell step")
        spare.start()
        wait_for(lambda: server.execute(f'SELECT count(*) FROM "{schema}".hosts')[0][0] >= 2, timeout=60)
        generation = _generation(server, schema, run_id)
        killed = time.monotonic()
        holder.signal(signal.SIGKILL)
        while _generation(server, schema, run_id) == generation:
            time.sleep(0.005)
        return time.monotonic() - killed
    finally:
        (folder / "gate").write_text("open")
        holder.kill()
        spare.kill()


def _write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def smoke(server: Any, folder: Path, hosts: int, concurrency: int, runs: int) -> dict[str, float]:
    schema, url = _fresh(server)
    flows = folder / "flows"
    flows.mkdir(parents=True)
    flow = _write(flows / "short.workflow.py", SHORT)
    ids = queue_in(folder / "enqueuer", url, flow, [{"n": n} for n in range(runs)])
    context = multiprocessing.get_context("spawn")
    out, go = context.Queue(), context.Event()
    probe = context.Process(target=writer, args=(server.url(), schema, 0, 400, True, out, go))
    probe.start()
    args = ("--database", url, "--workflows", str(flows), "--concurrency", str(concurrency))
    fleet = [
        HostProcess(f"host-{i}", folder / f"host-{i}", args, env={"PIW_TEST_LEASE_MS": "30000"})
        for i in range(hosts)
    ]
    started = time.monotonic()
    for host in fleet:
        host.start()
    done = f"SELECT count(*) FROM \"{schema}\".run_queue WHERE status = 'done'"
    wait_for(lambda: server.execute(done)[0][0] >= runs // 10, timeout=600, what="the fleet to get going")
    go.set()  # the probe appends while the hosts are busy
    wait_for(lambda: server.execute(done)[0][0] == runs, timeout=1200, what="every run")
    elapsed = time.monotonic() - started
    latencies, _wall = out.get(timeout=600)
    probe.join()
    for host in fleet:
        host.signal(signal.SIGTERM)
    for host in fleet:
        host.finish(timeout=120)
    events = int(
        server.execute(f'SELECT count(*) FROM "{schema}".trace_events WHERE run_id = ANY(%s)', (ids,))[0][0]
    )
    ordered = sorted(latencies)
    return {
        "elapsed": elapsed,
        "runs_per_s": runs / elapsed,
        "events_per_s": events / elapsed,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--lease-ms", type=int, default=2000)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    from tests.support.pg import throwaway_server

    with throwaway_server() as server:
        server.durable()
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            floor = fsync_append_ms(folder)
            print(f"local fdatasync'd line (the SQLite-mode commit point): p50 {floor:.3f} ms")
            samples = [takeover(server, folder / f"takeover-{i}", args.lease_ms) for i in range(args.samples)]
            print(
                f"takeover after kill -9, lease {args.lease_ms / 1000:g} s (target <= {args.lease_ms / 1000 + 1:g} s): "
                f"median {statistics.median(samples):.2f} s, max {max(samples):.2f} s over {len(samples)} kills"
            )
            figures = smoke(server, folder / "smoke", args.hosts, args.concurrency, args.runs)
            print(
                f"smoke, {args.hosts} hosts x concurrency {args.concurrency}, {args.runs} runs: "
                f"{figures['elapsed']:.1f} s, {figures['runs_per_s']:.1f} runs/s, "
                f"{figures['events_per_s']:,.0f} events/s; fenced append under that load "
                f"p50 {figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms"
            )


if __name__ == "__main__":
    main()
