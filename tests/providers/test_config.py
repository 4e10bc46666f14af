"""config.toml parsing, $NAME secrets, provider selection, display-safe summaries and the factory."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from piw.config.settings import (
    CompatConfig,
    PiwConfig,
    configured_secrets,
    load_config,
    parse_config,
    resolve_value,
)
from piw.errors import NeedsKey, ProviderError
from piw.providers.factory import build_provider
from piw.providers.openai_compat import OpenAICompatProvider
from piw.providers.redaction import RedactingProvider
from piw.providers.scripted import ScriptedProvider
from piw.providers.selection import describe_providers, select_provider

CONFIG = """
default = "local/qwen3"
durability = "flush"

[providers.local]
api = "openai-completions"
base_url = "http://127.0.0.1:11434/v1"
api_key = "$OLLAMA_API_KEY"
headers = { "X-Client" = "piw", "X-Token" = "$PIW_TEST_HEADER" }
compat = { max_tokens_field = "max_completion_tokens" }
models = [
  "qwen3",
  { id = "llama", context_window = 8192, max_tokens = 512, cost = { input = 1.0, output = 2.0 } },
]

[providers.cloud]
base_url = "https://user:pw@example.invalid/v1"
api_key = "sk-literal-secret-value"
models = ["big", "org/model"]

[agent]
max_turns = 7
system_prompt = "Be brief."
"""


def write(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def config(tmp_path: Path) -> PiwConfig:
    write(tmp_path, CONFIG)
    return load_config(tmp_path)


def test_parses_the_documented_shape(config: PiwConfig) -> None:
    local = config.providers["local"]
    assert [model.id for model in local.models] == ["qwen3", "llama"]
    llama = local.find_model("llama")
    assert llama is not None and llama.cost is not None and llama.cost.output == 2.0
    assert local.compat.max_tokens_field == "max_completion_tokens"
    assert local.compat.supports_usage_in_streaming is True
    assert config.agent.max_turns == 7 and config.agent.backend == "piw"
    assert config.durability == "flush"
    assert CompatConfig() == CompatConfig(
        max_tokens_field="max_tokens",
        supports_usage_in_streaming=True,
        requires_tool_result_name=False,
        supports_forced_tool_choice=False,
        structured_tool_choice="auto",
    )


def test_missing_file_is_an_empty_config(tmp_path: Path) -> None:
    assert load_config(tmp_path / "nowhere") == PiwConfig()


def test_unknown_top_level_key_is_a_one_line_error_naming_key_and_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'default = "local/x"\nprovider = "typo"\n')
    with pytest.raises(ProviderError) as caught:
        load_config(tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert "'provider'" in message and str(path) in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[providers.a]\nbase_url = "http://127.0.0.1/v1"\nbogus = 1\n', "providers.a.bogus"),
        ('[providers.a]\ncompat = { max_tokens_feild = "x" }\n', "providers.a.compat.max_tokens_feild"),
        (
            '[providers.a]\nmodels = [{ id = "m", cost = { input = 1, output = 1, extra = 2 } }]\n',
            "cost.extra",
        ),
        ("[agent]\nmax_turns = 0\n", "agent.max_turns"),
        ('[providers.a]\napi = "grpc"\n', "providers.a.api"),
        ("default = [", "Cannot parse"),
    ],
)
def test_invalid_config_errors_are_one_line_and_name_the_place(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProviderError) as caught:
        load_config(tmp_path)
    assert fragment in str(caught.value) and str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_dollar_name_resolution() -> None:
    assert resolve_value("$KEY", {"KEY": "v"}) == "v"
    assert resolve_value("literal $KEY", {}) == "literal $KEY"
    with pytest.raises(NeedsKey) as caught:
        resolve_value("$PIW_MISSING_KEY", {})
    assert caught.value.variable == "PIW_MISSING_KEY" and "PIW_MISSING_KEY" in str(caught.value)


def test_configured_secrets_cover_keys_and_dollar_headers_only(config: PiwConfig) -> None:
    secrets = configured_secrets(config, {"OLLAMA_API_KEY": "ollama-key", "PIW_TEST_HEADER": "hdr-token"})
    assert secrets == ["hdr-token", "ollama-key", "sk-literal-secret-value"]
    assert configured_secrets(config, {}) == ["sk-literal-secret-value"]


def test_selection_prefers_flags_then_env_then_default(config: PiwConfig) -> None:
    chosen = select_provider(config, env={})
    assert (chosen.provider, chosen.model) == ("local", "qwen3")
    chosen = select_provider(config, env={"PIW_PROVIDER": "cloud", "PIW_MODEL": "big"})
    assert (chosen.provider, chosen.model) == ("cloud", "big")
    chosen = select_provider(config, "local", "llama", env={"PIW_PROVIDER": "cloud", "PIW_MODEL": "big"})
    assert (chosen.provider, chosen.model) == ("local", "llama")
    assert chosen.model_settings is not None and chosen.model_settings.max_tokens == 512
    chosen = select_provider(config, model_flag="cloud/big", env={"PIW_PROVIDER": "local"})
    assert (chosen.provider, chosen.model) == ("cloud", "big")
    chosen = select_provider(config, env={"PIW_MODEL": "local/llama"})
    assert (chosen.provider, chosen.model) == ("local", "llama")


def test_the_default_model_does_not_follow_another_provider(config: PiwConfig) -> None:
    chosen = select_provider(config, "cloud", env={})
    assert (chosen.provider, chosen.model) == ("cloud", "big")


def test_a_model_id_with_a_slash_stays_whole_unless_the_prefix_is_a_provider(config: PiwConfig) -> None:
    chosen = select_provider(config, model_flag="org/model", env={"PIW_PROVIDER": "cloud"})
    assert (chosen.provider, chosen.model) == ("cloud", "org/model")


def test_unknown_provider_or_model_lists_the_configured_ones(config: PiwConfig) -> None:
    with pytest.raises(ProviderError, match="cloud, local, scripted") as caught:
        select_provider(config, "nope", env={})
    assert "'nope'" in str(caught.value)
    with pytest.raises(ProviderError, match="qwen3, llama"):
        select_provider(config, "local", "gpt-9", env={})


def test_no_selection_at_all_explains_how_to_choose(tmp_path: Path) -> None:
    two = parse_config({"providers": {"a": {}, "b": {}}})
    with pytest.raises(ProviderError, match="--provider"):
        select_provider(two, env={})
    one = parse_config({"providers": {"only": {"models": ["m"]}}})
    assert select_provider(one, env={}).provider == "only"


def test_scripted_is_selectable_without_any_config(tmp_path: Path) -> None:
    empty = load_config(tmp_path)
    chosen = select_provider(empty, "scripted", env={})
    assert (chosen.provider, chosen.model, chosen.settings.api) == ("scripted", "scripted", "scripted")
    script = tmp_path / "demo.replies.json"
    script.write_text(json.dumps([{"text": "hello"}]), encoding="utf-8")
    provider = build_provider(chosen, empty, tmp_path, script=script, env={})
    assert isinstance(provider, ScriptedProvider) and provider.pending() == 1
    with pytest.raises(ProviderError, match="--script"):
        build_provider(chosen, empty, tmp_path, env={})


def test_summary_never_shows_secret_values(config: PiwConfig) -> None:
    env = {"OLLAMA_API_KEY": "ollama-secret", "PIW_TEST_HEADER": "header-secret"}
    summaries = {summary.name: summary for summary in describe_providers(config, env)}
    dumped = json.dumps([summary.model_dump(mode="json", by_alias=True) for summary in summaries.values()])
    for secret in ("ollama-secret", "header-secret", "sk-literal-secret-value", "pw@"):
        assert secret not in dumped
    assert summaries["local"].api_key == "$OLLAMA_API_KEY" and summaries["local"].key_available
    assert summaries["local"].headers == {"X-Client": "(literal value set)", "X-Token": "$PIW_TEST_HEADER"}
    assert summaries["local"].is_default and not summaries["cloud"].is_default
    assert summaries["cloud"].api_key == "(literal key set)"
    assert summaries["cloud"].base_url == "https://***@example.invalid/v1"
    assert not describe_providers(config, {})[1].key_available


def test_factory_builds_the_openai_adapter_without_resolving_keys_early(
    config: PiwConfig, tmp_path: Path
) -> None:
    chosen = select_provider(config, env={})
    provider = build_provider(chosen, config, tmp_path, env={})
    # a config with a literal key gets its errors redacted: the adapter sits inside the redaction
    adapter = provider.inner if isinstance(provider, RedactingProvider) else provider
    assert isinstance(adapter, OpenAICompatProvider)
    assert (provider.name, provider.model) == ("local", "qwen3")


@pytest.mark.skipif(
    importlib.util.find_spec("anthropic") is not None, reason="the anthropic SDK is installed"
)
def test_anthropic_without_its_sdk_names_the_extra(tmp_path: Path) -> None:
    config = parse_config({"providers": {"claude": {"api": "anthropic-messages", "models": ["sonnet"]}}})
    chosen = select_provider(config, "claude", env={})
    with pytest.raises(ProviderError, match=r"pip install 'piw\[anthropic\]'"):
        build_provider(chosen, config, tmp_path, env={})
