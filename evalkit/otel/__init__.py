"""OpenTelemetry GenAI traces in and out: ``evalkit import otel`` and ``evalkit export otel``.

A service already instrumented with OpenTelemetry has its agent's story in its
traces; reading them as mission streams lets ``score`` grade that agent with no
change to it, and writing evalkit runs as spans lets any OTel backend show them.
Both sides speak OTLP/JSON with the GenAI semantic conventions (``gen_ai.*``),
plus an ``evalkit.*`` namespace for what the conventions have no word for.

Standard library only (the files are JSON); only the ``import``/``export``
commands import this package, never the scoring path.
"""
