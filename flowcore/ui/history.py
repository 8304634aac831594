"""The History page's engine side at scale: a run's rounds as one light table (no round's large JSON decoded),
vectorised curves, and the lineage drawn as a plotly tree on a networkx layered layout — the whole tree for
small runs, a collapsed view (the ancestry of the best, pinned and selected rounds) for long ones.

Everything here is linear in the number of rounds (10,000 rounds: see ``benchmarks/history_scale.py``); the
page reads one round in full only when it is shown in detail. ``run_view`` keeps what is derived from a run
(table, curves, figures, generations, lineages) until the run changes: a page rerun (any widget touched)
reads one row to learn that nothing did.
"""

from __future__ import annotations

import gc
import heapq
import threading
from collections import Counter, OrderedDict, deque
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd

from flowcore.tasks.harness import not_run_text
from flowcore.ui.words import count, edit_detail, edit_name

ROUND_COLUMNS = ["round", "status", "score", "ci_low", "ci_high", "n", "cost", "operator", "parents", "judge",
                 "judge_total", "pinned", "note", "detail", "reason"]
FULL_TREE = 300  # up to this many rounds the whole lineage is drawn; above it, the collapsed view
TOP_LINEAGES = 8  # the collapsed view follows the ancestry of this many best rounds
MAX_NODES = 400  # and never draws more nodes than this
DENSE = 60  # past this many rounds, curves drop per-point labels and per-round ticks
PAGE_ROWS = 500  # the History table shows this many rounds at a time


def summary_frame(cols: dict[str, list]) -> pd.DataFrame:
    """``History.summary_columns`` as the buffer table (blank text instead of None, parents as "0, 2"), every
    column built first and the frame made once (column-by-column assignment copied the frame each time)."""
    def text(c: str) -> list[str]:
        return [v or "" for v in cols[c]]

    def num(c: str) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in cols[c]], dtype=float)

    data = {"round": np.array(cols["round"], dtype=np.int64), "status": list(cols["status"]), "score": num("score"),
            "ci_low": num("ci_low"), "ci_high": num("ci_high"), "n": cols["n"],
            "cost": np.nan_to_num(num("cost")), "operator": text("operator"),
            "parents": [", ".join(map(str, p)) if p else "" for p in cols["parents"]], "judge": text("judge"),
            "judge_total": num("judge_total"), "pinned": np.array(cols["pinned"], dtype=bool), "note": text("note"),
            "detail": text("detail"), "reason": text("reason")}
    return pd.DataFrame(data, columns=ROUND_COLUMNS)


def page_count(rows: int) -> int:
    """How many table pages of ``PAGE_ROWS`` rounds ``rows`` rounds fill (at least one)."""
    return max(1, -(-rows // PAGE_ROWS))


def table_caption(table: pd.DataFrame, total: int) -> str:
    """'12 of 40 rounds shown.', and which rounds the page holds when the table is paged."""
    matched = table.attrs.get("matched", len(table))
    paged = f" This page: rounds {table['round'].iloc[0]}–{table['round'].iloc[-1]}." if len(table) < matched else ""
    return f"{matched} of {total} rounds shown.{paged}"


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
    failed = curve[curve["status"] == "failed"]
    if offline:  # a failed (e.g. vetoed) round's judge total is not a result: it is marked like any failed round
        judged = curve[curve["judge_total"].notna() & (curve["status"] != "failed")]
        traces.append(scatter(x=_arr(judged["round"]), y=_arr(judged["judge_total"]), mode=mode,
                              name="judge total (structure only)", text=_words(judged["operator"])))
        title, ytitle, yrange = "Judge total per round (structure only)", "judge total (0-50)", [-2.5, 52.5]
    else:
        measured = curve[curve["score"].notna()]
        traces.append(scatter(x=_arr(measured["round"]), y=_arr(measured["score"]), mode=mode,
                              name="score per round", text=_words(measured["operator"])))
        bx, by = _steps(measured["round"], measured["best"])
        traces.append(scatter(x=bx, y=by, mode="lines", name="best so far", line={"shape": "hv", "dash": "dash"}))
        title, ytitle, yrange = "Validation score per round", "score", [-5, 105]
    if len(failed):  # one drawing of a failed round (vetoed, no candidate, an error), measured run or not:
        # a ✖ on the axis, one trace however many there are (not a shape per round)
        traces.append(scatter(x=_arr(failed["round"]), y=_arr(failed["round"] * 0), mode="markers",
                              name="failed round (vetoed or not evaluated)", hovertemplate="round %{x}: failed"
                              "<extra></extra>", marker={"symbol": "x", "color": "#c62828", "size": 8}))
    for t in traces if not dense else ():  # WebGL traces have no such setting
        t.cliponaxis = False  # the round-0 marker and a failed round's ✖ on the axis are drawn whole
    last = float(curve["round"].max()) if len(curve) else 1.0
    xaxis = {"title": {"text": "round"}, "range": [-0.3, last + 0.3], **({} if dense else {"dtick": 1})}
    return go.Figure(traces, {"title": {"text": title}, "xaxis": xaxis, "height": 340,
                              "yaxis": {"title": {"text": ytitle}, "range": yrange,
                                        **({} if offline else {"ticksuffix": "%"})},
                              "margin": {"l": 40, "r": 10, "t": 50, "b": 40},
                              "legend": {"orientation": "h", "y": -0.25}})


def _steps(x: pd.Series, y: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """A step line (``shape: hv``) by its corners only: the points where ``y`` changes, and the last one. The
    same drawing as every point (the best score of 10,000 rounds changes a few dozen times)."""
    xs, ys = x.to_numpy(), y.to_numpy(dtype=float)
    if len(ys) < 3:
        return xs, ys
    keep = np.ones(len(ys), dtype=bool)
    keep[1:] = ys[1:] != ys[:-1]
    keep[-1] = True
    return xs[keep], ys[keep]


def _words(ops: pd.Series) -> Any:
    """Each round's edit in words, for the hover text."""
    return np.array([edit_name(o) for o in ops], dtype=object)


def _arr(series: pd.Series) -> Any:
    """A column as a numpy array: plotly takes arrays whole instead of checking element by element."""
    return series.to_numpy()


def cost_front(costs: list[float], scores: list[float]) -> set[int]:
    """Indices of the points no other point beats (as good a score for less, or a better one for as little);
    one sweep by cost, so 10,000 rounds cost no more than sorting them."""
    front: set[int] = set()
    best, at = float("-inf"), None  # the best score so far, and the cost it was reached at
    for i in sorted(range(len(costs)), key=lambda i: (costs[i], -scores[i])):
        if scores[i] > best or (scores[i] == best and costs[i] == at):
            front.add(i)
            best, at = scores[i], costs[i]
    return front


def cost_figure(curve: pd.DataFrame, selected: int | None = None) -> Any | None:
    """Cost of each measured round against its score (None when no round was measured): only the rounds on the
    cost/score front and the ``selected`` one are named, the rest on hover."""
    import plotly.graph_objects as go

    measured = curve[curve["score"].notna()]
    if measured.empty:
        return None
    dense = len(measured) > DENSE
    rounds = [int(r) for r in measured["round"]]
    front = cost_front([float(c) for c in measured["cost"]], [float(s) for s in measured["score"]])
    text = [f"#{r}" if i in front or r == selected else "" for i, r in enumerate(rounds)]
    trace = (go.Scattergl(x=_arr(measured["cost"]), y=_arr(measured["score"]), mode="markers",
                          customdata=_arr(measured["round"]), hovertemplate="round %{customdata}<extra></extra>")
             if dense else go.Scatter(x=_arr(measured["cost"]), y=_arr(measured["score"]), mode="markers+text",
                                      text=text, textposition="top center",
                                      cliponaxis=False, customdata=_arr(measured["round"]),
                                      hovertemplate="round %{customdata}: %{y:.1f}%, $%{x:.5f}<extra></extra>"))
    lo, hi = float(measured["score"].min()), float(measured["score"].max())
    pad = max((hi - lo) * 0.15, 5.0)  # every point at 33.3% is a band around 33.3%, not 32.5–34
    costs = measured["cost"].astype(float)
    cpad = float(costs.max() - costs.min()) * 0.12 or float(costs.max()) * 0.2 or 1e-6
    return go.Figure([trace], {"title": {"text": "Cost vs score (named: the cheapest per score, the chosen "
                                                 "round)"},
                               "xaxis": {"title": {"text": "cost of the round"}, "tickformat": "$,.5~f",
                                         "range": [max(0.0, float(costs.min()) - cpad), float(costs.max()) + cpad]},
                               "yaxis": {"title": {"text": "score"}, "ticksuffix": "%",
                                         "range": [max(-2.0, lo - pad), min(102.0, hi + pad)]}, "height": 340,
                               "margin": {"l": 50, "r": 20, "t": 50, "b": 40}})


def round_labels(cols: dict[str, list]) -> dict[int, str]:
    """The round picker's labels, built once (a dict look-up per option)."""
    return {int(r): f"#{r} · {edit_name(op)}" for r, op in zip(cols["round"], cols["operator"])}


# -- lineage ------------------------------------------------------------------------------------------------------

def generations(rounds: list[int], parents: list[list[int]]) -> dict[int, int]:
    """Each round's generation: 1 + its deepest parent's (the seed is 0). Rounds come in order, parents first."""
    gen: dict[int, int] = {}
    get = gen.get
    for rnd, ps in zip(rounds, parents):
        gen[rnd] = 1 + max([get(p, -1) for p in ps]) if ps else 0
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


# one trace per kind of node (a colour per trace, not per point: plotly checks an array of colours one by one)
_KINDS = (("measured", "#1565c0"), ("not measured", "#78909c"), ("failed", "#c62828"), ("selected", "#2e7d32"))


def lineage_figure(cols: dict[str, list], selected: int | None = None,
                   gen: dict[int, int] | None = None) -> tuple[Any, str]:
    """(plotly figure, caption): the lineage tree, left to right by generation (networkx multipartite layout);
    measured rounds blue, unmeasured grey, failed red, the selected one green, pinned ones ringed orange;
    hover shows operator and score. Traces: edges, then one per kind of node (``_KINDS``), then the rings.
    ``gen`` is ``generations`` of the run when the caller already has it."""
    import networkx as nx
    import plotly.graph_objects as go

    nodes, what = lineage_nodes(cols, selected)
    keep = set(nodes)
    index = {r: i for i, r in enumerate(cols["round"])}
    gen = generations(cols["round"], cols["parents"]) if gen is None else gen
    g = nx.DiGraph()
    for n in nodes:
        g.add_node(n, gen=gen.get(n, 0))
    g.add_edges_from((p, n) for n in nodes for p in cols["parents"][index[n]] or [] if p in keep)
    pos = nx.multipartite_layout(g, subset_key="gen", align="vertical") if nodes else {}
    ex: list[float | None] = []
    ey: list[float | None] = []
    for a, b in g.edges:
        ex += [pos[a][0], pos[b][0], None]
        ey += [pos[a][1], pos[b][1], None]
    small = len(nodes) <= 40
    groups: dict[str, list[int]] = {k: [] for k, _ in _KINDS}
    for n in nodes:
        i = index[n]
        kind = ("selected" if n == selected else "failed" if cols["status"][i] == "failed" else
                "measured" if cols["score"][i] is not None else "not measured")
        groups[kind].append(n)

    def hover(n: int) -> str:
        i = index[n]
        s = cols["score"][i]
        score = ("failed" if cols["status"][i] == "failed" else "structure-only" if s is None else f"{100 * s:.1f}%")
        return f"#{n} {edit_name(cols['operator'][i])} · {score}"

    traces = [go.Scatter(x=np.array(ex, dtype=float), y=np.array(ey, dtype=float), mode="lines",
                         line={"color": "#b0bec5", "width": 1}, hoverinfo="skip", showlegend=False)]
    for kind, color in _KINDS:
        members = groups[kind]
        traces.append(go.Scatter(
            x=np.array([pos[n][0] for n in members], dtype=float), y=np.array([pos[n][1] for n in members], dtype=float),
            mode="markers+text" if small else "markers", text=[f"#{n}" for n in members], textposition="top center",
            cliponaxis=False, hoverinfo="text", hovertext=[hover(n) for n in members], name=kind, showlegend=bool(members),
            marker={"size": 14 if small else 8, "color": color, "line": {"color": "#ffffff", "width": 1}}))
    pinned = [n for n in nodes if cols["pinned"][index[n]]]
    traces.append(go.Scatter(x=np.array([pos[n][0] for n in pinned], dtype=float),
                             y=np.array([pos[n][1] for n in pinned], dtype=float), mode="markers", name="pinned",
                             hoverinfo="skip", showlegend=bool(pinned),
                             marker={"size": 20 if small else 13, "symbol": "circle-open", "color": "#ef6c00",
                                     "line": {"width": 3}}))
    height = min(170 + 40 * max(Counter(gen[n] for n in nodes).values(), default=1), 590)
    fig = go.Figure(traces, {"height": height, "margin": {"l": 30, "r": 30, "t": 30, "b": 10},  # labels never cut
                             "xaxis": {"visible": False}, "yaxis": {"visible": False}, "plot_bgcolor": "#ffffff",
                             "legend": {"orientation": "h", "y": -0.02, "yanchor": "top"}})
    return fig, f"Lineage (parents → children, left to right by generation): {what}."


# -- one run's view, kept until the run changes ------------------------------------------------------------------

@contextmanager
def _bulk():
    """Build a view without the cyclic garbage collector: reading 10,000 rounds allocates tens of thousands of
    small containers, which set off a dozen collections, and every few views a full one over everything the
    server holds (pandas, plotly, Streamlit: ~100 ms). Nothing built here forms a cycle to collect; the
    collector runs again once, afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class RunView:
    """What the History page derives from one stored state of a run: built on first use, then reused by every
    rerun and session until the run is written to again (``RunInfo.updated`` moves on each write).

    It reads the few columns the filters, curves, picker and lineage need (``VIEW_COLUMNS``) for every round,
    and the table's other columns only for the page of rounds on show."""

    def __init__(self, history: Any, info: Any, cols: dict[str, list]) -> None:
        self.history, self.info, self.cols = history, info, cols
        self.labels = round_labels(cols)
        self.total = len(cols["round"])
        self._round = np.array(cols["round"], dtype=np.int64)
        self._status = np.array(cols["status"], dtype=object)
        self._operator = np.array([o or "" for o in cols["operator"]], dtype=object)
        self._score = np.array([np.nan if s is None else s for s in cols["score"]], dtype=float)
        self._pinned = np.array(cols["pinned"], dtype=bool)
        self._lock = threading.Lock()
        self._memo: dict[Any, Any] = {}

    def _get(self, key: Any, make: Any) -> Any:
        with self._lock:
            if key in self._memo:
                return self._memo[key]
        with _bulk():
            value = make()
        with self._lock:
            if len(self._memo) > 40:  # lineages and table pages of many picks: keep the recent ones
                self._memo.pop(next((k for k in self._memo if isinstance(k, tuple)), None), None)
            return self._memo.setdefault(key, value)

    def statuses(self) -> list[str]:
        return self._get("statuses", lambda: sorted(set(self.cols["status"])))

    def operators(self) -> list[str]:
        return self._get("operators", lambda: sorted(set(self._operator)))

    def rows(self, *, statuses: list[str] | None = None, operators: list[str] | None = None,
             min_score: float | None = None, pinned_only: bool = False) -> np.ndarray:
        """The rounds the table's filters keep, in order (``session.filter_rounds``'s rules: ``min_score`` is
        a fraction, and an unmeasured round never passes a minimum above 0)."""
        keep = np.ones(self.total, dtype=bool)
        if statuses:
            keep &= np.isin(self._status, list(statuses))
        if operators:
            keep &= np.isin(self._operator, list(operators))
        if min_score:
            keep &= ~np.isnan(self._score) & (np.nan_to_num(self._score, nan=-1.0) >= min_score)
        if pinned_only:
            keep &= self._pinned
        return self._round[keep]

    def table(self, rounds: np.ndarray, page: int = 1, offline: bool = False) -> pd.DataFrame:
        """Page ``page`` (1-based, clamped) of the table of ``rounds`` (a ``rows`` result): the page's rounds
        read in full (``summary_frame``); ``attrs["matched"]`` keeps how many rounds the filters kept."""
        page = min(max(1, int(page)), page_count(len(rounds)))
        shown = [int(r) for r in rounds[(page - 1) * PAGE_ROWS:page * PAGE_ROWS]]

        def make() -> pd.DataFrame:
            df = summary_frame(self.history.summary_columns(self.info.id, shown) if shown else
                               {c: [] for c in (*ROUND_COLUMNS, "parents")})
            return df.drop(columns=["score", "ci_low", "ci_high", "n"]) if offline else df

        df = self._get(("table", hash(tuple(shown)), len(shown), offline), make).copy()
        df.attrs["matched"] = len(rounds)
        return df

    @property
    def curve(self) -> pd.DataFrame:
        def make() -> pd.DataFrame:
            judge = np.array([np.nan if v is None else v for v in self.cols["judge_total"]], dtype=float)
            cost = np.array([v or 0.0 for v in self.cols["cost"]], dtype=float)
            return curve_frame(pd.DataFrame({"round": self._round, "status": self._status, "operator": self._operator,
                                             "score": self._score, "judge_total": judge, "cost": cost}))
        return self._get("curve", make)

    def score_figure(self) -> Any:
        return self._get("score", lambda: score_figure(self.curve, self.info.offline))

    def cost_figure(self, selected: int | None = None) -> Any | None:
        return self._get(("cost", selected), lambda: cost_figure(self.curve, selected))

    @property
    def generations(self) -> dict[int, int]:
        return self._get("gen", lambda: generations(self.cols["round"], self.cols["parents"]))

    def lineage(self, selected: int | None) -> tuple[Any, str]:
        return self._get(("lineage", selected), lambda: lineage_figure(self.cols, selected, self.generations))


# what a RunView reads for every round (the rest of a round's summary only for the table page on show)
VIEW_COLUMNS = ("round", "status", "score", "cost", "operator", "parents_json", "judge_total", "pinned")
_VIEWS: OrderedDict[tuple, RunView] = OrderedDict()
_VIEWS_LOCK = threading.Lock()
KEEP_VIEWS = 6  # runs whose view stays in memory (a 10,000-round view holds a few MB)


def run_view(history: Any, run_id: int) -> RunView:
    """The run's ``RunView``, rebuilt only when the run was written to since (one small read otherwise)."""
    info = history.run(run_id)
    key = (str(history.ws.path), run_id, info.updated, info.status)
    with _VIEWS_LOCK:
        view = _VIEWS.get(key)
        if view is not None:
            _VIEWS.move_to_end(key)
            view.info = info
            return view
    with _bulk():
        view = RunView(history, info, history.summary_columns(run_id, columns=VIEW_COLUMNS))
    with _VIEWS_LOCK:
        for old in [k for k in _VIEWS if k[:2] == key[:2]]:  # an older state of the same run
            del _VIEWS[old]
        _VIEWS[key] = view
        while len(_VIEWS) > KEEP_VIEWS:
            _VIEWS.popitem(last=False)
    return view


def for_people(table: pd.DataFrame) -> pd.DataFrame:
    """The buffer table as a stakeholder reads it: percentages and dollars written out, the interval in one
    column, and a dash (never "None") where nothing was measured or judged."""
    def pct(v: Any) -> str:
        return "—" if v is None or pd.isna(v) else f"{100 * float(v):.1f}%"

    out = table.copy()
    if "score" in out:
        out["score"] = [pct(v) for v in out["score"]]
    if "ci_low" in out:
        out.insert(out.columns.get_loc("ci_low"), "95% interval",
                   ["—" if lo is None or pd.isna(lo) else f"{100 * float(lo):.0f}–{100 * float(hi):.0f}%"
                    for lo, hi in zip(out["ci_low"], out["ci_high"], strict=True)])
        out = out.drop(columns=["ci_low", "ci_high"])
    if "n" in out:
        out["n"] = ["—" if v is None or pd.isna(v) else f"{int(v):,}" for v in out["n"]]
    if "cost" in out:
        out["cost"] = ["—" if v is None or pd.isna(v) else f"${float(v):.5f}" for v in out["cost"]]
    if "judge_total" in out:
        out["judge_total"] = ["—" if v is None or pd.isna(v) else f"{float(v):.1f} / 50" for v in out["judge_total"]]
    if "operator" in out:
        out["operator"] = [edit_name(v if isinstance(v, str) else None) for v in out["operator"]]
    if "detail" in out:
        out["detail"] = [edit_detail(v) if isinstance(v, str) else v for v in out["detail"]]
    for col in ("note", "detail", "reason", "judge", "parents"):
        if col in out:
            out[col] = ["" if v is None or (not isinstance(v, str) and pd.isna(v)) else v for v in out[col]]
    return out.rename(columns={"judge_total": "judge total", "n": "problems"})


MODE_WORDS = {"llm": "candidates from the LLM optimizer", "programmatic": "candidates from the programmatic operators"}


def config_text(cfg: dict) -> str:
    """A run's settings as the Evolve form names them ('4 candidates a round · parents from the top 4 ...'),
    not as its config keys (K=, α=, λ=, top-k=)."""
    parts = [MODE_WORDS.get(cfg.get("mode"), f"mode {cfg.get('mode')}") if cfg.get("mode") else None,
             f"{count(int(cfg['candidates']), 'candidate')} a round" if cfg.get("candidates") is not None else None,
             f"parents from the top {cfg['top_k']}" if cfg.get("top_k") is not None else None,
             f"favour the best {cfg['alpha']:g} (α)" if cfg.get("alpha") is not None else None,
             f"{100 * cfg['lam']:.0f}% picked at random (λ)" if cfg.get("lam") is not None else None]
    return " · ".join(p for p in parts if p)


def score_text(x: float | None, per_problem: list[dict] | None = None) -> str:
    """A round's score as the History page says it: '87.5%', '87.5% · 1 not run' when problems were errored
    (left out of the score), or 'not measured'."""
    if x is None:
        return "not measured"
    errored = sum(bool(p.get("errored")) for p in per_problem or [] if isinstance(p, dict))
    return f"{100 * x:.1f}%" + (f" · {not_run_text(errored).split(' (')[0]}" if errored else "")
