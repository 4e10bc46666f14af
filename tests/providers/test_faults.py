"""The provider fault suite: every way an OpenAI-compatible server can misbehave, through the loopback stub.

Each case runs a real ``piw run`` (the real ``openai-completions`` adapter over HTTP to ``piw.testing``'s stub) and
checks that it ends in the outcome ``agent-steps.md`` §4 names — retried while nothing visible has streamed, else
a failure, never an output from a broken response — that the outcome is recorded in the trace (and the retried
response in the session), and that the run is left resumable: its trace is whole, and ``piw resume`` either
continues it or says it already ended.

| case | outcome |
| --- | --- |
| 429 with ``Retry-After: 1`` | retried after 1 s, completes |
| 429 without it, 500, 503 | retried after the default back-off, completes |
| 500 every time | fails after 3 retries (4 requests) with ``HTTP 500: …`` |
| reset before the first byte | retried, completes |
| reset after text streamed | fails (no retry: the text was shown), no output |
| stream cut mid-text | fails, no output |
| stream cut mid tool call | retried (nothing visible streamed), completes |
| invalid tool-call JSON | a tool error to the model, which corrects itself: completes in 2 requests |
| a hang | ``timed_out`` at the deadline, the held request closed |
| empty ``choices`` | retried (no finish reason), completes |
| unknown finish reason after text | fails, no output |
| unknown finish reason, nothing visible | retried, completes |
| wrong content type (HTML) | retried; every time: fails naming the content type |
| a 10 MB error body | fails at once (400) with a bounded error line |
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from piw.store.trace import read_trace
from piw.testing import OpenAIStub, StubReply
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

ASSISTANT = "agent(prompt='Go.', expected_output=assistant_message(), timeout_s={timeout})"
SUBMIT = "agent(prompt='Go.', timeout_s={timeout})"


def submit(output: Any = None) -> StubReply:
    return StubReply.tool("workflow", {"action": "submit", "output": output or {"ok": True}})


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> tuple[float, ...]:
    """The real back-off schedule (2, 4, 8 s), scaled down so a test waits centiseconds, not seconds."""
    loop = importlib.import_module("piw.agent_steps.loop")  # ``piw.agent`` the attribute is the DSL helper
    delays = (0.01, 0.02, 0.03)
    monkeypatch.setattr(loop, "RETRY_DELAYS_S", delays)
    return delays


class Case:
    """One run against the stub, and what it left."""

    def __init__(self, cli: Cli, make_workflow: WorkflowMaker, stub: OpenAIStub) -> None:
        self.cli, self.make_workflow, self.stub = cli, make_workflow, stub
        (cli.home / "config.toml").write_text(
            f'default = "stub/m"\n[providers.stub]\napi = "openai-completions"\nbase_url = "{stub.base_url}"\n'
            'models = ["m"]\n',
            encoding="utf-8",
        )

    def run(
        self,
        replies: list[StubReply] | Callable[[dict[str, Any]], StubReply],
        node: str = ASSISTANT,
        timeout: float = 20,
    ) -> Case:
        self.stub.respond = replies
        path = self.make_workflow(
            "fault",
            "from piw import agent, assistant_message, define_workflow\n"
            f"workflow = define_workflow(name='fault', start_at='s', nodes={{'s': {node.format(timeout=timeout)}}})\n",
        )
        self.path = path
        self.done = self.cli("run", str(path), "--json")
        assert "Traceback" not in self.done.stderr, self.done.stderr
        self.result = json.loads(self.done.stdout)
        self.run_id = self.result["runId"]
        return self

    @property
    def trace(self) -> list[dict[str, Any]]:
        return trace_lines(self.cli.home, self.run_id)

    def node_event(self) -> dict[str, Any]:
        (event,) = [line for line in self.trace if line["type"] in ("node_finished", "node_failed")]
        return event

    def assistant_entries(self) -> list[dict[str, Any]]:
        path = self.cli.home / "runs" / self.run_id / "session" / "entries.ndjson"
        entries = [
            json.loads(line)["entry"]["message"] for line in path.read_text(encoding="utf-8").splitlines()
        ]
        return [entry for entry in entries if entry.get("role") == "assistant"]

    def resumable(self) -> None:
        """The trace is whole (no torn tail, every line valid) and resume answers for the run as it stands."""
        read = read_trace(self.cli.home / "runs" / self.run_id / "trace.ndjson")
        assert read.torn_bytes == 0 and read.events[-1].type.startswith("run_")
        again = self.cli("resume", self.run_id)
        status = self.result["status"]
        assert again.returncode == 2 and f"already ended ({status})" in again.stderr, again.stderr

    def completed(self, output: Any, requests: int) -> None:
        assert self.done.returncode == 0, (self.done.stdout, self.done.stderr)
        assert self.result["status"] == "completed" and self.result["finalOutput"] == output
        assert self.stub.request_count == requests
        event = self.node_event()
        assert event["type"] == "node_finished" and event["payload"]["output"] == output
        retried = [entry for entry in self.assistant_entries() if entry.get("retried")]
        assert (
            len(retried) == requests - 1
        )  # each failed response is on record, kept out of context and output
        self.resumable()

    def failed(self, error: str, requests: int, outcome: str = "failed") -> str:
        assert self.done.returncode == 1, (self.done.stdout, self.done.stderr)
        assert self.result["status"] == outcome and self.result["finalOutput"] is None
        assert error in self.result["error"], self.result["error"]
        assert self.stub.request_count == requests
        event = self.node_event()
        assert event["type"] == "node_failed" and event["payload"]["outcome"] == outcome
        assert error in event["payload"]["error"] and "output" not in event["payload"]
        assert self.trace[-1]["type"] == f"run_{outcome}"
        self.resumable()
        return str(event["payload"]["error"])


@pytest.fixture
def case(cli: Cli, make_workflow: WorkflowMaker, openai_stub: OpenAIStub) -> Case:
    return Case(cli, make_workflow, openai_stub)


# ---- HTTP errors -------------------------------------------------------------------------------------------


def test_429_with_retry_after_waits_what_the_server_asked(
    case: Case, fast_retries: tuple[float, ...]
) -> None:
    case.run([StubReply.http_error(429, retry_after=1), StubReply.text("fine")])
    case.completed("fine", requests=2)
    assert "↻ retry 1/3 in 1s: HTTP 429: stub error 429" in case.done.stderr
    (retried,) = case.assistant_entries()[:1]
    assert retried["stopReason"] == "error" and retried["errorMessage"] == "HTTP 429: stub error 429"


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_transient_status_is_retried_on_the_default_back_off(
    status: int, case: Case, fast_retries: tuple[float, ...]
) -> None:
    case.run([StubReply.http_error(status), StubReply.text("fine")])
    case.completed("fine", requests=2)
    assert f"↻ retry 1/3 in {fast_retries[0]:g}s: HTTP {status}: stub error {status}" in case.done.stderr


def test_a_500_that_never_ends_fails_after_three_retries(case: Case, fast_retries: tuple[float, ...]) -> None:
    case.run(lambda body: StubReply.http_error(500))
    case.failed("HTTP 500: stub error 500", requests=4)
    assert [e["retried"] for e in case.assistant_entries()] == [True, True, True, False]


def test_a_10_mb_error_body_fails_at_once_with_a_bounded_error(
    case: Case, fast_retries: tuple[float, ...]
) -> None:
    case.run([StubReply.http_error(400, message="x" * 10_000_000)])
    error = case.failed("HTTP 400: xxx", requests=1)
    assert len(error) < 1_000
    assert (case.cli.home / "runs" / case.run_id / "trace.ndjson").stat().st_size < 20_000


# ---- connections -------------------------------------------------------------------------------------------


def test_a_reset_before_the_first_byte_is_retried(case: Case, fast_retries: tuple[float, ...]) -> None:
    case.run([StubReply.reset(), StubReply.text("fine")])
    case.completed("fine", requests=2)


def test_a_reset_after_text_streamed_fails_without_a_retry(
    case: Case, fast_retries: tuple[float, ...]
) -> None:
    case.run([StubReply.reset(after_chunks=3, text="partial answer"), StubReply.text("never asked for")])
    error = case.failed("Connection reset by peer", requests=1)
    # the server was reached and replying: the error says so, not "cannot reach provider"
    assert "dropped the connection in the middle of its reply" in error and "cannot reach" not in error
    (entry,) = case.assistant_entries()
    assert entry["stopReason"] == "error" and not entry.get("retried")


def test_a_hang_times_out_at_the_deadline_and_closes_the_request(
    case: Case, fast_retries: tuple[float, ...]
) -> None:
    case.run([StubReply.hold()], timeout=1.5)
    case.failed("timed out after 1.5s", requests=1, outcome="timed_out")
    deadline = time.monotonic() + 5
    while case.stub.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert case.stub.disconnects == 1


# ---- broken streams ----------------------------------------------------------------------------------------


def test_a_stream_cut_mid_text_fails_and_is_never_output(case: Case, fast_retries: tuple[float, ...]) -> None:
    case.run([StubReply.text("half an ans", finish_reason=None, end_marker=False), StubReply.text("x")])
    case.failed("without a finish reason", requests=1)
    (entry,) = case.assistant_entries()
    assert entry["content"][0]["text"] == "half an ans" and entry["stopReason"] == "error"  # on record only


def test_a_stream_cut_mid_tool_call_is_retried(case: Case, fast_retries: tuple[float, ...]) -> None:
    cut = StubReply.tool(
        "workflow", {}, arguments_text='{"action": "submit", "out', finish_reason=None, end_marker=False
    )
    case.run([cut, submit()], node=SUBMIT)
    case.completed({"ok": True}, requests=2)


def test_an_unknown_finish_reason_with_nothing_visible_is_retried(
    case: Case, fast_retries: tuple[float, ...]
) -> None:
    odd = StubReply.tool("workflow", {"action": "submit", "output": {"ok": True}}, finish_reason="banana")
    case.run([odd, submit()], node=SUBMIT)
    case.completed({"ok": True}, requests=2)


def test_an_unknown_finish_reason_after_text_fails(case: Case, fast_retries: tuple[float, ...]) -> None:
    case.run([StubReply.text("an answer", finish_reason="banana"), StubReply.text("x")])
    case.failed("unknown finish reason 'banana'", requests=1)


def test_empty_choices_are_retried(case: Case, fast_retries: tuple[float, ...]) -> None:
    case.run([StubReply.empty_choices(), StubReply.text("fine")])
    case.completed("fine", requests=2)


def test_invalid_tool_json_is_a_tool_error_the_model_corrects(
    case: Case, fast_retries: tuple[float, ...]
) -> None:
    bad = StubReply.tool("workflow", {}, arguments_text='{"action": "submit", "output": {oops')
    case.run([bad, submit()], node=SUBMIT)
    assert case.done.returncode == 0 and case.result["finalOutput"] == {"ok": True}
    assert case.stub.request_count == 2
    second = case.stub.requests[1]["messages"]
    (tool_result,) = [m for m in second if m.get("role") == "tool"]
    assert tool_result["content"].startswith("Invalid workflow tool call: arguments are not a JSON object")
    assert case.node_event()["type"] == "node_finished"
    case.resumable()


def test_a_wrong_content_type_is_retried_then_fails_naming_it(
    case: Case, fast_retries: tuple[float, ...]
) -> None:
    page = StubReply.raw("<html><body>502 Bad Gateway</body></html>", "text/html")
    case.run(lambda body: page)
    case.failed("text/html", requests=4)


def test_a_wrong_content_type_once_is_retried(case: Case, fast_retries: tuple[float, ...]) -> None:
    case.run([StubReply.raw("<html>oops</html>", "text/html"), StubReply.text("fine")])
    case.completed("fine", requests=2)


# ---- resumable: piw killed while the provider hangs ---------------------------------------------------------


def test_piw_killed_while_the_provider_hangs_resumes_and_completes(
    cli: Cli, make_workflow: WorkflowMaker, openai_stub: OpenAIStub
) -> None:
    case = Case(cli, make_workflow, openai_stub)
    openai_stub.respond = [StubReply.hold()]
    path = make_workflow(
        "fault",
        "from piw import agent, assistant_message, define_workflow\n"
        "workflow = define_workflow(name='fault', start_at='s', nodes={'s': "
        f"{ASSISTANT.format(timeout=60)}}})\n",
    )
    process = cli.popen("run", str(path))
    deadline = time.monotonic() + 30
    while openai_stub.request_count < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert openai_stub.request_count == 1
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=20)
    run_id = next(p.name for p in (cli.home / "runs").iterdir() if not p.name.startswith("."))
    openai_stub.respond = [StubReply.text("after the crash")]
    done = cli("resume", run_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == "after the crash"
    resumed = [line for line in trace_lines(cli.home, run_id) if line["type"] == "run_resumed"]
    assert (
        len(resumed) == 1 and resumed[0]["payload"]["reattachedAttemptId"]
    )  # the same attempt, prompt on record
    del case
