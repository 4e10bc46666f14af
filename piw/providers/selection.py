"""Which provider and model a run uses, and a display-safe summary of the configured ones.

Precedence (``docs/design/agent-steps.md`` §8.1): ``--provider``/``--model`` (or ``--model provider/model``), then
``PIW_PROVIDER``/``PIW_MODEL``, then ``default``. The built-in ``scripted`` provider is always selectable,
so the offline demo needs no config file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from piw.config.settings import ModelConfig, PiwConfig, ProviderConfig
from piw.env_refs import env_reference
from piw.errors import ProviderError

SCRIPTED = "scripted"
SCRIPTED_SETTINGS = ProviderConfig(api="scripted")
"""The built-in scripted provider, used when the config does not define one named ``scripted``."""


@dataclass(frozen=True)
class ProviderSelection:
    """The chosen provider and model; ``model_settings`` is ``None`` for a model the config does not list."""

    provider: str
    model: str
    settings: ProviderConfig
    model_settings: ModelConfig | None = None


def select_provider(
    config: PiwConfig,
    provider_flag: str | None = None,
    model_flag: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ProviderSelection:
    """Apply flag > environment > ``default``; unknown names fail with the configured alternatives."""
    environment = os.environ if env is None else env
    providers = _known_providers(config)
    default_provider, default_model = _split(config.default or "")

    flag_provider, flag_model = provider_flag or None, model_flag or None
    if flag_provider is None and flag_model is not None:
        flag_provider, flag_model = _split_qualified(flag_model, providers)
    env_provider = environment.get("PIW_PROVIDER") or None
    env_model = environment.get("PIW_MODEL") or None
    if env_provider is None and env_model is not None:
        env_provider, env_model = _split_qualified(env_model, providers)

    provider = flag_provider or env_provider or default_provider
    if provider is None and len(config.providers) == 1:
        provider = next(iter(config.providers))
    if provider is None:
        raise ProviderError(
            "No provider selected; pass --provider, set PIW_PROVIDER or set `default` in config.toml. "
            + _listing("providers", sorted(providers), config)
        )
    settings = providers.get(provider)
    if settings is None:
        raise ProviderError(
            f"Unknown provider {provider!r}. " + _listing("providers", sorted(providers), config)
        )

    # The default's model belongs to the default's provider; it must not leak onto another provider.
    model = flag_model or env_model or (default_model if provider == default_provider else None)
    if model is None and settings.models:
        model = settings.models[0].id
    if model is None:
        if settings.api == "scripted":
            model = SCRIPTED
        else:
            raise ProviderError(
                f"No model selected for provider {provider!r}; pass --model or list `models`."
            )
    model_settings = settings.find_model(model)
    if settings.models and model_settings is None:
        listed = [entry.id for entry in settings.models]
        raise ProviderError(
            f"Unknown model {model!r} for provider {provider!r}. " + _listing("models", listed, config)
        )
    return ProviderSelection(provider, model, settings, settings.priced(model_settings, model))


def _known_providers(config: PiwConfig) -> dict[str, ProviderConfig]:
    return {SCRIPTED: SCRIPTED_SETTINGS, **config.providers}


def _split(qualified: str) -> tuple[str | None, str | None]:
    """``provider/model`` or a bare provider name (``default = "local"``)."""
    if not qualified:
        return None, None
    provider, slash, model = qualified.partition("/")
    return provider, (model if slash and model else None)


def _split_qualified(model: str, providers: Mapping[str, ProviderConfig]) -> tuple[str | None, str]:
    """``--model local/qwen3`` names a provider only when the prefix is one; ``org/model`` ids stay whole."""
    prefix, slash, rest = model.partition("/")
    if slash and rest and prefix in providers:
        return prefix, rest
    return None, model


def _listing(kind: str, names: list[str], config: PiwConfig) -> str:
    where = f" in {config.source}" if config.source else ""
    if not names:
        return f"No {kind} are configured{where}."
    return f"Configured {kind}{where}: {', '.join(names)}."


# --- display ---------------------------------------------------------------------------------------------


class _View(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class ModelSummary(_View):
    id: str
    context_window: int | None
    max_tokens: int | None
    priced: bool


class ProviderSummary(_View):
    """What ``piw providers`` shows. Secrets appear only as ``$NAME`` or ``(literal key set)``."""

    name: str
    api: str
    base_url: str | None
    api_key: str
    key_available: bool
    headers: dict[str, str]
    models: list[ModelSummary]
    is_default: bool


def describe_providers(config: PiwConfig, env: Mapping[str, str] | None = None) -> list[ProviderSummary]:
    """A summary safe to print: no key or secret header value, no credentials embedded in a URL."""
    environment = os.environ if env is None else env
    default_provider = (config.default or "").partition("/")[0]
    summaries = []
    for name, settings in sorted(config.providers.items()):
        api_key, available = _describe_secret(settings.api_key, environment, "(literal key set)")
        headers = {
            header: _describe_secret(value, environment, "(literal value set)")[0]
            for header, value in settings.headers.items()
        }
        models = [
            ModelSummary(
                id=model.id,
                context_window=model.context_window,
                max_tokens=model.max_tokens,
                priced=model.cost is not None,
            )
            for model in settings.models
        ]
        summaries.append(
            ProviderSummary(
                name=name,
                api=settings.api,
                base_url=_redact_url(settings.base_url),
                api_key=api_key,
                key_available=available,
                headers=headers,
                models=models,
                is_default=name == default_provider,
            )
        )
    return summaries


def _describe_secret(value: str | None, env: Mapping[str, str], literal: str) -> tuple[str, bool]:
    """``(display, available)``: a literal is never echoed, since header values can be tokens too."""
    if value is None:
        return "(none)", True
    name = env_reference(value)
    if name is None:
        return literal, True
    return f"${name}", name in env


def _redact_url(url: str | None) -> str | None:
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, f"***@{netloc}", parts.path, parts.query, parts.fragment))
