"""Traces: every served request, MCP run and Run-page run, filtered by workflow and version; one opens as a
timeline of its nodes (operator, model, tokens, cost, latency, error). Stored by flowcore.workspace.traces."""

from __future__ import annotations

import streamlit as st

from flowcore.ui import traces as tv
from flowcore.workspace import traces
from pages import common

common.app_shell()
common.header("Traces", "Every served request, MCP run and Run-page run, node by node.", show_open=False)
ws = common.workspace()

pairs = traces.traced_workflows(ws)
names = sorted({n for n, _ in pairs})
f = st.columns([2, 1, 1], vertical_alignment="bottom")
name = f[0].selectbox("Workflow", names, index=None, key="tr_workflow", placeholder="All workflows")
versions = sorted({v for n, v in pairs if n == name and v is not None}, reverse=True)
version = f[1].selectbox("Version", versions, index=None, key="tr_version", placeholder="All versions",
                         disabled=name is None, format_func=lambda v: f"v{v}")
limit = f[2].number_input("Show at most", 10, 5000, 200, step=50, key="tr_limit")
listed = traces.list_traces(ws, workflow=name, version=version if name else None, limit=int(limit))
if not listed:
    st.info("No traces yet. Runs on the Run page and requests to `python -m flowcore serve` store one each.",
            icon=":material/info:")
    st.stop()
table = tv.rows(listed)
st.dataframe(table, hide_index=True, placeholder="—", width="stretch", key="tr_table",
             column_config={"cost": st.column_config.NumberColumn(format="$%.6f")})
ids = [r["trace"] for r in table]
pick = st.selectbox("Open a trace", ids, key="tr_open", format_func=lambda i: next(
    f"{r['when']} · {r['workflow']} · {r['status']} · {r['by']} · {i[:8]}" for r in table if r["trace"] == i))
t = traces.load_trace(ws, pick) if pick else None
if t is not None:
    st.plotly_chart(tv.timeline_figure(t), key="tr_timeline")
    if t.error:  # a run's error can quote the endpoint, the model or a program: text, never markdown
        st.error(common.md(t.error))
    st.dataframe(tv.span_rows(t), hide_index=True, placeholder="—", width="stretch", key="tr_spans",
                 column_config={"cost": st.column_config.NumberColumn(format="$%.6f")})
    c = st.columns(2)
    c[0].text_area("Problem", t.problem or "", height=140, disabled=True, key=f"tr_problem_{t.id}")
    c[1].text_area("Answer", t.answer or "", height=140, disabled=True, key=f"tr_answer_{t.id}")
    st.caption(f"Trace id `{t.id}` (the OpenTelemetry trace id when OTEL_EXPORTER_OTLP_ENDPOINT is set).")
