"""OpenTelemetry export of runs (``docs/telemetry.md``): spans built from the fold and the conversation, sent
over OTLP/HTTP after the fact (``piw export --otlp``) or live as attempts finish (``[telemetry]``).

:mod:`piw.telemetry.spans` is pure (no SDK); the OpenTelemetry SDK is imported only by
:mod:`piw.telemetry.otlp`, and only when spans are actually sent.
"""
