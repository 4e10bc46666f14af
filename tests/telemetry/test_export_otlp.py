"""``piw export RUN --otlp URL`` against a real OTLP/HTTP receiver on loopback (``docs/telemetry.md``).

The receiver decodes the protobuf requests with ``opentelemetry-proto``; the runs are real ``piw run``s of the
shipped ``triage`` example on the offline scripted provider (a ``workflow`` tool call, then an assistant reply).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver() -> OtlpReceiver:
    with OtlpReceiver() as running:
        yield running


def _triage(cli: Cli) -> str:
    done = cli("run", "triage", "--provider", "scripted", "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["runId"])


def test_spans_carry_the_genai_and_piw_attributes(cli: Cli, receiver: OtlpReceiver) -> None:
    run_id = _triage(cli)
    done = cli("export", run_id, "--otlp", receiver.endpoint)
    assert done.returncode == 0, done.stderr
    assert f"Exported run {run_id} to {receiver.endpoint}" in done.stdout

    spans = receiver.unique()
    (run,) = receiver.named("run ")
    assert run.name == "run triage" and run.parent_id == ""
    assert run.attributes["piw.run_id"] == run_id
    assert run.attributes["piw.status"] == "completed"
    assert run.attributes["gen_ai.workflow.name"] == "triage"
    assert run.resource["service.name"] == "piw"
    assert {span.trace_id for span in spans.values()} == {run.trace_id}

    agents = {span.attributes["piw.node_id"]: span for span in receiver.named("invoke_agent ")}
    assert set(agents) == {"classify", "bug"}
    for node, span in agents.items():
        assert span.parent_id == run.span_id
        assert span.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert span.attributes["gen_ai.agent.name"] == node
        assert span.attributes["piw.outcome"] == "ok"
        assert len(span.attributes["piw.attempt_id"]) == 32
        assert span.attributes["piw.cost_usd"] == 0.0
        assert run.start_ns <= span.start_ns <= span.end_ns <= run.end_ns

    chats = receiver.named("chat ")
    assert len(chats) == 2
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 0
        assert chat.attributes["gen_ai.usage.output_tokens"] == 0
        assert chat.parent_id in {span.span_id for span in agents.values()}
        assert chat.kind == 3  # SPAN_KIND_CLIENT

    (tool,) = receiver.named("execute_tool ")
    assert tool.attributes["gen_ai.tool.name"] == "workflow"
    assert tool.parent_id == agents["classify"].span_id
    # no content without --include-content: neither the prompt nor the reply left the machine
    everything = b"".join(receiver.bodies)
    assert b"Classify this report" not in everything and b"Thanks for the report" not in everything


def test_exporting_twice_gives_one_set_of_spans(cli: Cli, receiver: OtlpReceiver) -> None:
    run_id = _triage(cli)
    first = cli("export", run_id, "--otlp", receiver.endpoint, "--json")
    assert first.returncode == 0, first.stderr
    after_one = dict(receiver.unique())
    received_once = len(receiver.spans)
    second = cli("export", run_id, "--otlp", receiver.endpoint, "--json")
    assert second.returncode == 0, second.stderr

    assert len(receiver.spans) == 2 * received_once  # both exports arrived …
    assert receiver.unique().keys() == after_one.keys()  # … with the same ids: one set of spans
    assert json.loads(first.stdout) == json.loads(second.stdout)
    assert (
        json.loads(first.stdout)["spans"] == len(after_one) == 6
    )  # run, 2 attempts, 2 requests, 1 tool call


def test_content_only_with_include_content_and_never_a_secret(
    cli: Cli, receiver: OtlpReceiver, piw_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-telemetry-secret-0123456789"
    monkeypatch.setenv("TEL_KEY", secret)
    (piw_home / "config.toml").write_text(
        '[providers.other]\napi = "openai-completions"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key = "$TEL_KEY"\nmodels = ["m"]\n',
        encoding="utf-8",
    )
    flow = cli.cwd / "leak.workflow.py"
    flow.write_text(
        "import os\nfrom piw import define_workflow, compute\n"
        "workflow = define_workflow(name='leak', start_at='say', nodes={'say': compute(run=lambda ctx: "
        "{'said': 'key ' + os.environ['TEL_KEY']})})\n",
        encoding="utf-8",
    )
    done = cli("run", str(flow), "--json", env={"TEL_KEY": secret})
    assert done.returncode == 0, done.stderr
    leak_run = json.loads(done.stdout)["runId"]
    triage_run = _triage(cli)

    for run_id in (leak_run, triage_run):
        exported = cli(
            "export", run_id, "--otlp", receiver.endpoint, "--include-content", env={"TEL_KEY": secret}
        )
        assert exported.returncode == 0, exported.stderr
    everything = b"".join(receiver.bodies)
    assert secret.encode() not in everything
    (say,) = receiver.named("compute say")
    assert "[redacted]" in say.attributes["piw.output"]
    (bug,) = [s for s in receiver.named("invoke_agent ") if s.attributes["piw.node_id"] == "bug"]
    assert "Write a short reply" in bug.attributes["gen_ai.input.messages"]
    replies = [s.attributes.get("gen_ai.output.messages", "") for s in receiver.named("chat ")]
    assert any("Thanks for the report" in reply for reply in replies)
    (tool,) = receiver.named("execute_tool ")
    assert "Saving crashes the app." in tool.attributes["gen_ai.tool.call.arguments"]


def test_a_collector_that_is_down_is_one_line_and_a_non_zero_exit(cli: Cli, receiver: OtlpReceiver) -> None:
    run_id = _triage(cli)
    receiver.status = 400  # refuses the request: no retries, a clear failure
    done = cli("export", run_id, "--otlp", receiver.endpoint)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"Error: The collector at {receiver.endpoint} did not accept the spans; check that it runs and listens "
        "for OTLP/HTTP there."
    ]
    bad = cli("export", run_id, "--otlp", "ftp://example")
    assert bad.returncode == 2 and "is not an OTLP/HTTP endpoint" in bad.stderr
    both = cli("export", run_id)
    assert both.returncode == 2 and "Give either a folder" in both.stderr
