"""The yardstick of the search (issue 31): a simulated executor on which the value of structure is known.

Checked here: it recognises problems and operators, draws each sample afresh yet deterministically, votes as a
capable model does, and the bundled structures order on it as theory says (IO < Self-Refine < CoT-SC, each
step beyond the paired 95% interval), so a search measured on it is measured against a known best."""

from __future__ import annotations

import asyncio
import json

import pytest

from flowcore import parse
from flowcore.evaluation.compare import BASELINES_DIR
from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.evaluation.stats import paired_bootstrap
from flowcore.llm.client import LLM, LLMSettings
from flowcore.tasks import load
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer
from tests.helpers.simexecutor import CANONICAL, SimulatedExecutor, simulated_server


def _req(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def _evaluate(srv: FakeLLMServer, name: str, bench: str, problems: list, tmp_path, tag: str = ""):
    """One baseline on the problems, in a workspace of its own (no cached call shared between structures)."""
    text = (BASELINES_DIR / f"{name}.mmd").read_text(encoding="utf-8")
    llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0), Workspace(tmp_path / f"{name}{tag}.db"))
    return asyncio.run(evaluate_workflow(parse(text), bench, problems, llm=llm))


def test_samples_are_fresh_per_repeat_yet_deterministic_and_wrong_answers_scatter():
    problems = load("gsm8k", "test", limit=3)
    ask = f"Solve it.\n\nProblem:\n{problems[0].question}"
    first = SimulatedExecutor(problems, 0.5, seed=7)
    replies = [first(_req(ask)) for _ in range(40)]
    again = SimulatedExecutor(problems, 0.5, seed=7)
    assert [again(_req(ask)) for _ in range(40)] == replies  # the k-th identical call gets the k-th draw
    right = [r for r in replies if f"\\boxed{{{problems[0].reference}}}" in r]
    assert 8 <= len(right) <= 32  # p = 0.5: about half
    wrong = {r for r in replies if r not in right}
    assert len(wrong) >= 0.7 * (len(replies) - len(right))  # wrong answers rarely agree
    other = SimulatedExecutor(problems, 0.5, seed=8)
    assert [other(_req(ask)) for _ in range(40)] != replies
    assert first.problem_of(ask).id == problems[0].id and first.problem_of("What is 2 + 2?") is None


def test_the_ensembler_votes_for_the_answer_most_solutions_share_whatever_their_order():
    problems = load("gsm8k", "test", limit=2)
    sim = SimulatedExecutor(problems, 0.7, seed=0)
    sols = ["\\boxed{5}", "\\boxed{7}", "\\boxed{7}", "\\boxed{9}"]
    for order in (sols, sols[::-1]):
        listing = "".join(f"Solution {chr(65 + i)}:\nwork {s}\n\n" for i, s in enumerate(order))
        reply = sim(_req("Several candidate solutions to the same problem follow, each labelled with a letter."
                         f"\n\nProblem:\n{problems[0].question}\n\n{listing}Think briefly, then finish with one "
                         "line 'Answer: X'"))
        letter = reply.rsplit("Answer: ", 1)[1].strip()
        assert order[ord(letter) - 65] == "\\boxed{7}"
    assert sim.calls["ensemble"] == 2


def test_code_samples_are_the_canonical_solution_or_broken_code_that_fails(tmp_path):
    problems = load("mbpp", "test", limit=5)
    sim = SimulatedExecutor(problems, 0.5, seed=3, overfit=1.0)
    target = next(p for p in sim.problems if p.examples)  # a public example it can parse
    ask = (f"Write it.\n\nProblem:\n{target.question}\n\nThe function must be named {target.entry_point}. "
           "Reply with the complete code, including the imports it needs, in one ```python block.")
    replies = [sim(_req(ask)) for _ in range(12)]
    canonical = [r for r in replies if target.canonical.strip() in r]
    broken = [r for r in replies if r not in canonical]
    assert canonical and broken and len(set(broken)) == len(broken)
    assert all("_SEEN" in b for b in broken)  # overfit=1: they return the public example's output
    # a reviewer reading the canonical solution finds CANONICAL among the candidates
    assert sim._candidates(canonical[0], sim.problem_of(ask)) == [CANONICAL]


@pytest.mark.slow
def test_structures_order_as_theory_says_beyond_the_interval(tmp_path):
    """IO < Self-Refine < CoT-SC at p = 0.75 on 400 GSM8K problems, each gap beyond the paired 95% interval, and
    every score within sampling error of its closed form (p, p² + 2p²(1 − p), the 5-vote plurality)."""
    problems = load("gsm8k", "test", limit=400)
    with simulated_server(problems, 0.75, seed=11) as srv:
        reports = {name: _evaluate(srv, name, "gsm8k", problems, tmp_path)
                   for name in ("math_io", "math_self_refine", "math_cot_sc")}
        sim = srv.sim
    assert sim.unknown == 0 and all(r.errors == 0 and r.n == 400 for r in reports.values())
    solved = {k: [float(x.correct) for x in r.results] for k, r in reports.items()}
    for lo, hi in (("math_io", "math_self_refine"), ("math_self_refine", "math_cot_sc")):
        diff, low, _ = paired_bootstrap(solved[hi], solved[lo])
        assert low > 0, f"{hi} - {lo} = {diff:.3f}, interval from {low:.3f}"
    for name, form in (("math_io", "io"), ("math_self_refine", "review_revise"), ("math_cot_sc", "vote")):
        expected, got = sim.expected(form), reports[name].score
        assert abs(got - expected) < 3 * (expected * (1 - expected) / 400) ** 0.5 + 0.01, (name, got, expected)
    assert json.dumps(dict(sim.calls))  # counted per kind
    assert sim.calls["review"] == sim.calls["revise"] == 400


def test_test_and_retry_help_on_code(tmp_path):
    """A sample passes its tests with probability p; a Test's fix requests are new samples, so the seed with a
    Test scores above IO on the same problems."""
    problems = load("mbpp", "test", limit=40)
    with simulated_server(problems, 0.5, seed=5) as srv:
        io = _evaluate(srv, "code_io", "mbpp", problems, tmp_path)
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0), Workspace(tmp_path / "t.db"))
        tested = parse((BASELINES_DIR / "code_io.mmd").read_text().replace("G1 --> RETURN", "G1 -->|solution| T1\n"
                       "    PROBLEM -->|problem| T1\n    ENTRY_POINT -->|entry_point| T1\n    T1 --> RETURN\n"
                       "    T1[\"Test\"]"))
        rep = asyncio.run(evaluate_workflow(tested, "mbpp", problems, llm=llm))
        fixes = srv.sim.calls["test_fix"]
    assert io.errors == 0 and rep.errors == 0 and fixes > 0
    assert rep.score >= io.score + 0.2, (rep.score, io.score)
