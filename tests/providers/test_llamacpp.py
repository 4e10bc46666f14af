"""The ``llamacpp`` provider's configuration (no weights are ever loaded here; the bench runs real models)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from piw.config.settings import ProviderConfig, parse_config
from piw.errors import ProviderError
from piw.providers.base import ChatRequest
from piw.providers.llamacpp import (
    INSTALL_HINT,
    LlamaCppProvider,
    client_settings,
    resolve_template,
    server_settings,
)
from piw.providers.messages import ToolSpec, UserMessage
from piw.providers.openai_request import build_body
from piw.providers.selection import ProviderSelection, select_provider

HAS_RUNTIME = importlib.util.find_spec("xllamacpp") is not None


def local(home: Path, **table: object) -> ProviderConfig:
    model = home / "model.gguf"
    model.write_bytes(b"GGUF")
    raw = {
        "providers": {"local": {"api": "llamacpp", "model_path": "model.gguf", "models": ["qwen"], **table}}
    }
    return parse_config(raw).providers["local"]


def test_the_table_becomes_server_settings(tmp_path: Path) -> None:
    settings = server_settings(local(tmp_path, n_ctx=2048, n_threads=1), "qwen", tmp_path)
    assert settings.model_path == tmp_path / "model.gguf"  # relative to PIW_HOME
    assert (settings.n_ctx, settings.n_threads, settings.model_alias) == (2048, 1, "qwen")
    assert settings.chat_template is None  # the GGUF's own template
    defaults = server_settings(local(tmp_path), "qwen", tmp_path)
    assert (defaults.n_ctx, defaults.n_threads) == (4096, 2)


def test_the_builtin_template_writes_bare_json_tool_calls(tmp_path: Path) -> None:
    text = resolve_template("qwen-bare-json", tmp_path)
    assert text is not None
    assert "reply with exactly one JSON object and nothing else" in text
    assert (
        "<tool_call>\\n" not in text and "'\\n<tool_call>" not in text
    )  # history calls are rendered bare too
    custom = tmp_path / "my.jinja"
    custom.write_text("{{ messages }}", encoding="utf-8")
    assert resolve_template("my.jinja", tmp_path) == "{{ messages }}"
    with pytest.raises(ProviderError, match="neither a built-in template"):
        resolve_template("missing.jinja", tmp_path)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"api": "llamacpp", "models": ["q"]}, "needs model_path"),
        ({"api": "llamacpp", "model_path": "absent.gguf"}, "is not a file"),
    ],
)
def test_a_missing_model_is_one_clear_error(tmp_path: Path, table: dict[str, object], message: str) -> None:
    settings = parse_config({"providers": {"local": table}}).providers["local"]
    with pytest.raises(ProviderError, match=message):
        server_settings(settings, "q", tmp_path)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"api": "openai-completions", "model_path": "m.gguf"}, "'model_path' is only allowed with api"),
        ({"api": "openai-completions", "n_threads": 2}, "'n_threads' is only allowed with api"),
        ({"api": "llamacpp", "model_path": "m.gguf", "base_url": "http://127.0.0.1:1/v1"}, "remove base_url"),
        ({"api": "llamacpp", "model_path": "m.gguf", "n_ctx": 0}, "n_ctx"),
        ({"api": "llamacpp", "model_path": "m.gguf", "gpu": True}, "unknown key"),
    ],
)
def test_config_keys_belong_to_their_api(table: dict[str, object], message: str) -> None:
    with pytest.raises(ProviderError, match=message):
        parse_config({"providers": {"local": table}})


def test_requests_go_to_the_loopback_server_with_required_tools(tmp_path: Path) -> None:
    client = client_settings(local(tmp_path), 43210)
    assert client.api == "openai-completions" and client.base_url == "http://127.0.0.1:43210/v1"
    assert client.api_key is None  # no key is sent to the in-process server
    workflow = ToolSpec(name="workflow", description="Submit.", parameters={"type": "object"})
    submit = ChatRequest(
        model="qwen", messages=[UserMessage(content="go")], tools=[workflow], max_tokens=2048
    )
    body = build_body(submit, client.compat, None)
    assert body["tool_choice"] == "required" and body["max_tokens"] == 2048
    plain = build_body(ChatRequest(model="qwen", messages=[UserMessage(content="hi")]), client.compat, None)
    assert "tool_choice" not in plain  # assistant turns are never forced


@pytest.mark.skipif(HAS_RUNTIME, reason="the xllamacpp runtime is installed")
def test_without_the_runtime_selecting_it_names_the_extra(tmp_path: Path) -> None:
    settings = local(tmp_path)
    with pytest.raises(ProviderError, match=r"pip install 'piw\[llamacpp\]'"):
        LlamaCppProvider(ProviderSelection("local", "qwen", settings), piw_home=tmp_path)
    assert INSTALL_HINT == "pip install 'piw[llamacpp]'"


def test_the_server_starts_lazily_and_stops_with_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime boundary is faked (no weights): nothing starts until the first request; close stops it."""
    started: list[object] = []
    stopped: list[object] = []

    class FakeParams:
        def __init__(self) -> None:
            self.model = type("M", (), {})()
            self.cpuparams = type("C", (), {})()
            self.cpuparams_batch = type("C", (), {})()

    class FakeServer:
        def __init__(self, params: FakeParams) -> None:
            started.append(params)

        def stop(self) -> None:
            stopped.append(self)

    runtime = type("Runtime", (), {"CommonParams": FakeParams, "Server": FakeServer})
    monkeypatch.setattr("piw.providers.llamacpp.import_runtime", lambda: runtime)
    monkeypatch.setattr("piw.providers.llamacpp._wait_healthy", lambda url, timeout_s: None)
    selection = ProviderSelection("local", "qwen", local(tmp_path, chat_template="qwen-bare-json"))
    provider = LlamaCppProvider(selection, piw_home=tmp_path)
    assert started == []  # lazy: building the provider starts nothing
    client = provider._started()
    (params,) = started
    assert params.hostnames == ["127.0.0.1"] and params.port == int(client.base_url.rsplit(":", 1)[1][:-3])
    assert params.use_jinja is True and params.n_parallel == 1 and params.cpuparams.n_threads == 2
    assert "exactly one JSON object" in params.chat_template
    assert provider._started() is client and len(started) == 1  # one server per provider
    provider.close()
    provider.close()  # idempotent
    assert len(stopped) == 1


def test_selection_accepts_a_llamacpp_default(tmp_path: Path) -> None:
    config = parse_config(
        {"default": "local/qwen", "providers": {"local": {"api": "llamacpp", "model_path": "m"}}}
    )
    assert select_provider(config, None, None).settings.api == "llamacpp"
