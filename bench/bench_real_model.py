"""Agent steps on a real local model: first-try validity, requests, tokens, rejections, runaways, wall time.

    python bench/bench_real_model.py --gguf /path/model.gguf [--runs 10] [--only one-line,triage]
    python bench/bench_real_model.py --base-url http://127.0.0.1:8080/v1 [--model NAME]

It installs nothing: bring your own model (``scripts/local-model`` fetches the pinned ones) and, for ``--gguf``, the
``piw[llamacpp]`` extra. With ``--gguf`` one llama.cpp server is started in process (``piw.providers.llamacpp``)
and shared by every run, so load time is paid once; with ``--base-url`` any OpenAI-compatible server is used.
Each run goes through ``piw.run.runner.start_run`` with the ``config.toml`` path ``piw run`` takes (a temporary
``PIW_HOME``), then the figures are read back from the run's bundle, as a user would read them.

Workloads: ``one-line`` (a single structured classification step, the issue-9 target), the shipped ``triage`` and
``review`` examples, ``triage-step`` (triage with its reply step on ``context="step"``) and the ``plain-summary``
built-in. Per step it prints: first-try valid (the first response
was an accepted submission, or for an assistant step a valid reply), requests, prompt tokens of the first request,
total prompt and output tokens, rejections, runaways (responses stopped at the output cap) and wall time, then
how many runs completed. Not a test; the figures go into the closing notes.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from piw.agent_steps.factory import agent_executor_factory
from piw.run.runner import ForegroundOptions, start_run

REPO = Path(__file__).resolve().parent.parent
ONE_LINE = """
from typing import Literal
from pydantic import BaseModel
from piw import agent, define_workflow

class Triage(BaseModel):
    route: Literal["bug", "feature"]
    reason: str

workflow = define_workflow(
    name="one-line", start_at="classify",
    nodes={"classify": agent(prompt=lambda ctx: "Classify this report:\\n" + ctx.input["text"],
                             expected_output=Triage)},
)
"""
REPORTS = [
    "The app crashes when I save.",
    "Please add a dark mode.",
    "Clicking export shows a blank page.",
    "It would be nice to sort the list by date.",
    "Login fails with error 500 since the update.",
]
WORKLOADS: dict[str, tuple[str, Any]] = {
    "one-line": ("one-line", lambda i: {"text": REPORTS[i % len(REPORTS)]}),
    "triage": (
        str(REPO / "workflows/examples/triage.workflow.py"),
        lambda i: {"text": REPORTS[i % len(REPORTS)]},
    ),
    "triage-step": ("triage-step", lambda i: {"text": REPORTS[i % len(REPORTS)]}),
    "review": (str(REPO / "workflows/examples/review.workflow.py"), lambda i: None),
    "plain-summary": (
        "plain-summary",
        lambda i: {
            "source": "Release 2.3 renames three configuration keys; the old names keep working as aliases.",
            "purpose": "Tell users what changes for them",
            "maxChars": 400,
        },
    ),
}


@dataclass
class StepFigures:
    runs: int = 0
    first_try_valid: int = 0
    requests: list[int] = field(default_factory=list)
    first_prompt: list[int] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    rejections: list[int] = field(default_factory=list)
    runaways: int = 0
    over_3_requests: int = 0
    seconds: list[float] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _tokens(usage: dict[str, Any]) -> int:
    return int(usage.get("input", 0)) + int(usage.get("cacheRead", 0)) + int(usage.get("cacheWrite", 0))


def read_steps(bundle: Path, figures: dict[str, StepFigures]) -> None:
    """Fold one run's trace and conversation into per-step figures."""
    trace = _lines(bundle / "trace.ndjson")
    entries = [line["entry"] for line in _lines(bundle / "session" / "entries.ndjson")]
    attempts: dict[str, str] = {}
    for event in trace:
        if event["type"] == "agent_prompt_sent":
            attempts.setdefault(event["attemptId"], event["nodeId"])
    current: str | None = None
    by_attempt: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        message = entry["message"]
        contract = (message.get("details") or {}).get("contract") if message.get("role") == "custom" else None
        if contract and contract.get("attemptId") in attempts:
            current = contract["attemptId"]
        if current is not None:
            by_attempt.setdefault(current, []).append(message)
    for event in trace:
        if event["type"] not in ("node_finished", "node_failed") or event.get("attemptId") not in attempts:
            continue
        node, messages = event["nodeId"], by_attempt.get(event["attemptId"], [])
        fig = figures.setdefault(node, StepFigures())
        fig.runs += 1
        assistants = [m for m in messages if m["role"] == "assistant" and not m.get("retried")]
        results = [m for m in messages if m["role"] == "toolResult" and m.get("toolName") == "workflow"]
        fig.requests.append(len(assistants))
        fig.over_3_requests += len(assistants) > 3
        if assistants:
            fig.first_prompt.append(_tokens(assistants[0].get("usage") or {}))
        fig.prompt.append(sum(_tokens(m.get("usage") or {}) for m in assistants))
        fig.output.append(sum(int((m.get("usage") or {}).get("output", 0)) for m in assistants))
        rejected = [r for r in results if (r.get("details") or {}).get("rejections")]
        fig.rejections.append(len(rejected))
        for r in rejected:
            reason = str(r["details"].get("reason", ""))[:100]
            fig.reasons[reason] = fig.reasons.get(reason, 0) + 1
        fig.runaways += sum(1 for m in assistants if m.get("stopReason") == "length")
        first = assistants[0] if assistants else None
        if first is not None:
            calls = [b for b in first.get("content") or [] if b.get("type") == "toolCall"]
            accepted = bool(results) and not results[0].get("isError") and bool(calls)
            assistant_ok = (
                not calls and first.get("stopReason") == "stop" and event["type"] == "node_finished"
            )
            fig.first_try_valid += accepted or (assistant_ok and len(assistants) == 1)
        outcome = event["payload"].get("outcome", "ok")
        fig.outcomes[outcome] = fig.outcomes.get(outcome, 0) + 1
        fig.seconds.append(event["payload"].get("durationMs", 0) / 1000)


def write_config(home: Path, base_url: str, model: str, max_tokens: int | None) -> None:
    entry = (
        f'{{ id = "{model}", context_window = 4096{f", max_tokens = {max_tokens}" if max_tokens else ""} }}'
    )
    (home / "config.toml").write_text(
        textwrap.dedent(
            f"""
            default = "local/{model}"
            [providers.local]
            api = "openai-completions"
            base_url = "{base_url}"
            compat = {{ structured_tool_choice = "required" }}
            models = [{entry}]
            """
        ),
        encoding="utf-8",
    )


def run_workload(
    name: str, runs: int, home: Path, workdir: Path
) -> tuple[dict[str, StepFigures], int, float]:
    reference, make_input = WORKLOADS[name]
    if reference == "one-line":
        path = workdir / "one-line.workflow.py"
        path.write_text(ONE_LINE, encoding="utf-8")
        reference = str(path)
    elif reference == "triage-step":
        # the triage example with its reply step on context="step", to compare what each request costs
        source = (REPO / "workflows/examples/triage.workflow.py").read_text(encoding="utf-8")
        path = workdir / "triage.workflow.py"
        path.write_text(
            source.replace(
                'status_detail="Drafting a reply",', 'status_detail="Drafting a reply", context="step",'
            )
        )
        reference = str(path)
    figures: dict[str, StepFigures] = {}
    completed = 0
    started = time.monotonic()
    for index in range(runs):
        console = Console(file=io.StringIO(), width=100, color_system=None)
        options = ForegroundOptions(agent_executor_factory=agent_executor_factory(home, console))
        try:
            state = start_run(reference, home, make_input(index), None, options)
        except Exception as exc:  # a provider or config error: report it and go on
            print(f"  {name} run {index + 1}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        completed += state.status == "completed"
        read_steps(home / "runs" / state.run_id, figures)
        print(f"  {name} run {index + 1}/{runs}: {state.status}", file=sys.stderr, flush=True)
    return figures, completed, time.monotonic() - started


def _mean(values: list[Any]) -> str:
    return f"{statistics.mean(values):.0f}" if values else "-"


def _range(values: list[Any]) -> str:
    return f"{min(values)}-{max(values)}" if values else "-"


def report(name: str, runs: int, figures: dict[str, StepFigures], completed: int, wall: float) -> None:
    print(f"\n{name}: {completed}/{runs} runs completed, {wall:.0f} s in all")
    print(
        f"  {'step':<12} {'runs':>4} {'1st valid':>9} {'requests':>9} {'>3 req':>6} {'1st prompt':>10} "
        f"{'prompt':>7} {'output':>7} {'rejected':>8} {'runaway':>7} {'s/step':>7}  outcomes"
    )
    for node, fig in figures.items():
        print(
            f"  {node:<12} {fig.runs:>4} {fig.first_try_valid:>4}/{fig.runs:<4} {_range(fig.requests):>9} "
            f"{fig.over_3_requests:>6} {_mean(fig.first_prompt):>10} {_mean(fig.prompt):>7} {_mean(fig.output):>7} "
            f"{sum(fig.rejections):>8} {fig.runaways:>7} {_mean(fig.seconds):>7}  "
            + ", ".join(f"{k} {v}" for k, v in sorted(fig.outcomes.items()))
        )
        for reason, count in sorted(fig.reasons.items(), key=lambda item: -item[1]):
            print(f"      rejected {count}x: {reason}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--gguf", help="a GGUF file, served in process (needs piw[llamacpp])")
    source.add_argument("--base-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", default="local-model", help="model id sent to the server")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--only", default="one-line,triage,review,plain-summary", help="comma-separated workloads"
    )
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (--gguf)")
    parser.add_argument("--ctx", type=int, default=4096, help="context size (--gguf)")
    parser.add_argument(
        "--chat-template", default="qwen-bare-json", help="built-in name or file; 'none' for the GGUF's"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="the model entry's max_tokens (default: none)"
    )
    args = parser.parse_args(argv)
    server = None
    base_url = args.base_url
    with tempfile.TemporaryDirectory(prefix="piw-bench-") as tmp:
        home, workdir = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        workdir.mkdir()
        if args.gguf:
            from piw.config.settings import ProviderConfig
            from piw.providers.llamacpp import LlamaCppProvider
            from piw.providers.selection import ProviderSelection

            template = None if args.chat_template == "none" else args.chat_template
            settings = ProviderConfig(api="llamacpp", model_path=str(Path(args.gguf).resolve()),
                                      chat_template=template, n_ctx=args.ctx, n_threads=args.threads)  # fmt: skip
            server = LlamaCppProvider(ProviderSelection("local", args.model, settings), piw_home=home)
            loading = time.monotonic()
            client = server._started()
            base_url = client.base_url
            print(f"llama.cpp server up at {base_url} in {time.monotonic() - loading:.1f} s", file=sys.stderr)
        assert base_url is not None
        write_config(home, base_url, args.model, args.max_tokens)
        print(f"model {args.gguf or args.base_url}, {args.runs} runs per workload, threads {args.threads}")
        try:
            for name in [n.strip() for n in args.only.split(",") if n.strip()]:
                figures, completed, wall = run_workload(name, args.runs, home, workdir)
                report(name, args.runs, figures, completed, wall)
                sys.stdout.flush()
        finally:
            if server is not None:
                server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
