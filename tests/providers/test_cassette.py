"""Cassettes: record real adapter streams against the stub, replay them with no server and no secrets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from piw.config.settings import parse_config
from piw.errors import ProviderError, ScriptExhausted
from piw.providers.base import ChatRequest, ProviderEvent, StepRef, complete
from piw.providers.cassette import RecordingProvider, ReplayProvider, cassette_mode
from piw.providers.factory import build_provider
from piw.providers.messages import UserMessage
from piw.providers.scripted import ScriptedProvider
from piw.providers.selection import select_provider
from piw.testing import OpenAIStub, StubReply

SECRET = "sk-test-secret-0123456789"


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as running:
        yield running


def ask(text: str, attempt: str = "a" * 32) -> ChatRequest:
    step = StepRef(run_id="r" * 32, node_id="review", attempt_id=attempt)
    return ChatRequest(model="stub-model", messages=[UserMessage(content=text)], step=step)


def events_of(provider: RecordingProvider | ReplayProvider, request: ChatRequest) -> list[ProviderEvent]:
    return list(provider.stream(request, threading.Event()))


def test_record_against_the_stub_then_replay_with_no_requests(stub: OpenAIStub, tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    stub.respond = [StubReply.text("first answer"), StubReply.tool("read", {"path": "x"})]
    recorder = RecordingProvider(stub.provider(api_key=SECRET), cassette, secrets=[SECRET])
    recorded = [events_of(recorder, ask("one")), events_of(recorder, ask("two"))]
    assert stub.request_count == 2
    assert stub.request_headers[0]["authorization"] == f"Bearer {SECRET}"

    records = [json.loads(line) for line in cassette.read_text(encoding="utf-8").splitlines()]
    assert [record["turn"] for record in records] == [1, 2]
    assert set(records[0]) == {
        "request",
        "requestSha256",
        "events",
        "turn",
        "provider",
        "model",
        "recordedAt",
    }
    assert records[0]["requestSha256"].startswith("sha256:")
    assert SECRET not in cassette.read_text(encoding="utf-8")

    replay = ReplayProvider(cassette)
    replayed = [events_of(replay, ask("one")), events_of(replay, ask("two"))]
    assert stub.request_count == 2, "replay must not reach the server"
    assert [[e.type for e in run] for run in replayed] == [[e.type for e in run] for run in recorded]
    assert complete(ReplayProvider(cassette), ask("one")).visible_text() == "first answer"
    assert replay.pending() == 0


def test_a_record_holding_a_secret_is_refused(stub: OpenAIStub, tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    stub.respond = [StubReply.text("ok")]
    recorder = RecordingProvider(stub.provider(), cassette, secrets=[SECRET])
    with pytest.raises(ProviderError, match="secret"):
        events_of(recorder, ask(f"my key is {SECRET}"))
    assert not cassette.exists() or SECRET not in cassette.read_text(encoding="utf-8")


def test_step_ids_are_placeholders_so_a_cassette_replays_in_a_new_attempt(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    recorder = RecordingProvider(ScriptedProvider([{"submit": {"ok": True}}], model="stub-model"), cassette)
    events_of(recorder, ask("submit it", attempt="1" * 32))
    assert "1" * 32 not in cassette.read_text(encoding="utf-8")
    message = complete(ReplayProvider(cassette), ask("submit it", attempt="2" * 32))
    assert message.tool_calls()[0].arguments["attempt"] == "2" * 32


def test_strict_replay_fails_on_a_changed_request_with_a_diff(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    events_of(RecordingProvider(ScriptedProvider(["answer"], model="stub-model"), cassette), ask("original"))
    with pytest.raises(ProviderError) as caught:
        complete(ReplayProvider(cassette), ask("changed"))
    diff = str(caught.value).splitlines()
    assert any(line.startswith("-") and '"original"' in line for line in diff)
    assert any(line.startswith("+") and '"changed"' in line for line in diff)
    assert complete(ReplayProvider(cassette, strict=False), ask("changed")).visible_text() == "answer"


def test_replay_beyond_the_cassette_raises(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    events_of(RecordingProvider(ScriptedProvider(["x"], model="stub-model"), cassette), ask("q"))
    replay = ReplayProvider(cassette)
    complete(replay, ask("q"))
    with pytest.raises(ScriptExhausted, match="request 2"):
        complete(replay, ask("q"))


def test_cassette_mode_reads_the_environment() -> None:
    assert cassette_mode({}) == "off"
    assert cassette_mode({"PIW_PROVIDER_CASSETTE": "Record"}) == "record"
    assert cassette_mode({"PIW_PROVIDER_CASSETTE": "replay"}) == "replay"
    with pytest.raises(ProviderError, match="record, replay or off"):
        cassette_mode({"PIW_PROVIDER_CASSETTE": "rewind"})


def test_factory_records_then_replays_without_a_key(stub: OpenAIStub, tmp_path: Path) -> None:
    config = parse_config(
        {"providers": {"stub": {"base_url": stub.base_url, "api_key": "$STUB_KEY", "models": ["stub-model"]}}}
    )
    selection = select_provider(config, "stub", env={})
    stub.respond = [StubReply.text("recorded")]
    record_env = {"PIW_PROVIDER_CASSETTE": "record", "STUB_KEY": SECRET}
    recorder = build_provider(selection, config, tmp_path, env=record_env)
    assert isinstance(recorder, RecordingProvider)
    complete(recorder, ask("hello"))
    cassette = tmp_path / "cassettes" / "stub.jsonl"
    assert cassette.exists() and SECRET not in cassette.read_text(encoding="utf-8")

    replayer = build_provider(selection, config, tmp_path, env={"PIW_PROVIDER_CASSETTE": "replay"})
    assert complete(replayer, ask("hello")).visible_text() == "recorded"
    assert stub.request_count == 1
