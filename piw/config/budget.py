"""The ``[budget]`` table of ``config.toml``: ``confirm_above`` (USD), the projected cost over which a run asks
before its first model request (``docs/planning.md``); ``piw run --confirm-above COST`` overrides it per run."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BudgetTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    confirm_above: float | None = Field(default=None, ge=0, allow_inf_nan=False)
