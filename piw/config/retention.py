"""The ``[retention]`` table of ``config.toml``: what ``piw host`` removes once a day (``docs/cli.md``, "Retention").

```toml
[retention]
older_than = "30d"                          # like piw gc --older-than
status = ["completed", "failed", "cancelled"]  # like --status (default: every finished status)
keep_last = 20                               # like --keep-last, per workflow
export = "/backups/piw"                      # like --export: archive each run there first
```
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RetentionTable(BaseModel):
    """``[retention]``: the options of one ``piw gc`` pass, applied by ``piw host`` once a day."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    older_than: str | None = Field(default=None, pattern=r"^\s*\d+\s*[smhdw]\s*$")
    status: list[str] | None = None
    keep_last: int | None = Field(default=None, ge=0)
    export: str | None = Field(default=None, min_length=1)
