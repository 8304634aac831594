"""The Traces view model: the list of stored traces as rows, and one trace's nodes as a timeline figure."""

from __future__ import annotations

import time
from typing import Any

import plotly.graph_objects as go

from flowcore.ui.words import operator_name
from flowcore.workspace.traces import Trace


def model_label(t: Trace) -> str:
    if t.workflow is None:
        return "(unpublished text)"
    return f"{t.workflow}@v{t.version}" if t.version else t.workflow


def rows(traces: list[Trace]) -> list[dict[str, Any]]:
    """One row per trace, newest first, as the page's table shows them."""
    return [{"trace": t.id, "when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t.created)),
             "workflow": model_label(t), "source": t.source, "by": t.created_by, "status": t.status,
             "latency (s)": round(t.latency, 3), "calls": t.calls, "tokens": t.prompt_tokens + t.completion_tokens,
             "cost": t.cost, "error": t.error or ""} for t in traces]


def span_rows(t: Trace) -> list[dict[str, Any]]:
    """One row per node of a trace, with column names a person reads (seconds in the header, not '_s')."""
    return [{"node": s.node, "operator": operator_name(s.op), "model": s.model or "", "start (s)": s.start,
             "latency (s)": s.latency, "calls": s.calls, "prompt tokens": s.prompt_tokens,
             "completion tokens": s.completion_tokens,
             "cost": s.cost, "skipped": s.skipped, "error": s.error or ""} for s in t.spans]


def plotly_text(value: object) -> str:
    """Text plotly shows as typed: it reads ``<a href>``, ``<b>``, ``<br>`` in labels and hover text (a node's
    error can quote an endpoint or a program, so a link to anywhere could appear), but decodes entities."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def timeline_figure(t: Trace) -> go.Figure:
    """Each node a bar from its start to its end (seconds after the request began); failed red, skipped grey."""
    spans = list(reversed(t.spans))  # the first node on top
    colour = ["#d62728" if s.error else ("#bbbbbb" if s.skipped else "#1f77b4") for s in spans]
    fig = go.Figure(go.Bar(
        y=[plotly_text(f"{s.node} · {operator_name(s.op)}") for s in spans], x=[max(s.latency, 1e-4) for s in spans],
        base=[s.start for s in spans], orientation="h", marker_color=colour,
        hovertext=[plotly_text(f"{s.model or 'no model'} · {s.prompt_tokens}+{s.completion_tokens} tokens · "
                               f"${s.cost:.6f}" + (f" · {s.error}" if s.error else "")) for s in spans]))
    fig.update_layout(height=120 + 32 * len(spans), margin=dict(l=10, r=10, t=30, b=30),
                      title=plotly_text(f"{model_label(t)} · {t.status} · {t.latency:.3f} s"),
                      xaxis_title="seconds")
    return fig
