"""The evaluation protocol against a scripted OpenAI-compatible server whose correctness per problem is known:
``compare`` gives the exact per-problem outcomes, McNemar's exact p-value (checked against a hand computation)
and a paired-bootstrap interval containing the true difference; ``--repeats`` makes R × n calls at the server
with the cache bypassed; split files; the baselines; bad inputs."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path

import pytest

from flowcore.cli.main import main
from flowcore.evaluation.compare import Comparison, baselines, list_comparisons, load_comparison, measure
from flowcore.evaluation.stats import mcnemar_exact, paired_bootstrap, pareto_front
from flowcore.llm.client import LLM, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.tasks import load, split_info
from flowcore.ui.compare import pareto_figure, table_frame
from tests.helpers.fakellm import Fault, message_text
from tests.helpers.vega import layers

ROOT = Path(__file__).resolve().parents[2]
N = 12
PROBLEMS = load("gsm8k", "test", limit=N)
SOLVED = {"A": {0, 1, 2, 3, 4, 5, 6, 7, 9, 10}, "B": {0, 1, 2, 3, 8, 11}}  # by index into PROBLEMS


def seed_variant(marker: str) -> str:
    text = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text()
    return text.replace("Solve the math problem step by step.", f"{marker}: solve the math problem step by step.")


def scripted(request: dict) -> str:
    """Workflow A (marker MARK-A) or B solves exactly the problems in SOLVED; anything else says 'no idea'."""
    text = message_text(request)
    who = "A" if "MARK-A" in text else "B" if "MARK-B" in text else None
    for i, p in enumerate(PROBLEMS):
        if p.question in text:
            if who is not None and i in SOLVED[who]:
                return f"Step by step, the answer is {p.reference}."
            return "Step by step, the answer is -12345."
    return "no idea"


@pytest.fixture
def workflows(tmp_path) -> tuple[str, str]:
    a, b = tmp_path / "wf_a.mmd", tmp_path / "wf_b.mmd"
    a.write_text(seed_variant("MARK-A"))
    b.write_text(seed_variant("MARK-B"))
    return str(a), str(b)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def hand_mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar by hand: twice the smaller binomial tail of Binomial(b + c, 1/2), at most 1."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


# -- statistics ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("b", "c"), [(8, 2), (2, 8), (5, 5), (0, 6), (1, 0), (13, 4), (0, 0)])
def test_mcnemar_exact_matches_the_hand_computation(b, c):
    a = [True] * b + [False] * c + [True] * 3 + [False] * 2
    bb = [False] * b + [True] * c + [True] * 3 + [False] * 2
    res = mcnemar_exact(a, bb)
    assert (res.only_a, res.only_b, res.both, res.neither) == (b, c, 3, 2)
    assert res.p_value == pytest.approx(hand_mcnemar(b, c), rel=1e-12)
    assert mcnemar_exact(bb, a).p_value == pytest.approx(res.p_value)  # symmetric


def test_mcnemar_p_for_eight_to_two_is_112_over_1024():
    assert mcnemar_exact([True] * 8 + [False] * 2, [False] * 8 + [True] * 2).p_value == pytest.approx(112 / 1024)


def test_paired_bootstrap_and_its_edge_cases():
    a = [1, 1, 1, 0, 1, 0, 1, 1, 0, 1] * 3
    b = [1, 0, 1, 0, 0, 0, 1, 0, 0, 1] * 3
    diff, lo, hi = paired_bootstrap(a, b)
    assert diff == pytest.approx(0.3) and lo < 0.3 < hi and lo > 0  # every discordant pair favours a
    assert paired_bootstrap([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0)
    assert paired_bootstrap([], []) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap([1], [1, 0])
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar_exact([True], [])


def test_pareto_front_keeps_only_undominated_points():
    pts = [(1.0, 0.5), (2.0, 0.7), (2.0, 0.6), (3.0, 0.7), (0.5, 0.2), (4.0, 0.9)]
    assert pareto_front(pts) == [4, 0, 1, 5]
    assert pareto_front([]) == []


# -- compare on the command line ----------------------------------------------------------------------------------

def test_compare_gives_exact_outcomes_mcnemar_and_an_interval_with_the_true_difference(endpoint, workflows,
                                                                                      capsys, tmp_path):
    srv = endpoint(scripted)
    db = tmp_path / "ws.db"
    code, out, err = cli(capsys, "compare", *workflows, "--benchmark", "gsm8k", "--split", "test", "--limit",
                         str(N), "--json", "--db", str(db), "--concurrency", "4")
    assert code == 0, err
    doc = json.loads(out)
    by_name = {w["name"]: w for w in doc["workflows"]}
    for who, name in (("A", "wf_a"), ("B", "wf_b")):
        outcomes = {r["id"]: r["correct"] for r in by_name[name]["results"]}
        assert outcomes == {p.id: i in SOLVED[who] for i, p in enumerate(PROBLEMS)}  # exact, per problem
        assert by_name[name]["score"] == pytest.approx(len(SOLVED[who]) / N)
        assert by_name[name]["calls"] == N and by_name[name]["tokens"] > 0
    assert doc["best"] == "wf_a"
    (test,) = doc["tests"]
    only_b = len(SOLVED["B"] - SOLVED["A"])
    only_a = len(SOLVED["A"] - SOLVED["B"])
    assert (test["mcnemar"]["only_a"], test["mcnemar"]["only_b"]) == (only_b, only_a)  # wf_b against the best
    assert test["mcnemar"]["p_value"] == pytest.approx(hand_mcnemar(only_a, only_b), rel=1e-12)
    true_diff = (len(SOLVED["B"]) - len(SOLVED["A"])) / N
    assert test["diff"] == pytest.approx(true_diff)
    assert test["ci"][0] <= true_diff <= test["ci"][1] and test["ci"][0] < test["ci"][1]
    assert len(srv.requests) == 2 * N  # one call per problem per workflow, nothing else
    # the split is said in the exported result
    assert doc["split"]["split"] == "test" and doc["split"]["test_n"] == 1055 and "seed 42" in doc["split"]["source"]
    # stored for the Compare page, and read back identically
    (stored,) = list_comparisons(__import__("flowcore.workspace.store").workspace.store.Workspace(db))
    loaded = load_comparison(__import__("flowcore.workspace.store").workspace.store.Workspace(db), stored.id).result
    assert [r["score"] for r in loaded.rows()] == [r["score"] for r in doc["table"]]
    assert loaded.tests[1].mcnemar.p_value == pytest.approx(test["mcnemar"]["p_value"])

    code, out, err = cli(capsys, "compare", *workflows, "--benchmark", "gsm8k", "--limit", str(N))
    assert code == 0, err
    assert "wf_a *" in out and "McNemar p" in out and f"{hand_mcnemar(only_a, only_b):.4g}" in out
    assert "1055 test" in out and "not the papers' files" in out


def test_compare_with_repeats_makes_r_times_n_calls_and_reports_sd(endpoint, workflows, capsys):
    srv = endpoint(scripted)
    code, out, err = cli(capsys, "compare", *workflows, "--benchmark", "gsm8k", "--limit", "4", "--repeats", "3",
                         "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(srv.requests) == 2 * 3 * 4
    for w in doc["workflows"]:
        assert w["repeats"] == 3 and len(w["scores"]) == 3 and w["sd"] == 0.0  # a deterministic server
        assert w["calls"] == 12 and w["cached_calls"] == 0


def test_repeats_bypass_the_cache_counted_at_the_server(endpoint, tmp_path):
    srv = endpoint(scripted)
    from flowcore.workspace.store import Workspace

    ws = Workspace(tmp_path / "cache.db")
    llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0), ws, run_id="t")
    w = parse(seed_variant("MARK-A"))
    probs = PROBLEMS[:5]
    once = asyncio.run(measure(w, "gsm8k", probs, llm=llm))
    assert len(srv.requests) == 5 and once.cached == 0
    again = asyncio.run(measure(w, "gsm8k", probs, llm=llm))  # one run: the cache answers
    assert len(srv.requests) == 5 and again.cached == 5 and again.paid == 0 and again.priced == once.priced
    rep = asyncio.run(measure(w, "gsm8k", probs, llm=llm, repeats=3))  # never from the cache
    assert len(srv.requests) == 5 + 3 * 5 and rep.cached == 0 and rep.calls == 15
    assert rep.pooled.score == pytest.approx(1.0) and rep.pooled.scores == [1.0, 1.0, 1.0]


def test_evaluate_repeats_on_the_command_line(endpoint, workflows, capsys):
    srv = endpoint(scripted)
    code, out, err = cli(capsys, "evaluate", workflows[1], "--benchmark", "gsm8k", "--split", "test", "--limit",
                         "6", "--repeats", "2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(srv.requests) == 12 and doc["repeats"] == 2 and doc["calls"] == 12
    assert doc["score"] == pytest.approx(len(SOLVED["B"] & set(range(6))) / 6)
    assert len(doc["results"]) == 12 and {r["repeat"] for r in doc["results"]} == {0, 1}
    assert doc["split"]["split"] == "test"
    code, out, err = cli(capsys, "evaluate", workflows[1], "--benchmark", "gsm8k", "--limit", "2", "--repeats", "2")
    assert code == 0 and "repeat 2: score" in out and "± 0.000" in out and "pooled 95% CI" in out
    code, _, err = cli(capsys, "evaluate", workflows[1], "--benchmark", "gsm8k", "--repeats", "0")
    assert code == 2 and "--repeats must be >= 1" in err


def test_a_split_file_chooses_the_problems(endpoint, workflows, capsys, tmp_path):
    srv = endpoint(scripted)
    ids = [p.id for p in load("gsm8k", "all")]
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"benchmark": "gsm8k", "validation": ids[:3], "test": ids[3:10]}))
    code, out, err = cli(capsys, "evaluate", workflows[0], "--benchmark", "gsm8k", "--split-file", str(split),
                         "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["id"] for r in doc["results"]] == ids[:3] and len(srv.requests) == 3
    assert doc["split"]["source"] == "split file split.json" and doc["split"]["validation_n"] == 3
    info = split_info("gsm8k", "test", split_file=split)
    assert info["test_n"] == 7
    for bad, msg in (({"validation": ["gsm8k/0"], "test": ["gsm8k/0"]}, "in both validation and test"),
                     ({"validation": ["nope"], "test": []}, "id 'nope' is not a gsm8k problem"),
                     ({"validation": "x", "test": []}, "field 'validation' must be a list"),
                     ({"benchmark": "math", "validation": [], "test": []}, "a split of 'math'")):
        split.write_text(json.dumps(bad))
        code, _, err = cli(capsys, "evaluate", workflows[0], "--benchmark", "gsm8k", "--split-file", str(split))
        assert code == 2 and msg in err and "split.json" in err, err
    split.write_text("{not json")
    code, _, err = cli(capsys, "compare", *workflows, "--benchmark", "gsm8k", "--split-file", str(split))
    assert code == 2 and "line 1, column 2: invalid JSON" in err
    code, _, err = cli(capsys, "split", "--benchmark", "math", "-o", str(tmp_path / "m.json"))
    doc = json.loads((tmp_path / "m.json").read_text())
    assert code == 0 and len(doc["validation"]) == 121 and len(doc["test"]) == 484


def test_compare_bad_inputs_are_named(endpoint, workflows, capsys, tmp_path):
    srv = endpoint(scripted)
    code, _, err = cli(capsys, "compare", workflows[0], "--benchmark", "gsm8k")
    assert code == 2 and "at least two workflows" in err
    code, _, err = cli(capsys, "compare", workflows[0], "baseline:nope", "--benchmark", "gsm8k")
    assert code == 2 and "no such math baseline" in err and "cot_sc" in err
    code, _, err = cli(capsys, "compare", workflows[0], str(tmp_path / "missing.mmd"), "--benchmark", "gsm8k")
    assert code == 2 and "missing.mmd" in err
    bad = tmp_path / "bad.mmd"
    bad.write_text("flowchart TD\n    PROBLEM([Problem])\n    C1[Custom]\n    PROBLEM --> C1\n")
    code, _, err = cli(capsys, "compare", workflows[0], str(bad), "--benchmark", "gsm8k")
    assert code == 1 and "bad.mmd:" in err and "M004" in err
    code, _, err = cli(capsys, "compare", workflows[0], str(ROOT / "assets" / "examples" / "code_seed.mmd"),
                       "--benchmark", "gsm8k")
    assert code == 1 and "M011" in err and "code_seed.mmd" in err  # a code operator on a math benchmark
    code, _, err = cli(capsys, "compare", *workflows, "--benchmark", "gsm8k", "--max-error-rate", "2")
    assert code == 2 and "--max-error-rate" in err
    assert srv.requests == []


def test_a_workflow_whose_calls_fail_is_not_counted_as_wrong_and_fails_the_command(endpoint, workflows, capsys):
    def respond(request: dict):
        return Fault(status=500, body="down") if "MARK-B" in message_text(request) else scripted(request)

    endpoint(respond)
    code, out, err = cli(capsys, "compare", *workflows, "--benchmark", "gsm8k", "--limit", "5", "--json")
    assert code == 1 and "wf_b: 5 runs errored (100%" in err and "not wrong answers" in err
    doc = json.loads(out)
    (test,) = doc["tests"]
    assert test["n"] == 0 and test["excluded"] == 5  # no paired win or loss from an outage
    b = next(w for w in doc["workflows"] if w["name"] == "wf_b")
    assert b["errors"] == 5 and b["n"] == 0 and b["error_rate"] == 1.0  # left out of the score, not wrong


def test_a_workflow_the_endpoint_failed_has_no_score_and_is_neither_best_nor_on_the_pareto_front(
        endpoint, workflows, capsys):
    """Every run of wf_a errored: it was listed with score 0.0 at $0 per problem, so always on the Pareto front,
    and the best whenever the other workflow solved nothing; its 'difference' from the best read +0.0 [+0.0, +0.0]."""
    def respond(request: dict):
        return Fault(status=500, body="down") if "MARK-A" in message_text(request) else "the answer is -12345"

    endpoint(respond)
    code, out, err = cli(capsys, "compare", *workflows, "--benchmark", "gsm8k", "--limit", "3", "--json")
    doc = json.loads(out)
    rows = {r["workflow"]: r for r in doc["table"]}
    assert code == 1 and doc["best"] == "wf_b" and doc["pareto"] == ["wf_b"]
    assert rows["wf_a"]["score"] is None and rows["wf_a"]["ci_low"] is None and not rows["wf_a"]["pareto"]
    assert rows["wf_a"]["diff_vs_best"] is None and rows["wf_a"]["mcnemar_p"] is None
    code, out, err = cli(capsys, "compare", *workflows, "--benchmark", "gsm8k", "--limit", "3")
    line = next(ln for ln in out.splitlines() if ln.startswith("wf_a"))
    assert "no problem scored" in line and "*" not in line and "+0.0" not in line
    assert "3 problems × 1 repeat(s)" in out
    comparison = Comparison.from_json(doc)
    assert list(table_frame(comparison)["score %"].isna()) == [True, False]
    names = [n for la in layers(pareto_figure(comparison)) if la.mark["type"] == "text" for n in la.data["workflow"]]
    assert names == ["wf_b"]


# -- baselines ---------------------------------------------------------------------------------------------------------

def test_every_baseline_passes_our_checker_and_mermaid_11(capsys):
    names = [n for n, _, _ in baselines()]
    kinds = ("io", "cot", "cot_sc", "self_refine", "multipersona", "medprompt")
    text_kinds = ("io", "cot", "cot_sc", "self_refine")  # a task of your own: the four text baselines
    assert names == [f"code_{k}" for k in kinds] + [f"math_{k}" for k in kinds] + [f"text_{k}" for k in text_kinds]
    for name, task, _ in baselines():
        code, out, err = cli(capsys, "check", str(ROOT / "assets" / "baselines" / f"{name}.mmd"), "--task", task,
                             "--hard", "--json")
        assert code == 0 and json.loads(out) == {"valid": True, "diagnostics": []}, (name, out, err)
    cot_sc = parse(next(t for n, _, t in baselines("math") if n == "math_cot_sc"))
    assert sum(n.op == "CustomOp" for n in cot_sc.nodes.values()) == 5
    assert any(n.op == "ScEnsembleOp" for n in cot_sc.nodes.values())


def test_math_baselines_run_and_score_through_compare(endpoint, capsys):
    p = PROBLEMS[0]

    def respond(request: dict) -> str:
        text = message_text(request)
        if "Answer: X" in text:  # ScEnsemble's question
            return "They agree. Answer: A"
        return f"Working it out, the final answer is \\boxed{{{p.reference}}}. Verdict: correct"

    srv = endpoint(respond)
    code, out, err = cli(capsys, "compare", *(f"baseline:{k}" for k in ("io", "cot", "cot_sc", "self_refine",
                                                                        "multipersona", "medprompt")),
                         "--benchmark", "gsm8k", "--limit", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    calls = {w["name"]: w["calls"] for w in doc["workflows"]}
    assert all(w["score"] == 1.0 and w["errors"] == 0 for w in doc["workflows"]), doc["table"]
    # CoT-SC: five samples (identical here, so ScEnsemble needs no call); Self-Refine: generate, review, revise
    assert calls == {"baseline:io": 1, "baseline:cot": 1, "baseline:cot_sc": 5, "baseline:self_refine": 3,
                     "baseline:multipersona": 6, "baseline:medprompt": 5}
    assert len(srv.requests) == sum(calls.values())
    # equal scores: the cheapest is the best, and only it is on the Pareto front
    assert doc["best"] == "baseline:io" and doc["pareto"] == ["baseline:io"]


def test_comparison_rows_and_agreement_from_json_roundtrip():
    doc = {"benchmark": "gsm8k", "split": {"split": "test"}, "repeats": 1, "workflows": [
        {"name": n, "score": s, "ci": [0, 1], "n": 3, "scores": [s], "cost_priced": c, "calls": 3,
         "rates": dict(zip("xyz", r)),
         "results": [{"id": i, "correct": bool(v), "prediction": "", "extracted": None, "cost": 0.0,
                      "latency": 0.0, "error": None, "repeat": 0} for i, v in zip("xyz", r)]}
        for n, s, c, r in (("a", 2 / 3, 0.3, (1, 1, 0)), ("b", 1 / 3, 0.03, (0, 1, 0)))]}
    c = Comparison.from_json(doc)
    rows = c.rows()
    assert [r["best"] for r in rows] == [True, False] and [r["pareto"] for r in rows] == [True, True]
    assert rows[1]["diff_vs_best"] == pytest.approx(-1 / 3)
    assert [(a["problem"], a["agree"]) for a in c.agreement()] == [("x", False), ("y", True), ("z", True)]
    assert re.fullmatch(r"\d\.\d+", f"{rows[1]['mcnemar_p']:.3f}")


def test_pooled_repeats_leave_endpoint_failures_out_of_the_score():
    from flowcore.evaluation.compare import pool_reports
    from flowcore.tasks import EvalReport, ProblemResult

    def res(pid, ok, errored=False):
        return ProblemResult(pid, ok, "", None, 0.0, 0.0, "LLMError: down" if errored else None, errored)

    r1 = EvalReport("gsm8k", 2, 0.5, 0, 1, 0.0, [res("x", True), res("y", False)])
    r2 = EvalReport("gsm8k", 1, 1.0, 1, 1, 0.0, [res("x", False, errored=True), res("y", True)], errors=1)
    p = pool_reports([r1, r2])
    assert p.rates == {"x": 1.0, "y": 0.5} and p.score == pytest.approx(0.75) and p.n == 2
    assert p.errors == 1 and p.error_rate == pytest.approx(0.25) and p.scores == [0.5, 1.0]
    assert p.mean == pytest.approx(0.75) and p.sd == pytest.approx(0.3535533905932738)
    assert p.ci_low <= p.score <= p.ci_high


def test_the_split_note_is_plain_words_without_module_names():
    from flowcore.tasks import split_info
    from flowcore.ui.compare import split_caption

    text = split_caption(split_info("gsm8k", "test"))
    assert "flowcore" not in text and "split_ids" not in text and "one problem in five for validation" in text


def test_the_priced_cost_counts_the_attempts_that_were_paid_for_and_unusable(endpoint, tmp_path):
    """'Cost per problem' prices every call an uncached run makes; a reply body cut off on its way is charged (an
    estimate of what came) and asked again, but the priced figure left those attempts out: it read less than
    what the same measurement paid, with no cache hit to explain it."""
    import threading

    from flowcore.workspace.store import Workspace

    seen, lock = set(), threading.Lock()

    def cut_first(request: dict):  # noqa: ANN202 - a reply or a Fault
        key = message_text(request)
        with lock:
            first = key not in seen
            seen.add(key)
        reply = scripted(request)
        return Fault(body=reply, cut=True) if first else reply

    srv = endpoint(cut_first)
    llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=1), Workspace(tmp_path / "w.db"),
              run_id="t")
    got = asyncio.run(measure(parse(seed_variant("MARK-A")), "gsm8k", PROBLEMS[:4], llm=llm))
    assert len(srv.requests) == 8 and got.cached == 0 and got.calls == 4  # each problem: a cut body, then a whole one
    assert got.paid > 0 and got.priced == pytest.approx(got.paid)
