"""The History page's engine side at scale: a run's rounds as one light table (no round's large JSON decoded),
vectorised curves, and the lineage drawn as a plotly tree on a networkx layered layout — the whole tree for
small runs, a collapsed view (the ancestry of the best, pinned and selected rounds) for long ones.

Everything here is linear in the number of rounds (10,000 rounds: see ``benchmarks/history_scale.py``); the
page reads one round in full only when it is shown in detail.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from typing import Any

import numpy as np
import pandas as pd

ROUND_COLUMNS = ["round", "status", "score", "ci_low", "ci_high", "n", "cost", "operator", "parents", "judge",
                 "judge_total", "pinned", "note", "detail", "reason"]
FULL_TREE = 300  # up to this many rounds the whole lineage is drawn; above it, the collapsed view
TOP_LINEAGES = 8  # the collapsed view follows the ancestry of this many best rounds
MAX_NODES = 400  # and never draws more nodes than this
DENSE = 60  # past this many rounds, curves drop per-point labels and per-round ticks


def summary_frame(cols: dict[str, list]) -> pd.DataFrame:
    """``History.summary_columns`` as the buffer table (blank text instead of None, parents as "0, 2")."""
    df = pd.DataFrame({c: cols[c] for c in ROUND_COLUMNS}, columns=ROUND_COLUMNS)
    for col in ("operator", "judge", "note", "detail", "reason"):
        df[col] = df[col].fillna("")
    df["parents"] = [", ".join(map(str, p)) if p else "" for p in cols["parents"]]
    df["cost"] = df["cost"].astype(float).fillna(0.0)
    for col in ("score", "ci_low", "ci_high", "judge_total"):
        df[col] = df[col].astype(float)
    df["pinned"] = df["pinned"].astype(bool)
    return df


def curve_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Per round: measured score and best so far (percent, measured rounds only), judge total, cost, running cost."""
    measured = (df["status"] == "ok") & df["score"].notna()
    score = (100 * df["score"].where(measured)).astype(float)
    return pd.DataFrame({"round": df["round"], "status": df["status"], "operator": df["operator"], "score": score,
                         "best": score.cummax(), "judge_total": df["judge_total"].astype(float),
                         "cost": df["cost"], "total_cost": df["cost"].cumsum()})


def score_figure(curve: pd.DataFrame, offline: bool) -> Any:
    """Score per round and best so far (failed rounds marked on the axis, never scored); for a structure-only
    run the judge's total. WebGL traces past ``DENSE`` rounds."""
    import plotly.graph_objects as go

    dense = len(curve) > DENSE
    scatter = go.Scattergl if dense else go.Scatter
    mode = "lines" if dense else "lines+markers"
    traces = []
    if offline:
        judged = curve[curve["judge_total"].notna()]
        traces.append(scatter(x=_arr(judged["round"]), y=_arr(judged["judge_total"]), mode=mode,
                              name="judge total (structure only)", text=_arr(judged["operator"])))
        title, ytitle, yrange = "Judge total per round (structure only)", "judge total (0-50)", [0, 52.5]
    else:
        measured = curve[curve["score"].notna()]
        traces.append(scatter(x=_arr(measured["round"]), y=_arr(measured["score"]), mode=mode,
                              name="score per round", text=_arr(measured["operator"])))
        traces.append(scatter(x=_arr(measured["round"]), y=_arr(measured["best"]), mode="lines",
                              name="best so far", line={"shape": "hv", "dash": "dash"}))
        failed = curve[curve["status"] == "failed"]
        if len(failed):  # one trace, however many failed rounds (not a shape per round)
            traces.append(scatter(x=_arr(failed["round"]), y=_arr(failed["round"] * 0), mode="markers",
                                  name="failed round", marker={"symbol": "x", "color": "#c62828", "size": 7}))
        title, ytitle, yrange = "Validation score per round", "score (%)", [0, 105]
    xaxis = {"title": {"text": "round"}, "rangemode": "tozero", **({} if dense else {"dtick": 1})}
    return go.Figure(traces, {"title": {"text": title}, "xaxis": xaxis, "height": 340,
                              "yaxis": {"title": {"text": ytitle}, "range": yrange},
                              "margin": {"l": 40, "r": 10, "t": 50, "b": 40},
                              "legend": {"orientation": "h", "y": -0.25}})


def _arr(series: pd.Series) -> Any:
    """A column as a numpy array: plotly takes arrays whole instead of checking element by element."""
    return series.to_numpy()


def cost_figure(curve: pd.DataFrame) -> Any | None:
    """Cost of each measured round against its score (None when no round was measured)."""
    import plotly.graph_objects as go

    measured = curve[curve["score"].notna()]
    if measured.empty:
        return None
    dense = len(measured) > DENSE
    trace = (go.Scattergl(x=_arr(measured["cost"]), y=_arr(measured["score"]), mode="markers",
                          customdata=_arr(measured["round"]), hovertemplate="round %{customdata}<extra></extra>")
             if dense else go.Scatter(x=_arr(measured["cost"]), y=_arr(measured["score"]), mode="markers+text",
                                      text=[f"#{r}" for r in measured["round"]], textposition="top center"))
    return go.Figure([trace], {"title": {"text": "Cost vs score"}, "xaxis": {"title": {"text": "round cost (USD)"}},
                               "yaxis": {"title": {"text": "score (%)"}}, "height": 340,
                               "margin": {"l": 40, "r": 10, "t": 50, "b": 40}})


def round_labels(cols: dict[str, list]) -> dict[int, str]:
    """The round picker's labels, built once (a dict look-up per option)."""
    return {int(r): f"#{r} · {op or '—'}" for r, op in zip(cols["round"], cols["operator"])}


# -- lineage ------------------------------------------------------------------------------------------------------

def generations(rounds: list[int], parents: list[list[int]]) -> dict[int, int]:
    """Each round's generation: 1 + its deepest parent's (the seed is 0). Rounds come in order, parents first."""
    gen: dict[int, int] = {}
    for rnd, ps in zip(rounds, parents):
        gen[rnd] = 1 + max((gen[p] for p in ps if p in gen), default=-1) if ps else 0
    return gen


def lineage_nodes(cols: dict[str, list], selected: int | None = None, *, top: int = TOP_LINEAGES,
                  limit: int = MAX_NODES) -> tuple[list[int], str]:
    """Which rounds the lineage shows, and a sentence saying so. All of them for a small run; otherwise the
    ancestry of the ``top`` best-scored rounds plus the selected and pinned ones (breadth-first towards the
    seed, at most ``limit`` rounds)."""
    rounds, n = cols["round"], len(cols["round"])
    if n <= FULL_TREE:
        return list(rounds), f"all {n} rounds"
    index = {r: i for i, r in enumerate(rounds)}
    scores, statuses = cols["score"], cols["status"]
    scored = heapq.nsmallest(top, (i for i in range(n) if scores[i] is not None and statuses[i] == "ok"),
                             key=lambda i: (-scores[i], rounds[i]))
    targets = ([selected] if selected in index else []) + [rounds[i] for i in scored]
    targets += [r for r, p in zip(rounds, cols["pinned"]) if p][:top]
    if not scored:  # nothing measured (structure-only): the latest rounds
        targets += list(rounds[-top:])
    shown: dict[int, None] = {}
    queue = deque(dict.fromkeys(targets))
    while queue and len(shown) < limit:
        rnd = queue.popleft()
        if rnd in shown or rnd not in index:
            continue
        shown[rnd] = None
        queue.extend(p for p in cols["parents"][index[rnd]] if p not in shown)
    nodes = sorted(shown)
    what = f"{len(nodes)} of {n} rounds: the ancestry of the {len(scored)} best" + \
        (", the selected" if selected in index else "") + " and pinned rounds"
    return nodes, what


def lineage_figure(cols: dict[str, list], selected: int | None = None) -> tuple[Any, str]:
    """(plotly figure, caption): the lineage tree, left to right by generation (networkx multipartite layout);
    failed rounds red, pinned ringed orange, the selected one green; hover shows operator and score."""
    import networkx as nx
    import plotly.graph_objects as go

    nodes, what = lineage_nodes(cols, selected)
    keep = set(nodes)
    index = {r: i for i, r in enumerate(cols["round"])}
    by_round = {n: {k: cols[k][index[n]] for k in ("round", "status", "score", "operator", "pinned", "parents")}
                for n in nodes}
    gen = generations(cols["round"], cols["parents"])
    g = nx.DiGraph()
    for n in nodes:
        g.add_node(n, gen=gen.get(n, 0))
    g.add_edges_from((p, n) for n in nodes for p in by_round[n]["parents"] or [] if p in keep)
    pos = nx.multipartite_layout(g, subset_key="gen", align="vertical") if nodes else {}
    ex: list[float | None] = []
    ey: list[float | None] = []
    for a, b in g.edges:
        ex += [pos[a][0], pos[b][0], None]
        ey += [pos[a][1], pos[b][1], None]

    def color(r: dict) -> str:
        if r["round"] == selected:
            return "#2e7d32"
        if r["status"] == "failed":
            return "#c62828"
        return "#1565c0" if r["score"] is not None else "#78909c"

    shown = [by_round[n] for n in nodes]
    score = ["failed" if r["status"] == "failed" else ("structure-only" if r["score"] is None else
                                                       f"{100 * r['score']:.1f}%") for r in shown]
    small = len(nodes) <= 40
    edges = go.Scatter(x=np.array(ex, dtype=float), y=np.array(ey, dtype=float), mode="lines",
                       line={"color": "#b0bec5", "width": 1}, hoverinfo="skip", showlegend=False)
    points = go.Scatter(
        x=np.array([pos[n][0] for n in nodes]), y=np.array([pos[n][1] for n in nodes]),
        mode="markers+text" if small else "markers", text=[f"#{r['round']}" for r in shown],
        textposition="top center", hoverinfo="text", showlegend=False,
        hovertext=np.array([f"#{r['round']} {r.get('operator') or ''} · {s}" for r, s in zip(shown, score)]),
        marker={"size": 14 if small else 8, "color": np.array([color(r) for r in shown]),
                "line": {"color": np.array(["#ef6c00" if r.get("pinned") else "#ffffff" for r in shown]),
                         "width": np.array([3 if r.get("pinned") else 1 for r in shown])}})
    height = min(140 + 40 * max(Counter(gen[n] for n in nodes).values(), default=1), 560)
    fig = go.Figure([edges, points], {"height": height, "margin": {"l": 10, "r": 10, "t": 10, "b": 10},
                                      "xaxis": {"visible": False}, "yaxis": {"visible": False},
                                      "plot_bgcolor": "#ffffff"})
    return fig, f"Lineage (parents → children, left to right by generation): {what}."
