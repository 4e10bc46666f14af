"""What a ``script`` node costs (issue 35, docs/dynamic-workflows.md), three figures in one run:

1. **Overhead per leaf against a plain ``agent`` node** (target ≤ 1 ms): the same number of agent steps against
   the loopback stub (``piw.testing.OpenAIStub``, instant replies), in process, run in turn A B A B …: a script
   asking ``N`` leaves one after another, and a chain of ``N`` ``agent`` nodes. The figure is the median wall time
   of the script run minus the agent chain's, over ``N``.
2. **Resume cost with 1,000 committed leaves** (target ≤ 0.5 s before the first new request): a script of 1,000
   leaves and a last one is run by ``piw run`` until the last leaf's request arrives, then killed -9; ``piw resume
   RUN`` is then timed from the moment its process is started to the moment the stub receives its first request
   (the last leaf: none of the 1,000 is asked again), the process killed there each time. Beside it the same
   command for a script with no committed leaf: the start-up floor every resume pays (interpreter, imports, the
   provider), which the 1,000 leaves add to; the two are timed in turn. Then the same resumes in one process with
   the imports warm (``resume_run`` on a fresh copy of the interrupted home), which leaves the start-up out.
3. **Bookkeeping of the flow alone**: ``flow.agent`` (key, counters, progress) on 16 threads without a child step,
   and a rerun of ``main`` over 1,000 committed leaves in the flow.

``python bench/bench_script.py [--leaves N] [--rounds R] [--committed C] [--resumes K] [--only 1|2|3]``.
Prints its figures (no assertion).
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piw.testing import OpenAIStub, StubReply
from piw.workflow.script import Flow
from tests.support.agent_harness import submit_args

PIW = str(Path(sys.executable).with_name("piw"))

SCRIPT = """
from piw import define_workflow, script

def main(flow):
    return [flow.agent(f"Item {i}.", key=f"i{i}") for i in range(N)]

workflow = define_workflow(name="leaves", start_at="s", nodes={"s": script(main, max_concurrency=1, max_agents=N)})
"""

CHAIN = """
from piw import agent, define_workflow, edge

nodes = {f"a{i}": agent(prompt=f"Item {i}.") for i in range(N)}
workflow = define_workflow(
    name="chain",
    start_at="a0",
    nodes=nodes,
    edges=[edge(f"a{i}", f"a{i + 1}") for i in range(N - 1)],
    max_steps=N + 1,
)
"""

RESUMED = """
from piw import define_workflow, script

def main(flow):
    def leaf(i):
        return flow.agent(f"Item {i}.")

    with flow.phase("many"):
        done = flow.parallel(list(range(N)), leaf)
    return {"n": len(done), "last": flow.agent("Last leaf.", key="last")}

workflow = define_workflow(
    name="resumed", start_at="s", nodes={"s": script(main, max_concurrency=16, max_agents=N + 1)}
)
"""


def submit(body: dict[str, Any]) -> StubReply:
    return StubReply.tool("workflow", submit_args(body, {"answer": "ok"}))


def write_config(home: Path, stub: OpenAIStub) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'default = "stub/m"\n[providers.stub]\napi = "openai-completions"\nbase_url = "{stub.base_url}"\n'
        'models = ["m"]\n',
        encoding="utf-8",
    )


def write(folder: Path, name: str, body: str, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.workflow.py"
    path.write_text(textwrap.dedent(body).replace("N", str(n)), encoding="utf-8")
    return path


# ---- 1. overhead per leaf ------------------------------------------------------------------------------------


def timed_run(home: Path, workflow: Path) -> float:
    from rich.console import Console

    from piw.agent_steps.factory import agent_executor_factory
    from piw.run.runner import ForegroundOptions, start_run

    options = ForegroundOptions(
        agent_executor_factory=agent_executor_factory(home, Console(file=io.StringIO()))
    )
    started = time.perf_counter()
    state = start_run(str(workflow), home, {}, None, options)
    took = time.perf_counter() - started
    assert state.status == "completed", state.error
    return took


def overhead(folder: Path, n: int, rounds: int) -> None:
    script_file = write(folder, "leaves", SCRIPT, n)
    chain_file = write(folder, "chain", CHAIN, n)
    scripts: list[float] = []
    chains: list[float] = []
    with OpenAIStub() as stub:
        stub.respond = submit
        home = folder / "home-overhead"
        write_config(home, stub)
        os.environ["PIW_HOME"] = str(home)
        timed_run(home, script_file)  # warm-up: imports, the provider, the first bundle
        timed_run(home, chain_file)
        for _ in range(rounds):
            scripts.append(timed_run(home, script_file))
            chains.append(timed_run(home, chain_file))
        requests = stub.request_count
    script_ms, chain_ms = statistics.median(scripts) * 1000, statistics.median(chains) * 1000
    per_leaf = (script_ms - chain_ms) / n
    pairs = sorted((s - c) * 1000 / n for s, c in zip(scripts, chains, strict=True))
    print(
        f"1. {n} agent steps against the loopback stub, {rounds} rounds each, in turn ({requests} requests):"
    )
    print(f"   script of {n} leaves:  median {script_ms:.0f} ms  ({script_ms / n:.2f} ms per leaf)")
    print(f"   chain of {n} agent nodes: median {chain_ms:.0f} ms  ({chain_ms / n:.2f} ms per step)")
    print(
        f"   overhead per leaf: {per_leaf:+.3f} ms (target <= 1 ms: {'met' if per_leaf <= 1 else 'MISSED'}); "
        f"pair by pair {pairs[0]:+.3f} .. {pairs[-1]:+.3f} ms"
    )


# ---- 2. resume cost --------------------------------------------------------------------------------------------


class FirstRequest:
    """The stub's responder: notes when a request arrives and kills the process being timed at the first one
    (the run stays interrupted, so the same resume can be timed again)."""

    def __init__(self) -> None:
        self.arrived: float | None = None
        self.prompts: list[str] = []
        self.kill: Callable[[], None] | None = None
        self.seen = threading.Event()

    def __call__(self, body: dict[str, Any]) -> StubReply:
        self.prompts.append(_task(body))
        if self.arrived is None:
            self.arrived = time.perf_counter()
        kill = self.kill
        if kill is not None and self.prompts[-1].startswith("Last leaf"):
            kill()
            self.seen.set()
        return submit(body)


def _task(body: dict[str, Any]) -> str:
    for message in reversed(body["messages"]):
        if message["role"] == "user" and "Workflow step:" in (message.get("content") or ""):
            return str(message["content"]).split("\n\n---", 1)[0].strip()
    return ""


def interrupted_run(home: Path, workflow: Path, responder: FirstRequest) -> str:
    """``piw run`` of ``workflow`` until its last leaf is asked, then killed -9; the run id."""
    env = {**os.environ, "PIW_HOME": str(home)}
    process = subprocess.Popen(
        [PIW, "run", str(workflow)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    responder.kill = lambda: os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=600)
    assert responder.seen.is_set(), process.stderr.read() if process.stderr else ""
    return next(p.name for p in (home / "runs").iterdir() if not p.name.startswith("."))


def time_resumes(home: Path, run_id: str, responder: FirstRequest, times: int) -> list[float]:
    env = {**os.environ, "PIW_HOME": str(home)}
    found: list[float] = []
    for _ in range(times):
        responder.arrived, responder.prompts[:] = None, []
        responder.seen.clear()
        started = time.perf_counter()
        process = subprocess.Popen(
            [PIW, "resume", run_id], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        responder.kill = lambda p=process: os.kill(p.pid, signal.SIGKILL)  # type: ignore[misc]
        process.wait(timeout=600)
        assert responder.arrived is not None and responder.prompts[0] == "Last leaf.", (
            responder.prompts[:3],
            process.stderr.read() if process.stderr else "",
        )
        found.append(responder.arrived - started)
    return found


def resume_cost(folder: Path, committed: int, times: int) -> None:
    """Both runs are made first, then their resumes are timed in turn (floor, 1,000, floor, …), so a machine
    whose speed drifts moves both alike; the difference is taken pair by pair."""
    figures: dict[int, list[float]] = {0: [], committed: []}
    with OpenAIStub() as floor_stub, OpenAIStub() as many_stub:
        runs = []
        for leaves, stub in ((0, floor_stub), (committed, many_stub)):
            responder = FirstRequest()
            stub.respond = responder
            home = folder / f"home-resume-{leaves}"
            write_config(home, stub)
            workflow = write(folder / f"wf-{leaves}", "resumed", RESUMED, leaves)
            runs.append((leaves, home, interrupted_run(home, workflow, responder), responder))
        for _ in range(times):
            for leaves, home, run_id, responder in runs:
                figures[leaves] += time_resumes(home, run_id, responder, 1)
        warm = {
            leaves: in_process_resumes(folder, home, run_id, responder, times)
            for leaves, home, run_id, responder in runs
        }
    pairs = sorted(b - a for a, b in zip(figures[0], figures[committed], strict=True))
    floor, many = statistics.median(figures[0]), statistics.median(figures[committed])
    print(f"2. piw resume: process start to the first new request at the stub, median of {times}:")
    print(
        f"   no committed leaf (the start-up floor):  {floor * 1000:.0f} ms  (min {min(figures[0]) * 1000:.0f})"
    )
    print(
        f"   {committed:,} committed leaves:               {many * 1000:.0f} ms  (min "
        f"{min(figures[committed]) * 1000:.0f}); the leaves add {(many - floor) * 1000:.0f} ms"
    )
    print(
        f"   the leaves' part, pair by pair: median {statistics.median(pairs) * 1000:.0f} ms "
        f"({pairs[0] * 1000:.0f} .. {pairs[-1] * 1000:.0f})"
    )
    warm_floor, warm_many = statistics.median(warm[0]), statistics.median(warm[committed])
    print(f"   in one process, imports warm (resume_run on a fresh copy of the home, median of {times}):")
    print(
        f"   no committed leaf: {warm_floor * 1000:.0f} ms; {committed:,} committed leaves: {warm_many * 1000:.0f} ms"
    )
    verdict = (
        "met" if many <= 0.5 else ("MISSED" if warm_many > 0.5 else "met in process, MISSED by start-up")
    )
    print(f"   target <= 0.5 s: {verdict}")


def in_process_resumes(
    folder: Path, home: Path, run_id: str, responder: FirstRequest, times: int
) -> list[float]:
    """``resume_run`` in this process (the provider's imports paid once, before), each on a fresh copy of the
    interrupted home, timed to the first request; the copy's run then completes."""
    import shutil

    from rich.console import Console

    from piw.agent_steps.factory import agent_executor_factory
    from piw.run.runner import ForegroundOptions, resume_run

    found: list[float] = []
    for number in range(times + 1):
        copy = folder / f"{home.name}-copy-{number}"
        shutil.copytree(home, copy)
        responder.arrived, responder.prompts[:], responder.kill = None, [], None
        options = ForegroundOptions(
            agent_executor_factory=agent_executor_factory(copy, Console(file=io.StringIO()))
        )
        os.environ["PIW_HOME"] = str(copy)
        started = time.perf_counter()
        state = resume_run(run_id, copy, options)
        assert state.status == "completed", state.error
        assert responder.arrived is not None and responder.prompts[0] == "Last leaf.", responder.prompts[:3]
        if number:  # the first one warms the imports
            found.append(responder.arrived - started)
        shutil.rmtree(copy)
    return found


# ---- 3. the flow's own bookkeeping -----------------------------------------------------------------------------


def flow_main(n: int) -> Callable[[Flow], list[object]]:
    def main(flow: Flow) -> list[object]:
        def leaf(i: int) -> object:
            return flow.agent(f"Item {i}.")

        with flow.phase("all"):
            return flow.parallel(list(range(n)), leaf)

    return main


def flow_run(n: int, committed: frozenset[str]) -> float:
    flow = Flow({}, {}, lambda key, _p, _e, _t, _ph: {"key": key}, committed=committed, max_agents=n)
    started = time.perf_counter()
    flow_main(n)(flow)
    return time.perf_counter() - started


def bookkeeping(n: int = 1000) -> None:
    fresh = min(flow_run(n, frozenset()) for _ in range(5))
    keys = frozenset(f"all/leaf.{i}/leaf" for i in range(n))
    rerun = min(flow_run(n, keys) for _ in range(5))
    print(
        f"3. flow.agent bookkeeping per leaf ({n:,} leaves, 16 threads, no child step): {fresh / n * 1000:.3f} ms"
    )
    print(f"   rerun of main over {n:,} committed leaves (the flow alone): {rerun:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", type=int, default=200, help="agent steps per run in figure 1")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each workflow in figure 1")
    parser.add_argument("--committed", type=int, default=1000, help="committed leaves in figure 2")
    parser.add_argument("--resumes", type=int, default=5, help="timed resumes in figure 2")
    parser.add_argument("--only", choices=("1", "2", "3"), action="append", help="only these figures")
    args = parser.parse_args()
    only = set(args.only or "123")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "1" in only:
            overhead(folder, args.leaves, args.rounds)
        if "2" in only:
            resume_cost(folder, args.committed, args.resumes)
    if "3" in only:
        bookkeeping()


if __name__ == "__main__":
    main()
