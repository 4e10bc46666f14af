"""``$PIW_HOME/config.toml``: providers, models, prices, compat knobs, agent settings and ``$NAME`` secrets.

The file is read with ``tomllib`` into strict models (``extra="forbid"``): a typo is an error naming the key
and the file, never a silently ignored setting (``docs/design/agent-steps.md`` §8.1). Secrets stay as written (``$NAME``
references or literals) until a request needs them, so config objects can be shown and logged safely.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from piw.config.budget import BudgetTable
from piw.config.channels import ChannelTable
from piw.config.mcp_servers import McpServerConfig, check_server_names
from piw.config.path import config_path
from piw.config.prices import ModelPrice, unknown_price_model
from piw.config.rate_limits import RateLimit
from piw.config.retention import RetentionTable
from piw.config.telemetry import TelemetryTable
from piw.env_refs import env_reference, resolve_value
from piw.errors import ProviderError

TOP_LEVEL_KEYS = (
    "default",
    "durability",
    "import_timeout_s",
    "providers",
    "agent",
    "database",
    "mcp",
    "telemetry",
    "channels",
    "retention",
    "budget",
)
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenCounts(Protocol):
    """The token counts of a reply (``piw.providers.messages.Usage`` has them)."""

    @property
    def input(self) -> int: ...
    @property
    def output(self) -> int: ...
    @property
    def cache_read(self) -> int: ...
    @property
    def cache_write(self) -> int: ...


class ModelCost(_Strict):
    """Prices in USD per million tokens. Unset cache prices fall back to the input price, never to free."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)

    def price(self, usage: TokenCounts) -> float:
        """USD for the tokens in ``usage``."""
        cache_read = self.input if self.cache_read is None else self.cache_read
        cache_write = self.input if self.cache_write is None else self.cache_write
        total = (
            usage.input * self.input
            + usage.output * self.output
            + usage.cache_read * cache_read
            + usage.cache_write * cache_write
        )
        return total / 1_000_000


class ModelConfig(_Strict):
    """One model entry; ``models = ["qwen3"]`` is shorthand for ``[{ id = "qwen3" }]``."""

    id: str = Field(min_length=1)
    context_window: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    cost: ModelCost | None = None


class CompatConfig(_Strict):
    """Knobs for OpenAI-compatible servers that differ from OpenAI (``docs/design/agent-steps.md`` §8.2)."""

    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    supports_usage_in_streaming: bool = True
    requires_tool_result_name: bool = False
    supports_forced_tool_choice: bool = False
    structured_tool_choice: Literal["auto", "required"] = "auto"


LLAMACPP_KEYS = ("model_path", "chat_template", "n_ctx", "n_threads")


class ProviderConfig(_Strict):
    """One ``[providers.NAME]`` table."""

    api: Literal["openai-completions", "anthropic-messages", "scripted", "llamacpp"] = "openai-completions"
    base_url: str | None = None
    api_key: str | None = None
    """``$NAME`` reads the environment at request time; anything else is a literal key."""
    headers: dict[str, str] = Field(default_factory=dict)
    compat: CompatConfig = Field(default_factory=CompatConfig)
    models: list[ModelConfig] = Field(default_factory=list)
    script: str | None = None
    """Scripted providers only: a reply file, relative to ``$PIW_HOME``."""
    price_per_mtok_in: float | None = Field(default=None, ge=0)
    """USD per million input tokens for every model of this provider that sets no ``cost`` of its own."""
    price_per_mtok_out: float | None = Field(default=None, ge=0)
    """USD per million output tokens (with ``price_per_mtok_in``)."""
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """``[providers.NAME.prices]``: per model input/output/cached USD per million tokens (``piw.config.prices``)."""

    @model_validator(mode="after")
    def _prices_together(self) -> ProviderConfig:
        if (self.price_per_mtok_in is None) != (self.price_per_mtok_out is None):
            raise ValueError("set both price_per_mtok_in and price_per_mtok_out, or neither")
        return self

    def priced(self, model: ModelConfig | None, model_id: str) -> ModelConfig | None:
        """``model`` with the provider's prices as its ``cost`` when it sets none (budgets need a price): its
        ``prices`` entry first, then ``price_per_mtok_in``/``_out``."""
        if model is not None and model.cost is not None:
            return model
        table = self.prices.get(model_id)
        if table is not None:
            cost = ModelCost(input=table.input, output=table.output, cache_read=table.cached)
            return (model or ModelConfig(id=model_id)).model_copy(update={"cost": cost})
        if self.price_per_mtok_in is None or self.price_per_mtok_out is None:
            return model
        cost = ModelCost(input=self.price_per_mtok_in, output=self.price_per_mtok_out)
        return (model or ModelConfig(id=model_id)).model_copy(update={"cost": cost})

    model_path: str | None = None
    """``llamacpp`` only: the GGUF file to serve (relative paths from ``$PIW_HOME``)."""
    chat_template: str | None = None
    """``llamacpp`` only: a built-in template name (``qwen-bare-json``) or a Jinja file replacing the GGUF's own."""
    n_ctx: int | None = Field(default=None, gt=0)
    """``llamacpp`` only: the context size in tokens (default 4096)."""
    n_threads: int | None = Field(default=None, gt=0)
    """``llamacpp`` only: CPU threads (default 2; on a loaded 2-core machine 1 can be faster)."""
    rate_limit: RateLimit | None = None
    """A limit shared by every caller of this provider on the machine (or the database): ``docs/rate-limits.md``."""

    @field_validator("models", mode="before")
    @classmethod
    def _bare_model_ids(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"id": item} if isinstance(item, str) else item for item in value]
        return value

    @model_validator(mode="after")
    def _keys_of_their_api(self) -> ProviderConfig:
        if self.script is not None and self.api != "scripted":
            raise ValueError("'script' is only allowed with api = \"scripted\"")
        local = [key for key in LLAMACPP_KEYS if getattr(self, key) is not None]
        if local and self.api != "llamacpp":
            raise ValueError(f'{local[0]!r} is only allowed with api = "llamacpp"')
        if self.api == "llamacpp" and self.base_url is not None:
            raise ValueError(
                "a llamacpp provider serves its model itself: remove base_url (or use openai-completions)"
            )
        return self

    def find_model(self, model_id: str) -> ModelConfig | None:
        """The listed model of that id, priced by the provider's prices when it has no ``cost`` of its own."""
        found = next((model for model in self.models if model.id == model_id), None)
        return self.priced(found, model_id) if found is not None else None


class AgentConfig(_Strict):
    """The ``[agent]`` table."""

    max_turns: int = Field(default=50, ge=1)
    max_rejections: int = Field(default=3, ge=1)
    tool_env: list[str] = Field(default_factory=list)
    """Environment variables agent tool processes (``bash``) may see besides the base allow-list."""
    """Rejected submissions (and cut-off responses) that end a submit-mode attempt
    (``docs/design/agent-steps.md`` §3.2)."""
    backend: Literal["piw", "pi-rpc"] = "piw"
    system_prompt: str | None = None

    @field_validator("tool_env")
    @classmethod
    def _variable_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _VARIABLE.match(name):
                raise ValueError(f"tool_env entry {name!r} is not an environment variable name")
        return value


class DatabaseTable(_Strict):
    """The ``[database]`` table: the PostgreSQL database for many machines (read by ``piw.store.pg.setting``,
    which resolves it without this module; here it is only validated with the rest of the file)."""

    url: str = Field(min_length=1)
    password: str | None = None
    """A ``$NAME`` reference (read from the environment), like provider keys."""
    schema_: str | None = Field(default=None, alias="schema")


class PiwConfig(_Strict):
    """The whole file. A missing file is an empty config: the scripted provider needs none."""

    default: str | None = None
    durability: Literal["effects", "always", "flush"] | None = None
    import_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Seconds a workflow file's import may take (``PIW_IMPORT_TIMEOUT`` wins; default 10)."""
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    database: DatabaseTable | None = None
    mcp: dict[str, McpServerConfig] = Field(default_factory=dict)
    """``[mcp.NAME]``: MCP tool servers agent steps may name (``piw.config.mcp_servers``, ``docs/tools-mcp.md``)."""
    telemetry: TelemetryTable = Field(default_factory=TelemetryTable)
    channels: ChannelTable = Field(default_factory=dict)  # docs/channels.md
    retention: RetentionTable | None = None  # piw.config.retention (issue 33)
    budget: BudgetTable = Field(default_factory=BudgetTable)
    source: str | None = Field(default=None, exclude=True)
    """Where it was read from, for error messages; never a key in the file."""

    @field_validator("providers")
    @classmethod
    def _provider_names(cls, value: dict[str, ProviderConfig]) -> dict[str, ProviderConfig]:
        for name in value:
            if not _PROVIDER_NAME.match(name):
                raise ValueError(f"provider name {name!r} may hold only letters, digits, '_', '.' and '-'")
        for name, settings in value.items():  # a price for a model the provider does not list is a typo
            problem = unknown_price_model(name, settings.prices, [model.id for model in settings.models])
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("mcp")
    @classmethod
    def _mcp_names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        return check_server_names(value)


def load_config(piw_home: Path) -> PiwConfig:
    """Read ``piw_home/config.toml``; every problem is a one-line ``ProviderError`` naming the file."""
    path = config_path(piw_home)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return PiwConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProviderError(f"Cannot read {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProviderError(f"Cannot parse {path}: {exc}") from exc
    return parse_config(raw, source=str(path))


def parse_config(raw: Mapping[str, Any], source: str = "config.toml") -> PiwConfig:
    """Validate an already-parsed TOML document (the file's content as a mapping)."""
    unknown = [key for key in raw if key not in TOP_LEVEL_KEYS]
    if unknown:
        allowed = ", ".join(TOP_LEVEL_KEYS)
        raise ProviderError(f"Unknown key {unknown[0]!r} in {source}; the top-level keys are {allowed}.")
    try:
        return PiwConfig.model_validate({**raw, "source": source})
    except ValidationError as exc:
        raise ProviderError(f"Invalid {source}: {_one_line(exc)}") from exc


def _one_line(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            parts.append(f"unknown key {where!r}")
        else:
            parts.append(f"{where or 'file'}: {error['msg']}")
    return "; ".join(parts)


# --- secrets -----------------------------------------------------------------------------------------


def resolve_api_key(settings: ProviderConfig, env: Mapping[str, str] | None = None) -> str:
    """The key to send, or ``""`` for none (then no ``Authorization`` header is sent at all)."""
    return "" if settings.api_key is None else resolve_value(settings.api_key, env)


def resolve_headers(settings: ProviderConfig, env: Mapping[str, str] | None = None) -> dict[str, str]:
    return {name: resolve_value(value, env) for name, value in settings.headers.items()}


def configured_secrets(config: PiwConfig, env: Mapping[str, str] | None = None) -> list[str]:
    """Every secret value the config can produce: keys (literal or resolved) and ``$NAME`` header values.

    Literal header values are settings such as ``X-Client = "piw"``, not secrets, so they are left out:
    refusing every record that mentions ``piw`` would make recording impossible. Unset variables are
    skipped, since their value cannot leak.
    """
    return sorted(
        {secret for settings in config.providers.values() for secret in provider_secrets(settings, env)}
    )


def provider_secrets(settings: ProviderConfig, env: Mapping[str, str] | None = None) -> list[str]:
    """The secret values of one provider table (see :func:`configured_secrets`)."""
    environment = os.environ if env is None else env
    secrets: set[str] = set()
    values = [settings.api_key] if settings.api_key is not None else []
    values += [value for value in settings.headers.values() if env_reference(value)]
    for value in values:
        name = env_reference(value)
        resolved = environment.get(name) if name else value
        if resolved:
            secrets.add(resolved)
    return sorted(secrets)
