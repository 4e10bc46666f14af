"""Chaos on many hosts (``multi-host.md`` §5 test 7): random host kills and PostgreSQL restarts, nothing lost.

For ``--seconds`` (60): every U(2,5) s one random host is ``SIGKILL``ed and started again (same host id and home),
and every U(5,15) s the server restarts with ``pg_ctl restart -m immediate`` (every connection drops; committed rows
stay). Then the hosts run on until every run is done. Checks, and prints: every run completed; none stranded (no
row left held by a dead lease, none lost); per run ``seq`` contiguous, ``generation`` never decreasing, one
``node_finished`` per step, one terminal event, last; how many effects ran more than once (steps in flight at a
kill). Hosts use the tests' 2 s lease. Not part of the gate (``docs/many-machines.md``).

    python bench/bench_chaos.py [--seconds 60] [--hosts 4] [--concurrency 4] [--runs 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fleet import FLEET_FLOW, check_invariants  # noqa: E402
from tests.support.hosts import HostProcess, queue_in, wait_for  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    chance = random.Random(args.seed)
    from tests.support.pg import start_server

    server = start_server()
    folder = Path(tempfile.mkdtemp(prefix="piw-chaos-"))
    schema = "chaos"
    url = f"{server.url()}?schema={schema}"
    fleet: list[HostProcess] = []
    try:
        flows, effects = folder / "flows", folder / "effects.log"
        flows.mkdir()
        flow = flows / "fleet.workflow.py"
        flow.write_text(textwrap.dedent(FLEET_FLOW.format(effects=effects)).lstrip())
        ids = queue_in(folder / "enqueuer", url, flow, [{"n": n} for n in range(args.runs)])
        host_args = ("--database", url, "--workflows", str(flows), "--concurrency", str(args.concurrency))
        fleet = [HostProcess(f"host-{i}", folder / f"host-{i}", host_args).start() for i in range(args.hosts)]
        started = time.monotonic()
        next_kill = started + chance.uniform(2, 5)
        next_restart = started + chance.uniform(5, 15)
        kills = restarts = 0
        while time.monotonic() - started < args.seconds:
            now = time.monotonic()
            if now >= next_kill:
                index = chance.randrange(len(fleet))
                fleet[index].kill()
                fleet[index] = HostProcess(fleet[index].host_id, fleet[index].home, host_args).start()
                kills += 1
                next_kill = now + chance.uniform(2, 5)
            if now >= next_restart:
                server.restart("immediate")
                restarts += 1
                next_restart = time.monotonic() + chance.uniform(5, 15)
            for index, host in enumerate(fleet):  # a host that stopped on its own (it should not) comes back
                if host.process is not None and host.process.poll() is not None:
                    _, _, err = host.finish()
                    print(f"host {host.host_id} exited by itself: {err.strip().splitlines()[-1:]}")
                    fleet[index] = HostProcess(host.host_id, host.home, host_args).start()
            time.sleep(0.05)
        done = f"SELECT count(*) FROM \"{schema}\".run_queue WHERE status = 'done'"
        wait_for(
            lambda: server.execute(done)[0][0] == args.runs, timeout=300, what="every run after the chaos"
        )
        elapsed = time.monotonic() - started
        stranded = server.execute(
            f"SELECT count(*) FROM \"{schema}\".run_queue WHERE status NOT IN ('done', 'failed', 'cancelled')"
        )[0][0]
        duplicated, taken_over = check_invariants(server, schema, ids, effects, max_runs_of_a_step=kills + 2)
        print(
            f"chaos {args.seconds:g} s: {kills} host kills, {restarts} PostgreSQL restarts; "
            f"{args.runs}/{args.runs} runs completed in {elapsed:.1f} s, {stranded} stranded, {taken_over} runs "
            f"claimed again, {duplicated} effects ran again (steps in flight at a kill); seq, generation and "
            "node_finished checks passed"
        )
    finally:
        for host in fleet:
            host.kill()
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
