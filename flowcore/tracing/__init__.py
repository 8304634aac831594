"""Traces of workflow runs: per node, the operator, model, tokens, cost, latency and error (run.py), stored in
the workspace (flowcore.workspace.traces) and, with OTEL_EXPORTER_OTLP_ENDPOINT set, sent out over OTLP with
OpenInference's attribute names (otel.py)."""
