"""The search's yardstick on a task of your own (issue 31 after issue 26): the simulated executor answers the rows
of a generated text task (tests/helpers/simtask.py, 400 rows, metric exact) with the accuracy it is given, finds
each row by the problem text in the prompt, scatters its wrong answers so that no text metric takes them for the
reference, votes on "Answer:" lines, and the text baselines order on it as theory says; the scripted LLM optimizer
proposes valid text workflows."""

from __future__ import annotations

import asyncio

import pytest

from flowcore import check, parse
from flowcore.evaluation.compare import BASELINES_DIR
from flowcore.evaluation.evaluate import evaluate_workflow
from flowcore.evaluation.stats import paired_bootstrap
from flowcore.llm.client import LLM, LLMSettings
from flowcore.tasks import from_file, load
from flowcore.tasks.metrics import grade_text, make_metric
from flowcore.workspace.store import Workspace
from tests.helpers.simexecutor import SimulatedExecutor, scripted_optimizer, simulated_server
from tests.helpers.simtask import write_letters_task


@pytest.fixture(scope="module")
def letters(tmp_path_factory):
    return from_file(write_letters_task(tmp_path_factory.mktemp("letters")))


def _req(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


def _evaluate(srv, name: str, problems: list, tmp_path, tag: str = ""):
    text = (BASELINES_DIR / f"{name}.mmd").read_text(encoding="utf-8")
    llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0), Workspace(tmp_path / f"{name}{tag}.db"))
    return asyncio.run(evaluate_workflow(parse(text), "letters", problems, llm=llm))


def test_the_generated_task_is_a_task_of_your_own_with_a_real_test_split(letters):
    assert (letters.kind, letters.metric.name, letters.sizes()) == ("text", "exact",
                                                                    {"rows": 400, "validation": 80, "test": 320})
    questions = [p.question for p in letters.problems()]
    assert len(set(questions)) == 400 and not any(a != b and a in b for a in questions[:40] for b in questions)


def test_samples_are_right_with_p_and_wrong_ones_scatter_and_score_0_under_every_text_metric(letters):
    problems = load("letters", "test")
    target = problems[3]
    ask = ("Answer the task. Reply with only the answer, in the form the task asks for, and nothing else.\n\n"
           f"Problem:\n{target.question}")
    sim = SimulatedExecutor(problems, 0.6, seed=2)
    replies = [sim(_req(ask)) for _ in range(200)]
    assert sim.problem_of(ask).id == target.id and sim.unknown == 0
    metrics = {name: make_metric(name, {}, where="test") for name in ("exact", "contains", "f1")}
    graded = [grade_text(metrics["exact"], r, target.reference).score for r in replies]
    assert 0.6 - 0.11 < sum(graded) / 200 < 0.6 + 0.11  # 3 sd of 200 draws at p = 0.6
    wrong = [r for r, g in zip(replies, graded) if g == 0]
    assert len({r.rsplit("Answer: ", 1)[1] for r in wrong}) >= 0.8 * len(wrong)  # wrong answers rarely agree
    for m in metrics.values():
        assert all(grade_text(m, r, target.reference).score == 0 for r in wrong), m.name


def test_the_ensembler_votes_on_answer_lines_whatever_their_order(letters):
    problems = load("letters", "test", limit=5)
    sim = SimulatedExecutor(problems, 0.7, seed=0)
    ref = problems[0].reference
    sols = ["Answer: Kalomi", f"Answer: {ref}", f"so it is\nAnswer: {ref.upper()}", "Answer: Zidorfa"]
    for order in (sols, sols[::-1]):
        listing = "".join(f"Solution {chr(65 + i)}:\n{s}\n\n" for i, s in enumerate(order))
        reply = sim(_req("Several candidate solutions to the same problem follow, each labelled with a letter."
                         f"\n\nProblem:\n{problems[0].question}\n\n{listing}Think briefly, then finish with one "
                         "line 'Answer: X' where X is the letter"))
        letter = reply.rsplit("Answer: ", 1)[1].strip()
        assert ref.casefold() in order[ord(letter) - 65].casefold()


@pytest.mark.parametrize("p", [0.4, 0.8])
def test_io_scores_the_configured_accuracy_on_the_tasks_test_split(letters, tmp_path, p):
    problems = load("letters", "test")
    with simulated_server(problems, p, seed=5) as srv:
        rep = _evaluate(srv, "text_io", problems, tmp_path)
        assert srv.sim.unknown == 0
    assert rep.n == 320 and rep.errors == 0
    assert abs(rep.score - p) < 3 * (p * (1 - p) / 320) ** 0.5, (rep.score, p)


@pytest.mark.slow
def test_the_text_baselines_order_as_theory_says_on_the_task(letters, tmp_path):
    """IO < Self-Refine < CoT-SC on all 400 rows at p = 0.75 (as the GSM8K yardstick test), each gap beyond the
    paired 95% interval and each score within sampling error of its closed form."""
    problems = load("letters", "all")
    with simulated_server(problems, 0.75, seed=11) as srv:
        reports = {n: _evaluate(srv, n, problems, tmp_path) for n in ("text_io", "text_self_refine", "text_cot_sc")}
        sim = srv.sim
    assert sim.unknown == 0 and all(r.errors == 0 and r.n == 400 for r in reports.values())
    solved = {k: [float(x.correct) for x in r.results] for k, r in reports.items()}
    for lo, hi in (("text_io", "text_self_refine"), ("text_self_refine", "text_cot_sc")):
        diff, low, _ = paired_bootstrap(solved[hi], solved[lo])
        assert low > 0, f"{hi} - {lo} = {diff:.3f}, interval from {low:.3f}"
    for name, form in (("text_io", "io"), ("text_self_refine", "review_revise"), ("text_cot_sc", "vote")):
        expected, got = sim.expected(form), reports[name].score
        assert abs(got - expected) < 3 * (expected * (1 - expected) / 400) ** 0.5 + 0.01, (name, got, expected)


def test_the_scripted_optimizer_proposes_valid_text_workflows():
    fn = scripted_optimizer("text")
    io = (BASELINES_DIR / "text_io.mmd").read_text(encoding="utf-8")
    text = f"You are the workflow optimizer of MermaidFlow.\nParent 1 (validation score 60.0%):\n```mermaid\n{io}```"
    from flowcore.evolution.optimizer import extract_mermaid

    replies = [fn({}, text) for _ in range(3)]
    assert len(set(replies)) == 3
    for r in replies:
        assert not [d.code for d in check(extract_mermaid(r), "text", hard=True) if d.severity == "error"]
    first = parse(extract_mermaid(replies[0]))
    assert sum(1 for n in first.nodes.values() if n.op == "CustomOp") == 5  # the CoT-SC proposal
