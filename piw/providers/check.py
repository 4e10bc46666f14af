"""``piw providers --check``: can each configured provider be reached with its URL, key and headers?

One bounded request per provider (``CHECK_TIMEOUT_S``), never a model turn that costs anything: the server's models
list (``GET {base_url}/models`` for ``openai-completions``, ``GET {base_url}/v1/models`` for ``anthropic-messages``).
A server without a models list (404/405) is asked for one token of one chat completion instead. ``scripted`` and
``llamacpp`` make no request: their replies file, or model file and runtime, are checked on disk. The result says what
failed in the words a run would use (``docs/providers.md`` §4), with every configured secret redacted, so the check
is the first thing to run when a run cannot reach its model (``docs/cli.md``, ``piw providers``).
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from piw.config.settings import (
    PiwConfig,
    ProviderConfig,
    provider_secrets,
    resolve_api_key,
    resolve_headers,
)
from piw.errors import PiwError
from piw.providers import guard_base_url, is_loopback_url
from piw.providers.failures import failed_to_connect, shown_url, status_message
from piw.providers.redaction import redact

CHECK_TIMEOUT_S = 5.0
"""The whole request's bound: a provider that cannot list its models in 5 s is reported, not waited for."""
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class CheckResult:
    """One provider's check: ``ok``, what was done or what failed (``detail``), and how long it took."""

    provider: str
    ok: bool
    detail: str
    elapsed_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "detail": self.detail, "elapsedMs": self.elapsed_ms}


def check_providers(
    config: PiwConfig,
    piw_home: Path,
    *,
    env: Mapping[str, str] | None = None,
    client: httpx2.Client | None = None,
) -> dict[str, CheckResult]:
    """Every configured provider's check, by name (in name order)."""
    return {
        name: check_provider(name, settings, piw_home, env=env, client=client)
        for name, settings in sorted(config.providers.items())
    }


def check_provider(
    name: str,
    settings: ProviderConfig,
    piw_home: Path,
    *,
    env: Mapping[str, str] | None = None,
    client: httpx2.Client | None = None,
) -> CheckResult:
    began = time.monotonic()
    try:
        ok, detail = _check(name, settings, piw_home, env, client)
    except PiwError as exc:  # an unset $NAME key, a refused non-loopback URL in tests, a missing runtime
        ok, detail = False, str(exc)
    detail = redact(detail, provider_secrets(settings, env))
    return CheckResult(name, ok, detail, round((time.monotonic() - began) * 1000))


def _check(
    name: str,
    settings: ProviderConfig,
    piw_home: Path,
    env: Mapping[str, str] | None,
    client: httpx2.Client | None,
) -> tuple[bool, str]:
    if settings.api == "scripted":
        return _check_script(settings, piw_home)
    if settings.api == "llamacpp":
        return _check_llamacpp(settings, piw_home)
    anthropic = settings.api == "anthropic-messages"
    base = (settings.base_url or (ANTHROPIC_DEFAULT_URL if anthropic else OPENAI_DEFAULT_URL)).rstrip("/")
    guard_base_url(base)
    key = resolve_api_key(settings, env)
    headers = resolve_headers(settings, env)
    if anthropic:
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {}), **headers}
    elif key and not any(header.lower() == "authorization" for header in headers):
        headers = {"Authorization": f"Bearer {key}", **headers}
    url = f"{base}/v1/models" if anthropic else f"{base}/models"
    connect = 2.0 if is_loopback_url(base) else CHECK_TIMEOUT_S
    timeout = httpx2.Timeout(CHECK_TIMEOUT_S, connect=connect)
    http = client or httpx2.Client(timeout=timeout, follow_redirects=True)
    try:
        try:
            response = http.get(url, headers=headers, timeout=timeout)
            if response.status_code in (404, 405) and not anthropic:
                return _check_chat(http, base, headers, timeout, settings)
        except httpx2.HTTPError as exc:
            return False, _unreachable(name, base, exc)
        if response.status_code >= 400:
            return False, f"GET {url}: {status_message(response.status_code, _error_text(response))}"
        return True, f"GET {url}: {response.status_code}; " + _listed(response, settings)
    finally:
        if client is None:
            http.close()


def _check_chat(
    http: httpx2.Client, base: str, headers: dict[str, str], timeout: httpx2.Timeout, settings: ProviderConfig
) -> tuple[bool, str]:
    """A server without a models list: one chat completion of at most one token."""
    url = f"{base}/chat/completions"
    model = settings.models[0].id if settings.models else "default"
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "stream": False,
    }
    response = http.post(url, headers=headers, json=body, timeout=timeout)
    if response.status_code >= 400:
        return False, f"POST {url}: {status_message(response.status_code, _error_text(response))}"
    return True, f"POST {url}: {response.status_code} (the server has no models list; one 1-token request)"


def _unreachable(name: str, base: str, exc: httpx2.HTTPError) -> str:
    if isinstance(exc, httpx2.TimeoutException) and not failed_to_connect(exc):
        return f"Request timed out: no answer from provider {name!r} at {shown_url(base)} within {CHECK_TIMEOUT_S:g} s."
    cause = (
        "timed out connecting" if isinstance(exc, httpx2.TimeoutException) else str(exc) or type(exc).__name__
    )
    return (
        f"Connection error: cannot reach provider {name!r} at {shown_url(base)} ({cause}). Check that the server "
        "is running and reachable there, and the provider's base_url in config.toml."
    )


def _listed(response: httpx2.Response, settings: ProviderConfig) -> str:
    """How many models the server lists, and which configured ones it does not."""
    try:
        data = response.json().get("data")
        served = {str(item.get("id")) for item in data if isinstance(item, dict)}
    except (ValueError, AttributeError, TypeError):
        return "answered, but not with a models list"
    noun = "model" if len(served) == 1 else "models"
    text = f"lists {len(served)} {noun}"
    missing = [model.id for model in settings.models if model.id not in served]
    if missing and served:
        text += f"; not among them: {', '.join(missing)} (a request for it may fail)"
    return text


def _error_text(response: httpx2.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    inner = body.get("error", body) if isinstance(body, dict) else body
    message = inner.get("message") if isinstance(inner, dict) else inner
    return message if isinstance(message, str) else json.dumps(body)[:500]


def _check_script(settings: ProviderConfig, piw_home: Path) -> tuple[bool, str]:
    if not settings.script:
        return True, "offline; replies come from NAME.replies.json beside the workflow, or --script FILE"
    path = piw_home / settings.script
    if not path.is_file():
        return False, f"the replies file {path} does not exist"
    from piw.providers.scripted import ScriptedProvider

    ScriptedProvider.from_file(path)  # a malformed file raises its own ProviderError
    return True, f"offline; replies from {path}"


def _check_llamacpp(settings: ProviderConfig, piw_home: Path) -> tuple[bool, str]:
    if importlib.util.find_spec("xllamacpp") is None:
        return False, "the llamacpp provider needs the xllamacpp runtime: pip install 'piw[llamacpp]'"
    if not settings.model_path:
        return False, "no model_path is set"
    path = Path(settings.model_path).expanduser()
    path = path if path.is_absolute() else piw_home / path
    if not path.is_file():
        return False, f"the model file {path} does not exist"
    return True, f"model file {path} found (the in-process server starts with the first request)"
