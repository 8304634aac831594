"""Judges: the rule judge is a deterministic function of the graphs; the LLM judge parses the judge model's
JSON (through the real client against a fake endpoint) and falls back to the rules on a bad reply."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from flowcore import parse
from flowcore.evolution import ops
from flowcore.evolution.judge import CRITERIA, Candidate, LLMJudge, RuleJudge, parse_scores
from flowcore.llm.client import LLM, LLMSettings
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault

EXAMPLES = Path(__file__).resolve().parents[2] / "assets" / "examples"
SEED = parse((EXAMPLES / "math_seed.mmd").read_text())
CASE = parse((EXAMPLES / "math_case_study.mmd").read_text())


def _cands() -> list[Candidate]:
    out = []
    for op, seed in (("insert", 1), ("subgraph", 2), ("prompt", 3)):
        child = ops.apply(op, [SEED], "math", random.Random(seed))
        assert isinstance(child, ops.Child)
        out.append(Candidate(child.workflow, op, child.detail, [0]))
    return out


def test_rule_judge_is_deterministic_and_picks_the_best_total():
    cands = _cands()
    a = RuleJudge("math").score(cands, SEED, history=[SEED], operator_record={"insert": [0.1]})
    b = RuleJudge("math").score(cands, SEED, history=[SEED], operator_record={"insert": [0.1]})
    assert a.scores == b.scores and a.chosen == b.chosen and a.judge == "rule"
    for s in a.scores:
        assert set(s) == {*CRITERIA, "total"} and all(0 <= s[k] <= 10 for k in CRITERIA)
        assert s["total"] == pytest.approx(sum(s[k] for k in CRITERIA))
    assert a.chosen == max(range(3), key=lambda i: (a.scores[i]["total"], -i))


def test_rule_judge_criteria_respond_to_the_graph():
    j = RuleJudge("math")
    same = Candidate(SEED, "prompt", "nothing", [0])
    assert j.score([same], SEED).scores[0]["innovation"] == 0.0  # identical to its parent
    # prompt quality: a Custom whose prompt is not defined scores lower than one with a specific prompt
    undefined = parse((EXAMPLES / "math_seed.mmd").read_text().replace("@prompt solver", "@prompt other"))
    assert j.prompt_quality(undefined) < j.prompt_quality(SEED)
    assert j.coherence(undefined) < j.coherence(SEED)  # M013 warning
    # complexity: the 1-node seed is below the band, the 8-node case study inside it
    assert j.complexity(SEED) < j.complexity(CASE) == 10.0
    # rationale: the operator's record in this run
    assert j.rationale("insert", {"insert": [0.2, 0.1]}) == 10.0
    assert j.rationale("delete", {"delete": [-0.2]}) == 0.0 and j.rationale("x", {}) == 5.0


def _llm(server: FakeLLMServer, tmp_path) -> LLM:
    settings = LLMSettings(base_url=server.base_url, api_key="sk-test", max_retries=0, cache=False)
    return LLM(settings, Workspace(tmp_path / "j.db"))


def _reply(n: int, best: int) -> str:
    return json.dumps({"scores": [{"candidate": i, "coherence": 7, "innovation": 9 if i == best else 4,
                                   "complexity_balance": 6, "prompt_quality": 8, "rationale": 5}
                                  for i in range(n)]})


def test_llm_judge_uses_the_models_scores(tmp_path):
    cands = _cands()
    with FakeLLMServer(_reply(3, best=2)) as srv:
        v = asyncio.run(LLMJudge(_llm(srv, tmp_path), "math").ascore(cands, SEED, parent_score=0.5))
        req = srv.requests[0]
    assert v.judge == "llm" and v.chosen == 2
    assert v.scores[2] == {"coherence": 7, "innovation": 9, "complexity_balance": 6, "prompt_quality": 8,
                           "rationale": 5, "total": 35}
    assert req["response_format"] == {"type": "json_object"}
    text = "\n".join(m["content"] for m in req["messages"])
    assert "Candidate 2 (prompt" in text and "50.0%" in text and "```mermaid" in text


@pytest.mark.parametrize("reply, why", [
    ("I like candidate 1", "not JSON"),
    (_reply(2, best=0), "scored 2 candidates"),
    (json.dumps({"scores": [{"candidate": i, "coherence": 11, "innovation": 1, "complexity_balance": 1,
                             "prompt_quality": 1, "rationale": 1} for i in range(3)]}), "coherence"),
    (Fault(status=400, body="bad request"), "HTTP 400"),
])
def test_llm_judge_falls_back_to_rules_on_a_bad_reply(tmp_path, reply, why):
    cands = _cands()
    rule = RuleJudge("math").score(cands, SEED)
    with FakeLLMServer([reply]) as srv:
        v = asyncio.run(LLMJudge(_llm(srv, tmp_path), "math").ascore(cands, SEED))
    assert v.judge.startswith("rule (fallback:") and why in v.judge
    assert v.scores == rule.scores and v.chosen == rule.chosen


@pytest.mark.parametrize("reply, why", [(Fault(malformed=True), "malformed reply"), (Fault(status=503), "HTTP 503")])
def test_llm_judge_lets_an_endpoint_outage_through(tmp_path, reply, why):
    """A transient endpoint failure is not judged by the rules: the evolution loop retries the round after a
    back-off, so an outage does not change which candidate wins."""
    from flowcore.llm.client import LLMError

    with FakeLLMServer([reply]) as srv, pytest.raises(LLMError, match=why) as info:
        asyncio.run(LLMJudge(_llm(srv, tmp_path), "math").ascore(_cands(), SEED))
    assert info.value.transient


def test_parse_scores_accepts_order_or_indexes():
    body = {"scores": [{"candidate": 1, **dict.fromkeys(CRITERIA, 2)}, {"candidate": 0, **dict.fromkeys(CRITERIA, 3)}]}
    s = parse_scores("```json\n" + json.dumps(body) + "\n```", 2)
    assert s[0]["total"] == 15 and s[1]["total"] == 10
    with pytest.raises(ValueError, match="names candidate"):
        parse_scores(json.dumps({"scores": [{"candidate": 0, **dict.fromkeys(CRITERIA, 2)}] * 2}), 2)
