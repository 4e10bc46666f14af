"""A waiting gate is posted once to a webhook, signed over its body, and its tokens answer it once
(``docs/channels.md``)."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest

from piw.channels.answer import answer_with_token
from piw.errors import AnswerTokenRefused
from piw.store.db.channels import open_channel_store
from piw.store.db.run_database import open_run_database
from tests.support.channel_setup import GATE, SECRET, SECRET_ENV, webhook_table, write_channels
from tests.support.channel_stubs import Receiver, serving
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker


@pytest.fixture
def receiver() -> Receiver:
    with serving(Receiver()) as stub:
        yield stub


def _waiting(cli: Cli, path: Path) -> str:
    done = cli("run", str(path), "--json", env={SECRET_ENV: SECRET})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "waiting"
    return str(result["runId"])


def test_a_waiting_gate_is_posted_once_signed_and_answered_with_its_token(
    cli: Cli, make_workflow: WorkflowMaker, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_channels(cli.home, webhook_table(receiver.url, extra='answer_url = "https://piw.example.org"'))
    run_id = _waiting(cli, make_workflow("gate", GATE))

    (post,) = receiver.received
    assert post.path == "/hook"
    expected = "sha256=" + hmac.new(SECRET.encode(), post.body, hashlib.sha256).hexdigest()
    assert post.headers["x-piw-signature"] == expected
    body = post.json()
    assert body["runId"] == run_id and body["nodeId"] == "approve"
    assert body["request"]["title"] == "Ship <b>1.2</b> & tag it?"
    assert body["answerPage"].startswith("https://piw.example.org/answer/")
    tokens = {item["choice"]: item["token"] for item in body["answers"]}
    assert set(tokens) == {"ship", "hold"}

    # The trace says a post was queued, on which channel; never a token or the secret.
    trace = (cli.home / "runs" / run_id / "trace.ndjson").read_text()
    (queued,) = [json.loads(line) for line in trace.splitlines() if '"notification_queued"' in line]
    assert queued["payload"]["channel"] == "hook" and queued["payload"]["kind"] == "channel"
    for secret in (SECRET, *tokens.values()):
        assert secret not in trace

    # A second pass (another host, a rerun) sends nothing more.
    assert cli("host", "--once", env={SECRET_ENV: SECRET}).returncode == 0
    assert len(receiver.received) == 1

    monkeypatch.setenv(SECRET_ENV, SECRET)
    later = open_channel_store(cli.home, clock=lambda: 2**62)  # past every token's expiry
    with pytest.raises(AnswerTokenRefused):
        answer_with_token(cli.home, tokens["ship"], None, {}, "webhook hook: late", store=later)
    receipt = answer_with_token(cli.home, tokens["ship"], None, {}, "webhook hook: alice")
    decision = open_run_database(cli.home).decisions.get_decision(body["decisionId"])
    assert decision is not None and decision.status == "resolved"
    assert decision.provenance == "human" and decision.answered_by == "webhook hook: alice"
    assert decision.continuation_run_id == receipt.continuation_run_id

    with pytest.raises(AnswerTokenRefused):  # used
        answer_with_token(cli.home, tokens["ship"], None, {}, "webhook hook: mallory")
    with pytest.raises(AnswerTokenRefused):  # its wait is over
        answer_with_token(cli.home, tokens["hold"], None, {}, "webhook hook: mallory")
