"""How close ``piw run --plan`` comes to what the next run spends (issue 29: target expected within ±25 %).

For each workflow — a four-step chain, an outline / fan-out / final review, and the built-in ``orchestrate`` — and
each provider — ``scripted`` (replies files carrying usage) and the loopback stub of ``piw.testing`` through the
real openai-completions adapter (priced by ``[providers.stub.prices]``) — it runs ``--history`` runs to build the
home's history, then ``--repeats`` times: ``--plan --json``, then a real run, and compares the plan's expected
requests, input tokens, output tokens and cost with the run's recorded usage. Every reply's token counts are
jittered by up to ±``--jitter`` (seeded), as a real model's are, so the medians have something to be wrong about.
It prints the error of each quantity per workflow and provider (mean and worst |error|, in %) and the requests the
stub saw during ``--plan`` (must be 0). Not a test: ``python bench/bench_plan.py [--history 3 --repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from piw.testing import OpenAIStub, StubReply, replies_responder

PIW = str(Path(sys.executable).with_name("piw"))
BUILTINS = Path(__file__).resolve().parent.parent / "workflows" / "builtins"
QUANTITIES = ("requests", "input", "output", "cost")

CHAIN = """
from piw import agent, define_workflow, edge

workflow = define_workflow(
    name="chain",
    start_at="s1",
    nodes={f"s{i}": agent(prompt=lambda ctx, i=i: f"Step {i} of the report: " + ctx.input["text"],
                          expected_output="a JSON object with a word") for i in range(1, 5)},
    edges=[edge(f"s{i}", f"s{i + 1}") for i in range(1, 4)],
)
"""

REVIEW = """
from piw import action, agent, define_workflow, edge

def review_files(ctx):
    n = ctx.start_fan_out(len(ctx.input["files"]))
    return [ctx.run_agent(f"Review {name} in one sentence.", key=f"file-{i}").outcome
            for i, name in enumerate(ctx.input["files"][:n], 1)]

workflow = define_workflow(
    name="review",
    start_at="outline",
    nodes={
        "outline": agent(prompt=lambda ctx: "Outline a review of: " + ", ".join(ctx.input["files"]),
                         expected_output="a JSON object with points"),
        "files": action(review_files, fan_out=lambda ctx: len(ctx.input["files"])),
        "final": agent(prompt="Write the final review.", expected_output="a JSON object with text"),
    },
    edges=[edge("outline", "files"), edge("files", "final")],
)
"""

PLAN = [{"agent": "tester", "task": f"Check part {n}."} for n in range(1, 4)]


def workloads(folder: Path) -> list[tuple[str, str, dict[str, Any], list[str]]]:
    """``(name, workflow argument, input, node ids that ask a model)``."""
    (folder / "chain.workflow.py").write_text(CHAIN, encoding="utf-8")
    (folder / "review.workflow.py").write_text(REVIEW, encoding="utf-8")
    orchestrate = json.loads((BUILTINS / "orchestrate.input.json").read_text(encoding="utf-8"))
    return [
        ("chain", str(folder / "chain.workflow.py"), {"text": "The release slipped a week. " * 40},
         [f"s{i}" for i in range(1, 5)]),
        ("review", str(folder / "review.workflow.py"), {"files": ["a.py", "b.py", "c.py", "d.py"]},
         ["outline", *(f"files/file-{i}" for i in range(1, 5)), "final"]),
        ("orchestrate", "orchestrate", orchestrate, ["plan_submit", *(f"fan_out/task-{i}" for i in range(1, 4))]),
    ]  # fmt: skip


def output_of(node: str) -> Any:
    return PLAN if node == "plan_submit" else {"word": "w", "points": ["p"], "text": "t", "checked": True}


def piw(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIW_HOME": str(home)}
    return subprocess.run([PIW, *args], env=env, capture_output=True, text=True, timeout=300, check=False)


def usage_of(home: Path, run_id: str) -> dict[str, float]:
    usage = json.loads(piw(home, "inspect", run_id, "--json").stdout)["usage"] or {}
    return {q: float(usage.get(q) or 0) for q in QUANTITIES}


def scripted_replies(path: Path, nodes: list[str], rng: random.Random, jitter: float) -> None:
    def amount(base: int) -> int:
        return max(1, round(base * (1 + rng.uniform(-jitter, jitter))))

    replies = {node: [{"submit": output_of(node), "usage": {"input": amount(1500), "output": amount(200)}}]
               for node in nodes}  # fmt: skip
    path.write_text(json.dumps(replies), encoding="utf-8")


def jittered(serve: Any, rng: random.Random, jitter: float) -> Any:
    def respond(body: dict[str, Any]) -> StubReply:
        reply: StubReply = serve(body)
        usage = dict(reply.usage or {})
        for key in ("prompt_tokens", "completion_tokens"):
            usage[key] = max(1, round(int(usage.get(key, 1)) * (1 + rng.uniform(-jitter, jitter))))
        return replace(reply, usage=usage)

    return respond


def measure(provider: str, args: argparse.Namespace) -> list[tuple[str, dict[str, list[float]], int]]:
    rng = random.Random(29)
    results = []
    with tempfile.TemporaryDirectory() as tmp, OpenAIStub(models=("m",)) as stub:
        folder = Path(tmp)
        for name, workflow, input_value, nodes in workloads(folder):
            home = folder / f"home-{name}"
            home.mkdir()
            script = folder / f"{name}.replies.json"
            if provider == "stub":
                (home / "config.toml").write_text(
                    f'default = "stub/m"\n[providers.stub]\napi = "openai-completions"\nbase_url = "{stub.base_url}"\n'
                    'models = ["m"]\n[providers.stub.prices]\nm = { input = 3.0, output = 15.0 }\n',
                    encoding="utf-8",
                )
            launch = ["--provider", "scripted", "--script", str(script)] if provider == "scripted" else []
            common = ["run", workflow, "--input", json.dumps(input_value), *launch]

            def one_run(script: Path = script, nodes: list[str] = nodes, name: str = name,
                        common: list[str] = common, home: Path = home) -> str:  # fmt: skip
                if provider == "scripted":
                    scripted_replies(script, nodes, rng, args.jitter)
                else:
                    serve = replies_responder({n: [{"submit": output_of(n)}] for n in nodes})
                    stub.respond = jittered(serve, rng, args.jitter)
                done = piw(home, *common, "--json")
                if done.returncode != 0:
                    raise SystemExit(f"{name} on {provider}: {done.stderr.strip()}")
                return str(json.loads(done.stdout)["runId"])

            for _ in range(args.history):
                one_run()
            errors: dict[str, list[float]] = {q: [] for q in QUANTITIES}
            sent_by_plans = 0
            for _ in range(args.repeats):
                if provider == "scripted":
                    scripted_replies(script, nodes, rng, args.jitter)
                before = stub.request_count
                plan = json.loads(piw(home, *common, "--plan", "--json").stdout)
                sent_by_plans += stub.request_count - before
                measured = usage_of(home, one_run())
                for q in QUANTITIES:
                    expected, actual = plan["total"][q]["expected"], measured[q]
                    if expected is None:
                        errors[q].append(float("nan"))
                    elif actual == 0:
                        errors[q].append(0.0 if expected == 0 else float("inf"))
                    else:
                        errors[q].append(100.0 * (expected - actual) / actual)
            results.append((name, errors, sent_by_plans))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=3, help="runs before the first plan")
    parser.add_argument("--repeats", type=int, default=3, help="plan-then-run rounds measured")
    parser.add_argument("--jitter", type=float, default=0.2, help="relative jitter of each reply's tokens")
    args = parser.parse_args()
    print(f"history {args.history} runs, {args.repeats} measured rounds, token jitter ±{args.jitter:.0%}")
    print("error of the expected figure vs the next run: mean |error| / worst |error| (%)")
    print(f"{'provider':9} {'workflow':12} " + " ".join(f"{q:>15}" for q in QUANTITIES) + "  plan requests")
    worst = 0.0
    for provider in ("scripted", "stub"):
        for name, errors, sent in measure(provider, args):
            cells = []
            for q in QUANTITIES:
                values = [abs(v) for v in errors[q]]
                if provider == "scripted" and q == "cost":
                    cells.append(f"{'local $0':>15}")
                    continue
                mean, high = sum(values) / len(values), max(values)
                worst = max(worst, high)
                cells.append(f"{mean:6.1f} / {high:6.1f}")
            print(f"{provider:9} {name:12} " + " ".join(cells) + f"  {sent}")
    print(f"worst |error| over every quantity: {worst:.1f} % (target ≤ 25 %)")


if __name__ == "__main__":
    main()
