"""``[providers.NAME] rate_limit = {requests_per_minute, tokens_per_minute, concurrency}`` (``docs/rate-limits.md``).

Every key is optional and at least one must be set; each is a positive integer. Unknown keys are an error naming
the key, like every other table of ``config.toml``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RateLimit(BaseModel):
    """A provider's shared limit: held across every run, child and process using the same run database."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)
    """Input plus output tokens; a request starts while the bucket is above zero and is charged what it used."""
    concurrency: int | None = Field(default=None, gt=0)
    """Requests in flight at once."""

    @model_validator(mode="after")
    def _something_limited(self) -> RateLimit:
        if self.requests_per_minute is None and self.tokens_per_minute is None and self.concurrency is None:
            raise ValueError("set at least one of requests_per_minute, tokens_per_minute, concurrency")
        return self
