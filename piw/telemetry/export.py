"""``piw export RUN --otlp URL``: a run's spans built after the fact from its bundle and sent to a collector.

The run is read the way every view reads it (:func:`piw.views.source.load_run`: the one fold, from the newest fold
checkpoint, and the conversation's entry stream), never by a second parser of the trace. Ids derive from the run
and attempt ids, so exporting twice sends the same spans again and a collector keeps one set
(``docs/telemetry.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from piw.redaction import redactor_for
from piw.store.place import home_of
from piw.telemetry.spans import run_spans
from piw.views.source import load_run


@dataclass(frozen=True)
class Exported:
    run_id: str
    spans: int
    trace_id: str


def export_otlp(home: Path, run_id: str, endpoint: str, *, include_content: bool = False) -> Exported:
    """Send the run's spans to ``endpoint``; ``TelemetryError`` when the collector does not take them."""
    from piw.telemetry.otlp import export_specs, traces_url

    traces_url(endpoint)  # a malformed endpoint is reported before the run is read
    run = load_run(home, run_id)
    bundle = run.bundle
    redactor = redactor_for(home_of(bundle.path.parent.parent))
    specs = run_spans(
        run.state, run.entries(), redactor, include_content=include_content, resolve=bundle.resolve
    )
    export_specs(endpoint, specs)
    trace_id = f"{specs[0].trace_id:032x}" if specs else ""
    return Exported(run.state.run_id, len(specs), trace_id)
