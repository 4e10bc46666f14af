"""The ``llamacpp`` provider: a GGUF model served in process by llama.cpp's own server (extra ``piw[llamacpp]``).

It runs llama.cpp through the ``xllamacpp`` wheel, a prebuilt CPU build with llama.cpp's HTTP server inside, so
nothing needs compiling and there is no server to manage: the server binds ``127.0.0.1`` on a free port when the
first request comes, and stops with the run. Requests then go through the ``openai-completions`` adapter, which is
what the server speaks, with ``tool_choice: "required"`` on submit turns: llama.cpp then builds a grammar from the
step's typed ``workflow`` tool, so the model can only answer with a call of the right shape
(``docs/design/agent-steps.md`` §3.1). ``chat_template`` overrides the template bundled in the GGUF, for models whose
tool-call format that template misses (``docs/design/local-models.md``).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.resources
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from piw.config.settings import ProviderConfig
from piw.errors import ProviderError
from piw.providers.base import ChatRequest, ConfiguredProvider, ProviderEvent
from piw.providers.selection import ProviderSelection

INSTALL_HINT = "pip install 'piw[llamacpp]'"
BUILTIN_TEMPLATES = ("qwen-bare-json",)
"""Chat templates shipped with piw, by name (``piw/providers/templates/NAME.jinja``)."""
DEFAULT_N_CTX = 4096
DEFAULT_N_THREADS = 2
START_TIMEOUT_S = 120.0
"""Loading a 1.5B model on a busy 2-core machine can take a while; a server not healthy by then is an error."""


def import_runtime() -> Any:
    """The ``xllamacpp`` module, or a ``ProviderError`` naming the extra to install."""
    try:
        return importlib.import_module("xllamacpp")
    except ImportError as exc:
        raise ProviderError(f"The llamacpp provider needs the xllamacpp runtime: {INSTALL_HINT}") from exc


@dataclass(frozen=True)
class ServerSettings:
    """What the in-process server is started with; a pure function of the config (unit-tested)."""

    model_path: Path
    chat_template: str | None
    """The template text, or ``None`` for the one bundled in the GGUF."""
    n_ctx: int
    n_threads: int
    model_alias: str


def resolve_template(value: str | None, piw_home: Path) -> str | None:
    """A built-in template name, a file path (relative paths from ``$PIW_HOME``), or ``None``."""
    if value is None:
        return None
    if value in BUILTIN_TEMPLATES:
        return (
            importlib.resources.files("piw.providers")
            .joinpath("templates", f"{value}.jinja")
            .read_text("utf-8")
        )
    path = Path(value).expanduser()
    path = path if path.is_absolute() else piw_home / path
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        names = ", ".join(BUILTIN_TEMPLATES)
        raise ProviderError(
            f"chat_template {value!r} is neither a built-in template ({names}) nor a readable file: {exc}"
        ) from exc


def server_settings(settings: ProviderConfig, model: str, piw_home: Path) -> ServerSettings:
    """Check a ``llamacpp`` provider table and turn it into server settings, before anything is started."""
    if not settings.model_path:
        raise ProviderError(
            'The llamacpp provider needs model_path = "/path/to/model.gguf" in its [providers] table.'
        )
    path = Path(settings.model_path).expanduser()
    path = path if path.is_absolute() else piw_home / path
    if not path.is_file():
        raise ProviderError(
            f"llamacpp model_path {str(path)!r} is not a file; fetch one with scripts/local-model."
        )
    return ServerSettings(
        model_path=path,
        chat_template=resolve_template(settings.chat_template, piw_home),
        n_ctx=settings.n_ctx or DEFAULT_N_CTX,
        n_threads=settings.n_threads or DEFAULT_N_THREADS,
        model_alias=model,
    )


def client_settings(settings: ProviderConfig, port: int) -> ProviderConfig:
    """The ``openai-completions`` table that talks to the running server: loopback, no key, ``required`` tools."""
    compat = settings.compat.model_copy(
        update={"structured_tool_choice": "required", "supports_forced_tool_choice": False}
    )
    return ProviderConfig(
        api="openai-completions",
        base_url=f"http://127.0.0.1:{port}/v1",
        compat=compat,
        models=settings.models,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaCppProvider(ConfiguredProvider):
    """A GGUF model behind an in-process llama.cpp server, started on the first request."""

    def __init__(
        self, selection: ProviderSelection, *, piw_home: Path, env: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(selection, env=env)
        self.server = server_settings(
            self.settings, self.model, piw_home
        )  # config errors before any run starts
        self._runtime = import_runtime()
        self._lock = threading.Lock()
        self._handle: Any = None
        self._client: Any = None

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        yield from self._started().stream(request, cancel)

    def _started(self) -> Any:
        with self._lock:
            if self._client is None:
                from piw.providers.openai_compat import OpenAICompatProvider

                port = free_port()
                self._handle = self._start(port)
                atexit.register(self.close)
                client = replace(self.selection, settings=client_settings(self.settings, port))
                self._client = OpenAICompatProvider(client, env=self._env)
            return self._client

    def _start(self, port: int) -> Any:
        runtime, server = self._runtime, self.server
        params = runtime.CommonParams()
        params.model.path = str(server.model_path)
        params.hostnames = ["127.0.0.1"]
        params.port = port
        params.n_ctx = server.n_ctx
        params.n_parallel = 1
        params.cpuparams.n_threads = server.n_threads
        params.cpuparams_batch.n_threads = server.n_threads
        params.use_jinja = True
        params.model_alias = {server.model_alias}
        if server.chat_template is not None:
            params.chat_template = server.chat_template
        handle = runtime.Server(params)
        _wait_healthy(f"http://127.0.0.1:{port}/health", START_TIMEOUT_S)
        return handle

    def close(self) -> None:
        """Stop the server (idempotent); the run calls it when it ends, ``atexit`` as a fallback."""
        with self._lock:
            handle, self._handle, self._client = self._handle, None, None
        if handle is not None:
            stop = getattr(handle, "stop", None)
            if callable(stop):
                stop()
            del handle


def _wait_healthy(url: str, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > end:
            raise ProviderError(f"The llamacpp server did not become healthy within {timeout_s:g}s ({url}).")
        time.sleep(0.1)
