"""Traces out over OTLP (HTTP/protobuf) through the OpenTelemetry SDK, named as OpenInference names them.

Only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; the SDK is imported
then and not before. The exporter reads the standard OTEL_* variables itself (endpoint, headers, timeout), and
spans leave from a background batch processor, so a slow collector never delays an answer.

Each trace becomes a root span (kind CHAIN: the workflow, its input and output) with one child per node (kind
LLM when the node called a model: ``llm.model_name``, ``llm.token_count.prompt/completion/total``,
``llm.cost.total``; CHAIN otherwise). The OTLP trace id is the workspace trace's id, so both are found by one id.
``OPENINFERENCE_HIDE_INPUTS`` / ``OPENINFERENCE_HIDE_OUTPUTS`` (OpenInference's switches) leave the texts out.
"""

from __future__ import annotations

import contextvars
import os
import threading
from typing import Any

from flowcore.workspace.traces import Trace

ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_wanted: contextvars.ContextVar[int | None] = contextvars.ContextVar("flowcore_trace_id", default=None)
_lock = threading.Lock()
_state: dict[str, Any] = {}


def enabled() -> bool:
    return any((os.environ.get(v) or "").strip() for v in ENDPOINT_ENV)


def _flag(name: str) -> bool:
    return (os.environ.get(name) or "").strip().lower() in ("1", "true", "yes", "on")


def _tracer() -> Any:
    with _lock:
        if "tracer" in _state:
            return _state["tracer"]
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        class Ids(RandomIdGenerator):
            """The root span takes the workspace trace's id; everything else is random."""

            def generate_trace_id(self) -> int:
                wanted = _wanted.get()
                return wanted if wanted else super().generate_trace_id()

        name = os.environ.get("OTEL_SERVICE_NAME") or "mermaidflow"
        provider = TracerProvider(resource=Resource.create({"service.name": name}), id_generator=Ids())
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _state["provider"], _state["tracer"] = provider, provider.get_tracer("flowcore.tracing")
        return _state["tracer"]


def export(trace: Trace) -> bool:
    """Queue ``trace``'s spans for export; False (and nothing done) when no endpoint is set."""
    if not enabled():
        return False
    from openinference.semconv.trace import OpenInferenceSpanKindValues as Kind
    from openinference.semconv.trace import SpanAttributes as A
    from opentelemetry import trace as api
    from opentelemetry.trace import Status, StatusCode

    tracer = _tracer()
    t0 = int(trace.created * 1e9)
    model = f"{trace.workflow}@v{trace.version}" if trace.version else (trace.workflow or "workflow")
    attrs: dict[str, Any] = {A.OPENINFERENCE_SPAN_KIND: Kind.CHAIN.value, "mermaidflow.workflow": model,
                             "mermaidflow.source": trace.source, "mermaidflow.created_by": trace.created_by,
                             A.LLM_TOKEN_COUNT_PROMPT: trace.prompt_tokens,
                             A.LLM_TOKEN_COUNT_COMPLETION: trace.completion_tokens,
                             A.LLM_TOKEN_COUNT_TOTAL: trace.prompt_tokens + trace.completion_tokens,
                             A.LLM_COST_TOTAL: trace.cost}
    if trace.problem is not None and not _flag("OPENINFERENCE_HIDE_INPUTS"):
        attrs[A.INPUT_VALUE] = trace.problem
    if trace.answer is not None and not _flag("OPENINFERENCE_HIDE_OUTPUTS"):
        attrs[A.OUTPUT_VALUE] = trace.answer
    token = _wanted.set(int(trace.id, 16))
    try:
        root = tracer.start_span(f"workflow {model}", start_time=t0, attributes=attrs)
    finally:
        _wanted.reset(token)
    parent = api.set_span_in_context(root)
    for s in trace.spans:
        kind = Kind.LLM if s.calls else Kind.CHAIN
        a: dict[str, Any] = {A.OPENINFERENCE_SPAN_KIND: kind.value, "mermaidflow.node": s.node,
                             "mermaidflow.operator": s.op or "", "mermaidflow.skipped": s.skipped}
        if s.calls:
            a.update({A.LLM_MODEL_NAME: s.model or "", A.LLM_TOKEN_COUNT_PROMPT: s.prompt_tokens,
                      A.LLM_TOKEN_COUNT_COMPLETION: s.completion_tokens,
                      A.LLM_TOKEN_COUNT_TOTAL: s.prompt_tokens + s.completion_tokens, A.LLM_COST_TOTAL: s.cost})
        span = tracer.start_span(f"{s.node} {s.op}", context=parent, start_time=t0 + int(s.start * 1e9),
                                 attributes=a)
        if s.error:
            span.set_status(Status(StatusCode.ERROR, s.error))
        span.end(end_time=t0 + int((s.start + s.latency) * 1e9))
    if trace.error:
        root.set_status(Status(StatusCode.ERROR, trace.error))
    root.end(end_time=t0 + int(trace.latency * 1e9))
    return True


def flush(timeout_s: float = 5.0) -> None:
    """Send what is queued (at shutdown, and in tests)."""
    provider = _state.get("provider")
    if provider is not None:
        provider.force_flush(int(timeout_s * 1000))
