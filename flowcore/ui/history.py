"""The History page's engine side at scale: a run's rounds as one light table (no round's large JSON decoded),
vectorised curves, and the lineage drawn as a Vega-Lite chart on a networkx layered layout — the whole tree for
small runs, a collapsed view (the ancestry of the best, pinned and selected rounds) for long ones.

Everything here is linear in the number of rounds (10,000 rounds: see ``benchmarks/history_scale.py``); the
page reads one round in full only when it is shown in detail. ``run_view`` keeps what is derived from a run
(table, curves, figures, generations, lineages) until the run changes: a page rerun (any widget touched)
reads one row to learn that nothing did.
"""

from __future__ import annotations

import gc
import heapq
import html
import threading
from collections import Counter, OrderedDict, deque
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd

from flowcore.evaluation.results import estimate_note
from flowcore.mermaid.safe import markdown, plain
from flowcore.tasks.harness import not_run_text
from flowcore.ui import svgplot
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


FAILED = "failed round (vetoed or not evaluated)"


def _series(domain: list[str], colors: list[str], shapes: list[str] | None = None) -> dict[str, Any]:
    """The colour (and for point marks the shape) channel of a chart's named series: one legend, below the
    plot, clear of the ticks, each entry drawn as its marks are (a star, a ✖, a line)."""
    import altair as alt

    legend = alt.Legend(orient="bottom", title=None, direction="horizontal", symbolStrokeWidth=2.5, labelLimit=0)
    out = {"color": alt.Color("series:N", scale=alt.Scale(domain=domain, range=colors), legend=legend)}
    if shapes:
        out["shape"] = alt.Shape("series:N", scale=alt.Scale(domain=domain, range=shapes), legend=legend)
    return out


def score_figure(curve: pd.DataFrame, offline: bool, width: int = 640) -> str:
    """Score per round and best so far (failed rounds marked ✖ on the axis, never scored); for a structure-only
    run the judge's total. Drawn on the server (``svgplot``): the per-round line and its points (up to ``DENSE``
    rounds), best so far as a dashed step line, the failed rounds; each point's values on hover (past
    ``svgplot.MARKS`` failed rounds their ✖ are drawn without)."""
    dense = len(curve) > DENSE
    failed = curve[curve["status"] == "failed"]
    if offline:  # a failed (e.g. vetoed) round's judge total is not a result: it is marked like any failed round
        judged = curve[_finite(curve["judge_total"]) & (curve["status"] != "failed")]
        name, xs, ys, ops = "judge total (structure only)", judged["round"], judged["judge_total"], judged["operator"]
        title, ytitle = "Judge total per round (structure only)", "judge total (0-50)"
        y = svgplot.Axis(ytitle, -2.5, 52.5, fmt=svgplot.num, ticks=range(0, 51, 10))
    else:
        measured = curve[_finite(curve["score"])]  # a stored NaN or ±inf is no measurement (a team member's row)
        name, xs, ys, ops = "score per round", measured["round"], measured["score"], measured["operator"]
        title, ytitle = "Validation score per round", "score"
        y = svgplot.Axis(ytitle, -5, 105, fmt=lambda v: f"{v:.0f}%", ticks=range(0, 101, 20))
    last = float(curve["round"].max()) if len(curve) else 1.0
    x = svgplot.Axis("round", -0.3, last + 0.3, fmt=lambda v: f"{v:.0f}", integer=True, count=10)
    unit = "" if offline else "%"
    tips = None if dense else [f"round {r} · {ytitle} {v:.1f}{unit} · {w}"
                               for r, v, w in zip(_arr(xs), _arr(ys), _words(ops), strict=True)]
    series = [svgplot.Series(name, "#1565c0", _arr(xs), _arr(ys), shape=None if dense else "circle", tips=tips)]
    if not offline:
        bx, by = _steps(measured["round"], measured["score"].astype(float).cummax())  # of these scores only
        series.append(svgplot.Series("best so far", "#00897b", bx, by, line="step"))
    if len(failed):  # one drawing of a failed round (vetoed, no candidate, an error), measured run or not
        rounds = _arr(failed["round"])
        series.append(svgplot.Series(FAILED, "#c62828", rounds, [0.0] * len(rounds), line=None, shape="cross",
                                     tips=[f"round {r}: failed (vetoed or not evaluated)" for r in rounds]))
    return svgplot.svg(svgplot.Plot(title, x, y, series, width=width))


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


def _finite(column: pd.Series) -> np.ndarray:
    """Which values of ``column`` are numbers a chart can place (not None, NaN or ±inf)."""
    return np.isfinite(column.to_numpy(dtype=float, na_value=np.nan))


def _words(ops: pd.Series) -> Any:
    """Each round's edit in words, for the hover text."""
    return np.array([edit_name(o) for o in ops], dtype=object)


def _arr(series: pd.Series) -> Any:
    """A column as a numpy array (a chart's frame is built from whole arrays, not element by element)."""
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


def cost_figure(curve: pd.DataFrame, selected: int | None = None, width: int = 640) -> str | None:
    """Cost of each measured round against its score (None when no round was measured), drawn on the server:
    only the rounds on the cost/score front and the ``selected`` one are named (none past ``DENSE`` rounds), the
    rest on hover (past ``DENSE`` rounds only those, up to ``svgplot.MARKS`` of them); the score range padded around
    the data, the cost in dollars."""
    measured = curve[_finite(curve["score"]) & _finite(curve["cost"])]  # a NaN or ±inf cost has no place either
    if measured.empty:
        return None
    rounds = [int(r) for r in measured["round"]]
    costs, scores = _arr(measured["cost"]).astype(float), _arr(measured["score"]).astype(float)
    front = cost_front(list(costs), list(scores))
    lo, hi = float(scores.min()), float(scores.max())
    pad = max((hi - lo) * 0.15, 5.0)  # every point at 33.3% is a band around 33.3%, not 32.5–34
    cpad = (float(costs.max()) - float(costs.min())) * 0.12 or float(costs.max()) * 0.2 or 1e-6
    x = svgplot.Axis("cost of the round", max(0.0, float(costs.min()) - cpad), float(costs.max()) + cpad,
                     fmt=dollars, count=5)  # never '100μ … 500μ'
    y = svgplot.Axis("score", max(-2.0, lo - pad), min(102.0, hi + pad), fmt=lambda v: f"{v:g}%")
    named = [i for i, r in enumerate(rounds) if i in front or r == selected]
    tips = [f"round {r} · score {s:.1f}% · ${c:,.5f}" for r, s, c in zip(rounds, scores, costs, strict=True)]
    if len(measured) <= DENSE:
        series = [svgplot.Series("rounds", "#1565c0", costs, scores, line=None, shape="circle", in_legend=False,
                                 tips=tips, labels=[f"#{r}" if i in named else "" for i, r in enumerate(rounds)])]
    else:  # thousands of rounds: one path of dots; only the front and the chosen round keep their hover text
        series = [svgplot.Series("rounds", "#1565c0", costs, scores, line=None, shape="circle", in_legend=False,
                                 compact=True),
                  svgplot.Series("cheapest per score", "#0d47a1", costs[named], scores[named], line=None,
                                 shape="circle", in_legend=False, tips=[tips[i] for i in named])]
    return svgplot.svg(svgplot.Plot("Cost vs score (named: the cheapest per score, the chosen round)", x, y,
                                    series, width=width))


def dollars(v: float) -> str:
    """A cost axis's tick: '$0.0003', '$1.25', '$12,000' (as many decimals as it needs, at most 5)."""
    text = f"${v:,.5f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


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


# a colour per kind of node; pinned rounds are ringed, whatever their kind
_KINDS = (("measured", "#1565c0"), ("not measured", "#78909c"), ("failed", "#c62828"), ("selected", "#2e7d32"),
          ("pinned", "#ef6c00"))


def lineage_figure(cols: dict[str, list], selected: int | None = None,
                   gen: dict[int, int] | None = None) -> tuple[Any, str]:
    """(Vega-Lite chart, caption): the lineage tree, left to right by generation (networkx multipartite layout);
    measured rounds blue, unmeasured grey, failed red, the selected one green, pinned ones ringed orange;
    hover shows the edit and score. Layers: edges, nodes (``kind`` per row), names (small trees), rings.
    ``gen`` is ``generations`` of the run when the caller already has it."""
    import altair as alt
    import networkx as nx

    nodes, what = lineage_nodes(cols, selected)
    keep = set(nodes)
    index = {r: i for i, r in enumerate(cols["round"])}
    gen = generations(cols["round"], cols["parents"]) if gen is None else gen
    g = nx.DiGraph()
    for n in nodes:
        g.add_node(n, gen=gen.get(n, 0))
    g.add_edges_from((p, n) for n in nodes for p in cols["parents"][index[n]] or [] if p in keep)
    pos = nx.multipartite_layout(g, subset_key="gen", align="vertical") if nodes else {}
    small = len(nodes) <= 40

    def kind(n: int) -> str:
        i = index[n]
        return ("selected" if n == selected else "failed" if cols["status"][i] == "failed" else
                "measured" if cols["score"][i] is not None else "not measured")

    def score(n: int) -> str:
        i, s = index[n], cols["score"][index[n]]
        return "failed" if cols["status"][i] == "failed" else "structure-only" if s is None else f"{100 * s:.1f}%"

    dots = pd.DataFrame({"round": nodes, "x": [float(pos[n][0]) for n in nodes], "y": [float(pos[n][1]) for n in nodes],
                         "series": [kind(n) for n in nodes], "name": [f"#{n}" for n in nodes],
                         "edit": [edit_name(cols["operator"][index[n]]) for n in nodes],
                         "score": [score(n) for n in nodes], "pinned": [bool(cols["pinned"][index[n]]) for n in nodes]})
    edges = pd.DataFrame([{"x": pos[a][0], "y": pos[a][1], "x2": pos[b][0], "y2": pos[b][1]} for a, b in g.edges],
                         columns=["x", "y", "x2", "y2"])
    shown = [k for k, _ in _KINDS if k in set(dots["series"]) or (k == "pinned" and dots["pinned"].any())]
    color = _series(shown, [c for k, c in _KINDS if k in shown])["color"]
    x = alt.X("x:Q", axis=None, scale=alt.Scale(nice=False, zero=False, padding=28))
    y = alt.Y("y:Q", axis=None, scale=alt.Scale(nice=False, zero=False, padding=28))
    layers = [alt.Chart(edges).mark_rule(color="#b0bec5", strokeWidth=1).encode(x=x, y=y, x2="x2:Q", y2="y2:Q"),
              alt.Chart(dots).mark_circle(size=190 if small else 60, opacity=1, stroke="#ffffff", strokeWidth=1)
              .encode(x=x, y=y, color=color, tooltip=["name:N", "edit:N", "score:N"])]
    if small:
        layers.append(alt.Chart(dots).mark_text(dy=-14, fontSize=12).encode(x=x, y=y, text="name:N"))
    rings = dots[dots["pinned"]].assign(series="pinned")
    layers.append(alt.Chart(rings).mark_point(size=420 if small else 170, filled=False, strokeWidth=3)
                  .encode(x=x, y=y, color=color))
    height = min(170 + 40 * max(Counter(gen[n] for n in nodes).values(), default=1), 590)
    chart = alt.layer(*layers).properties(height=height).configure_view(stroke=None)
    return chart, f"Lineage (parents → children, left to right by generation): {what}."


def sampling_figure(frame: pd.DataFrame) -> Any:
    """Selection probabilities of the round's parent pool (``session.sampling_frame``), the drawn parents in blue."""
    import altair as alt

    data = frame.assign(series=["drawn parent" if p else "not drawn" for p in frame["parent"]],
                        measured=["not measured" if s is None or pd.isna(s) else f"score {s:.1f}%"
                                  for s in frame["score"]])[["round", "probability", "series", "measured"]]
    return alt.Chart(data).mark_bar().encode(
        x=alt.X("round:N", title="pool round", sort=None, axis=alt.Axis(labelAngle=0)),  # labels, in pool order
        y=alt.Y("probability:Q", scale=alt.Scale(domain=[0, 1]), title="probability"),
        color=_series(["drawn parent", "not drawn"], ["#1565c0", "#90a4ae"])["color"],
        tooltip=["round:N", alt.Tooltip("probability:Q", format=".2f"), alt.Tooltip("measured:N", title="score")],
    ).properties(title="Parent selection probabilities (drawn parents in blue)", height=300)


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

    def estimated(self) -> dict[int, int]:
        """Per round, how many of its calls had no usage from the endpoint (read now: not kept with the view)."""
        return self.history.estimated_by_round(self.info.id)

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


def for_people(table: pd.DataFrame, estimated: dict[int, int] | None = None) -> pd.DataFrame:
    """The buffer table as a stakeholder reads it: percentages and dollars written out (a '~' before the cost of
    a round some of whose calls had no usage from the endpoint: ``estimated``, per round), the interval in one
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
        rounds = list(out["round"]) if "round" in out else [None] * len(out)
        out["cost"] = ["—" if v is None or pd.isna(v) else ("~" if (estimated or {}).get(r) else "") + f"${float(v):.5f}"
                       for v, r in zip(out["cost"], rounds, strict=True)]
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


def run_caption(info: Any, status: str) -> str:
    """The line under the run picker: benchmark, settings in the Evolve form's words, status (and why)."""
    why = f" ({plain(info.reason)})" if info.reason else ""
    return f"Benchmark **{info.benchmark}** ({info.task}) · {config_text(info.config)} · status **{status}**{why}"


SCORE_HELP = ("Validation score measured when the round was evaluated (— : not measured; 'not run': problems with "
              "no verdict, left out of the score)")


def round_metrics(row: dict, judge_total: float | None, estimated: int | None = None) -> list[tuple[str, str, str | None]]:
    """The four figures above a round's detail as (label, value, hover help), a dash where nothing was measured;
    '~' before the cost when ``estimated`` (default: the row's, see round_and_parent) of its calls had no usage
    from the endpoint."""
    estimated = row.get("estimated", 0) if estimated is None else estimated
    return [("Score", "—" if row["score"] is None else score_text(row["score"], row.get("per_problem")), SCORE_HELP),
            ("95% interval", "—" if row["ci_low"] is None else
             f"{100 * row['ci_low']:.0f}–{100 * row['ci_high']:.0f}%", None),
            ("Cost", ("~" if estimated else "") + f"${row['cost'] or 0:.5f}", estimate_note(estimated) or None),
            ("Judge total", "—" if judge_total is None else f"{judge_total:.1f} / 50",
             f"judge: {plain(row['judge'] or '—')}")]


def round_caption(row: dict, run) -> str:
    """What the round's edit did and who made it (the round's own author, else the run's ``created_by``), escaped."""
    return f"{markdown(row['detail'] or '')} · made by {plain(row.get('created_by') or run.created_by)}"


def candidates_table(cands: pd.DataFrame) -> pd.DataFrame:
    """A round's candidates (``session.candidates_frame``) with their edits and reasons in people's words."""
    out = cands.copy()
    out["operator"] = [edit_name(o) for o in out["operator"]]
    for col in ("detail", "dropped"):
        out[col] = [edit_detail(v) for v in out[col]]
    return out


def reeval_rows(done: list[Any], answers: Any) -> list[dict]:
    """The round's re-evaluations as table rows; ``answers(eval_id)`` says how many answers came from the cache."""
    return [{"evaluation": f"#{e.id}", "status": e.status, "score": e.score, "n": f"{e.n}/{e.total}",
             "cost": e.cost, "answers": answers(e.id)} for e in done]


# a unified diff's line kinds and their colours (GitHub's): header, hunk, added, removed
_DIFF_STYLE = (("+++", "font-weight:600"), ("---", "font-weight:600"), ("@@", "color:#0550ae"),
               ("+", "color:#116329;background:#dafbe1"), ("-", "color:#82071e;background:#ffebe9"))


def diff_html(diff: str) -> str:
    """A unified diff as a coloured ``<pre>``, every character of the texts escaped (a workflow's text is
    untrusted: ``<img>`` in a label is shown, never loaded). Plain HTML, so the page needs no code highlighter
    (Streamlit's is a 1.5 MB chunk, about a second of a first paint on a busy machine)."""
    rows = []
    for line in (diff or "(no textual change)").splitlines():
        style = next((css for head, css in _DIFF_STYLE if line.startswith(head)), "")
        text = html.escape(line, quote=True) or " "
        rows.append(f'<span style="display:block;{style}">{text}</span>' if style else f"<span>{text}</span>\n")
    return ('<pre class="mf-diff" style="font-size:13px;line-height:1.45;padding:12px 16px;border-radius:8px;'
            'background:#f6f8fa;overflow-x:auto;white-space:pre;margin:0">' + "".join(rows) + "</pre>")


SECTIONS = ("Score curves", "Rounds", "Lineage", "Round detail", "Validation → test")


def sections(offline: bool) -> list[str]:
    """The History page's sections for a run: a structure-only run has no test split to show."""
    return list(SECTIONS[:-1] if offline else SECTIONS)


def round_and_parent(history: Any, run_id: int, rnd: int) -> tuple[dict | None, dict | None]:
    """Round ``rnd`` read in full, with ``estimated`` (how many of its calls had no usage from the endpoint), and
    its first parent (None for the seed or a parent not stored)."""
    row = history.get_round(run_id, rnd)
    if row is not None:
        row["estimated"] = history.estimated_by_round(run_id).get(rnd, 0)
    first = (row["parents"] or [None])[0] if row else None
    return row, history.get_round(run_id, first) if first is not None else None
