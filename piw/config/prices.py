"""``[providers.NAME.prices]``: what each model of a provider costs, per million tokens (``docs/planning.md``).

    [providers.openai.prices]
    "gpt-x" = { input = 2.50, output = 10.00, cached = 1.25 }

The table prices both the requests a run makes (a ``usage_recorded`` cost) and the projections ``piw run --plan``
prints. A model's own ``cost = {...}`` wins over the table, and the table over the provider-wide
``price_per_mtok_in``/``price_per_mtok_out``. A local model (``llamacpp``, ``scripted``) with no price costs 0, so a
projection of it still counts requests and tokens. A typo, a negative price or a model the provider does not list
is one line naming the key, at config load.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

LOCAL_APIS = ("llamacpp", "scripted")
"""Providers that run on this machine: unpriced, they cost 0 rather than an unknown amount."""


class ModelPrice(BaseModel):
    """USD per million tokens of one model: input, output and cached input (``cached`` defaults to ``input``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cached: float | None = Field(default=None, ge=0, allow_inf_nan=False)


def unknown_price_model(provider: str, prices: dict[str, ModelPrice], listed: list[str]) -> str | None:
    """The message for a priced model the provider does not list (only checked when it lists its models)."""
    if not listed:
        return None
    for model in prices:
        if model not in listed:
            return (
                f"providers.{provider}.prices.{model}: unknown model {model!r}; the provider lists "
                f"{', '.join(listed)}"
            )
    return None
