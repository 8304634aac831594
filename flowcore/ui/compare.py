"""What the Compare page (and the test-split sections of Evolve and History) need from the engine, without
any layout: the workflows one can pick, the stakeholder table, the score-vs-cost figure with its Pareto front,
the per-problem agreement, and a caption saying whose split the problems are."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from typing import Any

import pandas as pd

from flowcore.evaluation.compare import BASELINE_TITLES, Comparison, baseline_title, baselines
from flowcore.evolution.history import History
from flowcore.evolution.outcome import outcome
from flowcore.evolution.testsplit import ranked_rounds
from flowcore.mermaid import safe
from flowcore.ui.words import edit_name
from flowcore.workspace import library
from flowcore.workspace.store import Workspace

__all__ = ["agreement_frame", "evolved_notes", "evolved_rounds", "for_people", "label_positions", "pareto_figure",
           "people_name", "result_sentence", "split_caption", "table_frame", "validation_test_frame",
           "workflow_sources"]


def workflow_sources(ws: Workspace, task: str, per_run: int = 5) -> dict[str, str]:
    """label -> workflow text for one task: the baselines, the bundled examples (seeds and case studies), the
    saved workflows, and each evolution run's best measured rounds (top ``per_run`` by validation score)."""
    out: dict[str, str] = {}
    for name, _, text in baselines(task):
        out[f"baseline · {baseline_title(name)}"] = text
    for name, t, text in library.examples():
        if t == task:
            out[f"example · {name}"] = text
    for entry in library.list_workflows(ws):
        if entry.task == task and entry.valid:
            out[f"saved · {entry.name} v{entry.version}"] = library.load_workflow(ws, entry.name)[0]
    h = History(ws)
    for info in reversed(h.runs()):
        if info.task != task or info.offline:
            continue
        best = ranked_rounds(h.summaries(info.id), per_run, info.config.get("search", "paper"))
        for i, r in enumerate(best):  # only these rounds are read in full; the run's result first
            text = (h.get_round(info.id, r["round"]) or {}).get("workflow_text")
            if text:
                mark = " · the run's result" if i == 0 else ""
                out[f"run #{info.id} · round {r['round']} · validation {100 * r['score']:.1f}%{mark}"] = text
    return out


def short_name(label: str) -> str:
    """A table column name for a picked label ('baseline · CoT (math)' -> 'CoT (math)')."""
    head, _, rest = label.partition(" · ")
    return rest if head in ("baseline", "example", "saved") else label.split(" · validation")[0]


def split_caption(split: dict) -> str:
    s = split or {}
    text = f"**{s.get('split', '?')}** problems"
    if s.get("test_n") is not None:
        text += f" of {s['validation_n']} validation / {s['test_n']} test — {safe.plain(s.get('source'))}"
    elif s.get("source"):
        text += f" — {safe.plain(s['source'])}"
    if s.get("limit"):
        text += f" (first {s['limit']})"
    if s.get("papers"):
        text += f". The papers' files: {s['papers']['validation_n']} / {s['papers']['test_n']}"
    return text + (f". {s['note'][0].upper()}{s['note'][1:]}." if s.get("note") else ".")


def people_name(name: str, benchmark: str | None = None) -> str:
    """The command line's 'baseline:cot' as the pages name it ('CoT (math)'); other names unchanged."""
    if not name.startswith("baseline:"):
        return name
    from flowcore.tasks.saved import kind_of

    kind = name.partition(":")[2]
    task = kind_of(benchmark) if benchmark else None
    return baseline_title(f"{task}_{kind}") if task else BASELINE_TITLES.get(kind, kind)


def for_people(c: Comparison) -> Comparison:
    """A copy of ``c`` whose workflows carry the names a stakeholder reads (``people_name``); kept as they are
    when two would read the same."""
    names = [people_name(m.name, c.benchmark) for m in c.measurements]
    if len(set(names)) < len(names):
        return c
    out = copy.copy(c)
    out.measurements = [dataclasses.replace(m, name=n) for m, n in zip(c.measurements, names, strict=True)]
    return out


_EVOLVED = re.compile(r"^run #(\d+) · round (\d+)")


def evolved_rounds(c: Comparison, ws: Workspace) -> dict[str, dict]:
    """workflow name -> its stored evolution round (light row, with the run's id) for the compared workflows
    that are evolved rounds ('run #3 · round 7'), so their validation score can stand beside this score."""
    h, out = History(ws), {}
    for r in c.rows():
        m = _EVOLVED.match(r["workflow"])
        if m is None:
            continue
        try:
            found = h.summaries(int(m.group(1)), [int(m.group(2))])
        except KeyError:
            continue
        if found:
            out[r["workflow"]] = {**found[0], "run_id": int(m.group(1))}
    return out


def evolved_notes(c: Comparison, ws: Workspace) -> list[str]:
    """For each compared round that is its run's result: its validation score beside the score measured here,
    and whether its validation gain over the seed was within noise (the winner's curse, said plainly)."""
    notes = []
    scored = {r["workflow"]: r for r in c.rows()}
    for name, row in evolved_rounds(c, ws).items():
        found = outcome(ws, row["run_id"])
        here = scored[name]
        if found is None or found.round != row["round"] or here["score"] is None:
            continue
        gap = 100 * (here["score"] - found.validation)
        noise = {True: "within noise", False: "beyond noise", None: "not compared"}[found.within_noise]
        notes.append(f"{safe.plain(name)} is run #{row['run_id']}'s result: validation {100 * found.validation:.1f}%"
                     f"{_ci(found.val_low, found.val_high)} on {found.val_n} problems (its gain over the seed "
                     f"{noise}), here {100 * here['score']:.1f}%{_ci(here['ci_low'], here['ci_high'])}: "
                     f"{gap:+.1f} points" + (" (the winner's curse: the best of many noisy validation scores is "
                                               "partly luck)" if gap < 0 else ""))
    return notes


def _ci(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f" [{100 * lo:.1f}, {100 * hi:.1f}]"


def table_frame(c: Comparison, ws: Workspace | None = None) -> pd.DataFrame:
    """The stakeholder table: percentages and points, the best marked, p-values as numbers; with ``ws``, an
    evolved round also shows the validation score evolution chose it by."""
    rows = []
    evolved = evolved_rounds(c, ws) if ws is not None else {}
    for r in c.rows():
        none = r["score"] is None  # every run errored: no score
        v = evolved.get(r["workflow"])
        rows.append({"workflow": r["workflow"], "best": "★" if r["best"] else "",
                     "score %": None if none else 100 * r["score"],
                     "95% CI": "no problem scored" if none else f"{100 * r['ci_low']:.1f} – {100 * r['ci_high']:.1f}",
                     **({"validation %": None if v is None or v["score"] is None else 100 * v["score"],
                         "validation 95% CI": "—" if v is None or v["ci_low"] is None else
                         f"{100 * v['ci_low']:.1f} – {100 * v['ci_high']:.1f}"} if evolved else {}),
                     "sd %": "— (one run)" if r["sd"] is None else f"{100 * r['sd']:.1f}", "errors": r["errors"],
                     "cost/problem $": r["cost_per_problem"], "tokens": r["tokens"], "calls": r["calls"],
                     "Δ vs best (pts)": "— (the best)" if r["best"] else "—" if r["diff_vs_best"] is None else
                     f"{100 * r['diff_vs_best']:+.1f}",
                     "Δ 95% CI": "—" if r["diff_low"] is None else
                     f"{100 * r['diff_low']:+.1f} – {100 * r['diff_high']:+.1f}",
                     "McNemar p": "—" if r["mcnemar_p"] is None else f"{r['mcnemar_p']:.3f}",
                     "Pareto": "yes" if r["pareto"] else ""})
        if r.get("wilcoxon_p") is not None or r.get("graded_by"):  # fractional scores: the signed-rank test
            rows[-1]["Wilcoxon p"] = "—" if r.get("wilcoxon_p") is None else f"{r['wilcoxon_p']:.3f}"
        if r.get("graded_by"):
            rows[-1]["graded by"] = "a model (" + ", ".join(r["graded_by"]) + ")"
    return pd.DataFrame(rows)


def table_rows(frame: pd.DataFrame) -> list[dict[str, str]]:
    """:func:`table_frame` as the page prints it: every cell a string for people (points to one decimal, dollars,
    thousands separated, "—" for nothing). The page draws it as a markdown table (`safe.table`): a few rows need
    no data grid, whose scripts (Arrow and the grid, ~1.4 MB) were a quarter of Compare's first paint."""
    def cell(col: str, v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "—"
        if col in ("score %", "validation %"):
            return f"{float(v):.1f}"
        if col == "cost/problem $":
            return f"${float(v):.6f}"
        if col in ("tokens", "calls", "errors"):
            return f"{int(v):,}"
        return str(v)

    return [{col: cell(col, v) for col, v in row.items()} for row in frame.to_dict("records")]


def graded_note(c: Comparison) -> str | None:
    """'Scores graded by a model (NAME)…' when a judge metric made any score of this comparison."""
    from flowcore.tasks.metrics import graded_by_note

    models = sorted({g for m in c.measurements for g in m.graded_by})
    if not models:
        return None
    return (f"Scores {safe.plain(graded_by_note(models))}: the task's judge metric grades each answer against the reference "
            "and its rubric; each grade's reason is kept with the results.")


def agreement_frame(c: Comparison) -> pd.DataFrame:
    """Which problems each workflow solves (solve rate with repeats), disagreements first."""
    df = pd.DataFrame(c.agreement())
    if df.empty:
        return df
    return df.sort_values("agree", kind="stable").reset_index(drop=True)


def label_positions(rows: list[dict]) -> dict[str, str]:
    """Where each Pareto point's name goes, clear of the front's step line: the line leaves a point to the
    right and reaches it from below, so a name sits above-left of its point; the cheapest point's name goes
    below-right (nothing reaches it, and the y axis is on its left)."""
    front = sorted((r for r in rows if r["pareto"] and r["score"] is not None), key=lambda r: r["cost_per_problem"])
    return {r["workflow"]: "bottom right" if i == 0 else "top left" for i, r in enumerate(front)}


STAR = "M0,-1L0.24,-0.33L0.95,-0.31L0.39,0.12L0.59,0.81L0,0.4L-0.59,0.81L-0.39,0.12L-0.95,-0.31L-0.24,-0.33Z"
# a name's offset from its point for each ``label_positions`` place: (align, baseline, dx, dy)
PLACES = {"top left": ("right", "bottom", -7, -5), "bottom right": ("left", "top", 7, 5)}
GROUPS = (("best", "#1565c0"), ("on the Pareto front", "#1565c0"), ("others (name on hover)", "#90a4ae"),
          ("Pareto front", "#1565c0"))


def pareto_figure(c: Comparison) -> Any:
    """Score (percent) against cost per problem, as a Vega-Lite chart: the Pareto front as a step line with its
    points named (names placed clear of the line, ``label_positions``), the best as a star, the others unnamed
    (their names on hover), each with its 95% interval; axes padded around the data and written for people
    (percent, dollars), the legend below the axis title. Layers: intervals, front line, then one per group
    (``GROUPS``, the ``series`` column), then the names (one layer per place)."""
    import altair as alt

    rows = [r for r in c.rows() if r["score"] is not None]  # nothing scored: nothing to plot
    where = label_positions(rows)
    data = pd.DataFrame({
        "workflow": [r["workflow"] for r in rows], "cost": [float(r["cost_per_problem"]) for r in rows],
        "score": [100 * r["score"] for r in rows], "low": [100 * r["ci_low"] for r in rows],
        "high": [100 * r["ci_high"] for r in rows], "pareto": [bool(r["pareto"]) for r in rows],
        "series": [GROUPS[0][0] if r["best"] else GROUPS[1][0] if r["pareto"] else GROUPS[2][0] for r in rows],
        "place": [where.get(r["workflow"], "") for r in rows]},
        columns=["workflow", "cost", "score", "low", "high", "pareto", "series", "place"])
    lo, hi = float(data["low"].min()) if rows else 0.0, float(data["high"].max()) if rows else 100.0
    costs = list(data["cost"]) or [0.0]
    pad = (max(costs) - min(costs)) * 0.12 or max(costs) * 0.2 or 1e-6
    x = alt.X("cost:Q", title="cost per problem", axis=alt.Axis(format="$,.6~f", labelOverlap=True, tickCount=6),
              scale=alt.Scale(domain=[max(0.0, min(costs) - pad), max(costs) + 2 * pad], nice=False))
    y = alt.Y("score:Q", title="score", axis=alt.Axis(labelExpr="datum.value + '%'"),
              scale=alt.Scale(domain=[max(-2.0, lo - 8), min(108.0, hi + 8)], nice=False, zero=False))
    shown = [g for g, _ in GROUPS if g in set(data["series"]) or (g == "Pareto front" and data["pareto"].any())]
    legend = alt.Legend(orient="bottom", title=None, direction="horizontal", symbolStrokeWidth=2.5, labelLimit=0)
    color = alt.Color("series:N", scale=alt.Scale(domain=shown, range=[col for g, col in GROUPS if g in shown]),
                      legend=legend)
    shape = alt.Shape("series:N", legend=legend, scale=alt.Scale(  # the legend draws the star, dots and line
        domain=shown, range=[{"best": STAR, "Pareto front": "stroke"}.get(g, "circle") for g in shown]))
    tip = [alt.Tooltip("workflow:N"), alt.Tooltip("score:Q", format=".1f", title="score %"),
           alt.Tooltip("low:Q", format=".1f", title="95% low"), alt.Tooltip("high:Q", format=".1f", title="95% high"),
           alt.Tooltip("cost:Q", format="$.6f", title="a problem")]
    front = data[data["pareto"]].sort_values("cost").assign(series="Pareto front")
    layers = [alt.Chart(data).mark_rule(color="#b0bec5", strokeWidth=1.5).encode(x=x, y=alt.Y("low:Q"), y2="high:Q"),
              alt.Chart(front).mark_line(interpolate="step-after", strokeDash=[6, 4]).encode(x=x, y=y, color=color)]
    for group, size in ((GROUPS[0][0], 260), (GROUPS[1][0], 110), (GROUPS[2][0], 90)):
        layers.append(alt.Chart(data[data["series"] == group]).mark_point(filled=True, opacity=1, size=size)
                      .encode(x=x, y=y, color=color, shape=shape, tooltip=tip))
    for place, (align, baseline, dx, dy) in PLACES.items():
        layers.append(alt.Chart(data[data["place"] == place]).mark_text(align=align, baseline=baseline, dx=dx, dy=dy,
                                                                        fontSize=12).encode(x=x, y=y, text="workflow:N"))
    return alt.layer(*layers).properties(title="Score vs cost per problem (bars: 95% interval)", height=420)


def result_sentence(ws: Workspace, run_id: int) -> str | None:
    """The run's result in one line (its chosen round's validation score, gain over the seed and whether that
    is within noise, its test score when measured); None while nothing is measured or for a structure-only run."""
    if History(ws).run(run_id).offline:
        return None
    found = outcome(ws, run_id)
    return None if found is None else found.sentence()


def validation_test_frame(ws: Workspace, run_id: int) -> pd.DataFrame:
    """Validation and test side by side (percent, with intervals) for a run's test-scored rounds; the round the
    run offers as its result is marked."""
    from flowcore.evolution.testsplit import validation_vs_test

    df = validation_vs_test(ws, run_id)
    if df.empty:
        return df
    found = outcome(ws, run_id)

    def pct(v: Any) -> float | None:
        return None if v is None or pd.isna(v) else 100 * float(v)

    return pd.DataFrame([{"round": r["round"], "result": "★" if found and found.round == r["round"] else "",
                          "edit": edit_name(r["operator"]), "validation %": pct(r["validation"]),
                          "validation 95% CI": "—" if pct(r["val_low"]) is None else
                          f"{pct(r['val_low']):.1f} – {pct(r['val_high']):.1f}", "val n": r["val_n"],
                          "test %": pct(r["test"]), "test 95% CI": f"{pct(r['test_low']):.1f} – {pct(r['test_high']):.1f}",
                          "test n": r["test_n"], "repeats": r["repeats"], "test sd %": pct(r["test_sd"]),
                          "errors": r["errors"], "test cost $": r["test_cost"], "split": r["split"]}
                         for r in df.to_dict("records")])
