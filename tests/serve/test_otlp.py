"""With OTEL_EXPORTER_OTLP_ENDPOINT set, a served request's trace goes out over OTLP/HTTP: an OTLP receiver on
127.0.0.1 started here decodes the protobuf with opentelemetry-proto and finds OpenInference's attribute names."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from flowcore.workspace import traces
from flowcore.workspace.store import Workspace
from tests.helpers.served import Served


class Receiver:
    """POST /v1/traces (application/x-protobuf) -> the decoded spans, kept in ``spans``."""

    def __init__(self) -> None:
        self.spans: list = []
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.paths.append(self.path)
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    for ss in rs.scope_spans:
                        outer.spans.extend(ss.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attrs(span) -> dict:
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = next(getattr(v, f) for f in ("string_value", "int_value", "double_value", "bool_value")
                           if v.HasField(f))
    return out


def test_spans_go_out_over_otlp_with_openinference_names(fake_llm, served_db):
    rx = Receiver()
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        with Served(served_db, llm_url=fake_llm.base_url, env=env) as s:
            r = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0).chat.completions.create(
                model="solver@v2", messages=[{"role": "user", "content": "traced?"}])
            tid = r.model_extra["mermaidflow"]["trace_id"]
            deadline = time.monotonic() + 20
            while len([x for x in rx.spans if x.trace_id.hex() == tid]) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        mine = [x for x in rx.spans if x.trace_id.hex() == tid]  # the workspace's trace id is the OTLP one
        assert rx.paths and set(rx.paths) == {"/v1/traces"}
        root = next(x for x in mine if not x.parent_span_id)
        node = next(x for x in mine if x.parent_span_id == root.span_id)
        ra, na = attrs(root), attrs(node)
        assert ra["openinference.span.kind"] == "CHAIN" and ra["mermaidflow.workflow"] == "solver@v2"
        assert ra["input.value"] == "traced?" and ra["output.value"] == r.choices[0].message.content
        assert na["openinference.span.kind"] == "LLM" and na["llm.model_name"] == "gpt-4o-mini"
        assert na["llm.token_count.prompt"] == r.usage.prompt_tokens
        assert na["llm.token_count.total"] == r.usage.total_tokens and na["mermaidflow.node"] == "C1"
        assert root.start_time_unix_nano <= node.start_time_unix_nano <= node.end_time_unix_nano <= root.end_time_unix_nano
        stored = traces.load_trace(Workspace(served_db), tid)
        assert stored is not None and stored.spans[0].prompt_tokens == na["llm.token_count.prompt"]
    finally:
        rx.stop()
