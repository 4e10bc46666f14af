"""``build_provider``: turn a selection and the config into a ready provider, cassette mode applied.

Adapters are imported here on demand, so choosing the scripted provider never imports an HTTP SDK and a
missing optional SDK only matters to whoever selects it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from piw.config.settings import PiwConfig, configured_secrets
from piw.errors import ProviderError
from piw.providers.base import Provider
from piw.providers.cassette import RecordingProvider, ReplayProvider, cassette_mode
from piw.providers.redaction import RedactingProvider
from piw.providers.selection import ProviderSelection

if TYPE_CHECKING:
    import httpx2


def cassette_path(selection: ProviderSelection, piw_home: Path, env: Mapping[str, str] | None = None) -> Path:
    """``PIW_PROVIDER_CASSETTE_FILE``, else ``$PIW_HOME/cassettes/<provider>.jsonl``."""
    explicit = (os.environ if env is None else env).get("PIW_PROVIDER_CASSETTE_FILE")
    return Path(explicit) if explicit else piw_home / "cassettes" / f"{selection.provider}.jsonl"


def build_provider(
    selection: ProviderSelection,
    config: PiwConfig,
    piw_home: Path,
    *,
    script: Path | None = None,
    http_client: httpx2.Client | None = None,
    env: Mapping[str, str] | None = None,
) -> Provider:
    """The provider for ``selection``; ``script`` feeds a scripted provider (``piw run --script``).

    With ``PIW_PROVIDER_CASSETTE=replay`` no adapter is built at all, so replay needs no key and no server.
    """
    mode = cassette_mode(env)
    if mode == "replay":
        return ReplayProvider(
            cassette_path(selection, piw_home, env), name=selection.provider, model=selection.model
        )
    secrets = configured_secrets(config, env)
    inner: Provider = _adapter(selection, piw_home, script, http_client, env)
    limit = selection.settings.rate_limit
    if limit is not None:  # one bucket for every caller on the machine, or the database (docs/rate-limits.md)
        from piw.providers.rate_limited import RateLimitedProvider, open_rate_limits

        inner = RateLimitedProvider(inner, open_rate_limits(piw_home), selection.provider, limit)
    if secrets:
        inner = RedactingProvider(inner, secrets)
    if mode == "record":
        path = cassette_path(selection, piw_home, env)
        return RecordingProvider(inner, path, secrets=secrets)
    return inner


def _adapter(
    selection: ProviderSelection,
    piw_home: Path,
    script: Path | None,
    http_client: httpx2.Client | None,
    env: Mapping[str, str] | None,
) -> Provider:
    settings = selection.settings
    if settings.api == "scripted":
        from piw.providers.scripted import ScriptedProvider

        path = script or (piw_home / settings.script if settings.script else None)
        if path is None:
            raise ProviderError(
                f"The scripted provider {selection.provider!r} needs replies: put them in NAME.replies.json "
                "beside NAME.workflow.py, pass --script FILE, or set `script` in its [providers] table."
            )
        return ScriptedProvider.from_file(path, name=selection.provider, model=selection.model)
    if settings.api == "llamacpp":
        from piw.providers.llamacpp import LlamaCppProvider

        return LlamaCppProvider(selection, piw_home=piw_home, env=env)
    if settings.api == "anthropic-messages":
        from piw.providers.anthropic_messages import AnthropicProvider

        return AnthropicProvider(selection, env=env)
    from piw.providers.openai_compat import OpenAICompatProvider

    return OpenAICompatProvider(selection, http_client=http_client, env=env)
