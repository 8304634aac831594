"""The optimizer (repair loop with the checker's diagnostics) and the evolution loop: LLM rounds against a fake
OpenAI-compatible endpoint, failing rounds, offline structure-only runs, review hook, cancel/resume, budget,
and a SIGKILL in the middle of a command-line run that is then resumed."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from flowcore import check, parse, to_mermaid
from flowcore.cli.main import main
from flowcore.evolution import ops
from flowcore.evolution.loop import Evolution, EvolutionConfig, Review
from flowcore.evolution.optimizer import Optimizer, extract_mermaid, guidance
from flowcore.llm.client import LLM, LLMSettings
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

ROOT = Path(__file__).resolve().parents[2]
SEED_TEXT = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text()
SEED = parse(SEED_TEXT)
DATA = [("What is 40 + 2?", "42"), ("What is 6 * 7?", "42"), ("What is 10 - 3?", "7"), ("What is 2 + 2?", "4")]


@pytest.fixture
def data(tmp_path) -> Path:
    p = tmp_path / "gsm8k_small.jsonl"
    p.write_text("".join(json.dumps({"question": q, "answer": f"... #### {a}"}) + "\n" for q, a in DATA))
    return p


def _variants() -> list[str]:
    rng, out = random.Random(0), []
    while len(out) < 12:
        res = ops.apply(rng.choice(["insert", "subgraph", "prompt", "substitute"]), [SEED], "math", rng)
        if isinstance(res, ops.Child) and res.text not in out:
            out.append(res.text)
    return out


def responder():
    """Optimizer: a different valid workflow per call; judge: JSON for the candidates shown; executor: 42."""
    variants, count, lock = _variants(), [0], threading.Lock()

    def respond(req: dict) -> str:
        text = message_text(req)
        if "workflow optimizer of MermaidFlow" in text:
            with lock:
                count[0] += 1
                v = variants[count[0] % len(variants)]
            return f"I add structure to check the answer.\n```mermaid\n{v}```"
        if "judge of MermaidFlow" in text:
            n = len(re.findall(r"^Candidate \d+ \(", text, re.MULTILINE))
            return json.dumps({"scores": [{"candidate": i, "coherence": 8, "innovation": 4 + i, "complexity_balance": 7,
                                           "prompt_quality": 6, "rationale": 5} for i in range(n)]})
        return "Let me think. The answer is 42."

    return respond


def _env(monkeypatch, server: FakeLLMServer | None, **extra: str) -> None:
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MERMAIDFLOW_BUDGET_USD"):
        monkeypatch.delenv(k, raising=False)
    if server is not None:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-123")
    for k, v in extra.items():
        monkeypatch.setenv(k, v)


# -------------------------------------------------------------------------------------------------- optimizer

def _llm(server: FakeLLMServer, tmp_path: Path) -> LLM:
    return LLM(LLMSettings(base_url=server.base_url, api_key="sk-x", max_retries=0, cache=False),
               Workspace(tmp_path / "o.db"))


BROKEN = SEED_TEXT.replace("C1 --> RETURN", "C1 -->|banana| RETURN")


def test_optimizer_sends_diagnostics_back_and_accepts_the_repair(tmp_path):
    good = _variants()[0]
    script = [f"Try this.\n```mermaid\n{BROKEN}```", f"Fixed.\n```mermaid\n{good}```"]
    with FakeLLMServer(script) as srv:
        p = asyncio.run(Optimizer(_llm(srv, tmp_path), "math").propose([(SEED, 0.5)], failures=[
            {"question": "What is 6 * 7?", "prediction": "41"}]))
        first, second = srv.requests[0], srv.requests[1]
    assert p.workflow is not None and p.attempts == 2 and p.reason is None
    assert to_mermaid(p.workflow) == to_mermaid(parse(good)) and p.rationale == "Try this."
    first_text = message_text(first)
    assert "Parent 1 (validation score 50.0%)" in first_text and "Wrong answer given: 41" in first_text
    repair = second["messages"][-1]["content"]
    assert "M007" in repair and "banana" in repair  # the checker's exact diagnostic went back
    assert second["messages"][-2] == {"role": "assistant", "content": script[0]}


def test_optimizer_drops_a_proposal_still_invalid_after_three_repairs(tmp_path):
    with FakeLLMServer([f"```mermaid\n{BROKEN}```"]) as srv:
        p = asyncio.run(Optimizer(_llm(srv, tmp_path), "math").propose([(SEED, None)]))
        n = len(srv.requests)
    assert p.workflow is None and p.attempts == 4 and n == 4
    assert "still invalid after 3 repair(s)" in p.reason and "M007" in p.reason
    with FakeLLMServer(["I would add a reviewer."]) as srv:
        p = asyncio.run(Optimizer(_llm(srv, tmp_path), "math", max_repairs=1).propose([(SEED, None)]))
        assert "no ```mermaid block" in srv.requests[1]["messages"][-1]["content"]
    assert p.workflow is None and p.attempts == 2


def test_extract_mermaid_and_guidance():
    assert extract_mermaid("x\n```mermaid\nflowchart TD\n A-->B\n```\n") == "flowchart TD\n A-->B\n"
    assert extract_mermaid("```\ngraph LR\n A-->B\n```") == "graph LR\n A-->B\n"
    assert extract_mermaid("Here:\nflowchart TD\n A-->B") == "flowchart TD\n A-->B\n"
    assert extract_mermaid("no diagram") is None
    g = guidance("code")
    assert "- TestOp (Test): solution*: Code" in g and "entry_point: EntryPoint (required)" in g
    assert "- ProgrammerOp" not in g and "Not allowed in code workflows: ProgrammerOp, FormatOp" in g
    assert "- ProgrammerOp (Programmer): problem*: Problem, analysis: Text -> Text" in guidance("math")


# ------------------------------------------------------------------------------------------------------ loop

def _rows(ws: Workspace, run: int) -> list[dict]:
    return [dict(r) for r in ws.query("SELECT * FROM evo_rounds WHERE run_id = ? ORDER BY round", (run,))]


def test_five_llm_rounds_are_stored(tmp_path, monkeypatch, data):
    with FakeLLMServer(responder()) as srv:
        _env(monkeypatch, srv)
        ws = Workspace(tmp_path / "w.db")
        seen: list[dict] = []
        evo = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=5, data_path=str(data), remeasure=0),
                        progress=seen.append)
        result = evo.run()
        roles = {json.dumps(r.get("response_format")) for r in srv.requests}
    assert result["status"] == "finished" and evo.config.mode == "llm" and not evo.config.offline
    rows = _rows(ws, result["run_id"])
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4, 5] and [s["round"] for s in seen] == [0, 1, 2, 3, 4, 5]
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    assert rows[0]["score"] == 0.5 and rows[0]["operator"] == "seed"  # two of four answers are 42
    for r in rows[1:]:
        assert r["operator"] == "optimizer" and r["judge"] == "llm" and r["cost"] > 0
        assert 0 <= r["score"] <= 1 and r["ci_low"] <= r["score"] <= r["ci_high"]
        parents = json.loads(r["parents_json"])
        assert parents and all(p < r["round"] for p in parents)
        cands = json.loads(r["candidates_json"])
        assert any("scores" in c and c["scores"]["total"] > 0 for c in cands)
        sampling = json.loads(r["sampling_json"])
        assert sum(sampling["probabilities"]) == pytest.approx(1.0) and 0 in sampling["pool"]
        per = json.loads(r["per_problem_json"])
        assert len(per) == 4 and {"id", "correct", "prediction"} <= set(per[0])
        assert not [d for d in check(r["workflow_text"], "math") if d.severity == "error"]
    assert '{"type": "json_object"}' in roles  # the judge asked for JSON
    run = ws.query("SELECT status, offline FROM evo_runs WHERE id = ?", (result["run_id"],))[0]
    assert (run["status"], run["offline"]) == ("finished", 0)
    # the API key never reaches the database
    dump = "\n".join(ws.conn.iterdump())
    assert "sk-test-key-123" not in dump


def test_rounds_failed_by_the_endpoint_are_retried_not_stored_as_failures(tmp_path, monkeypatch, data):
    with FakeLLMServer(responder(), fail_rate=0.3, seed=1) as srv:
        _env(monkeypatch, srv, MERMAIDFLOW_MAX_RETRIES="0")
        ws = Workspace(tmp_path / "w.db")
        evo = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=3, data_path=str(data)))
        evo.outage_waits = (0.01,) * 40
        result = evo.run()
        failed_calls = sum(1 for r in ws.query("SELECT error FROM llm_calls") if r["error"])
    rows = _rows(ws, result["run_id"])
    assert failed_calls > 0, "with 30 % of calls failing some call must fail"
    assert result["status"] == "finished" and [r["round"] for r in rows] == [0, 1, 2, 3]
    assert all(r["status"] == "ok" and r["score"] is not None for r in rows), [r["reason"] for r in rows]


def test_an_endpoint_that_stays_away_stops_the_run_resumably(tmp_path, monkeypatch, data):
    with FakeLLMServer(responder()) as srv:
        _env(monkeypatch, srv, MERMAIDFLOW_MAX_RETRIES="0")
        ws = Workspace(tmp_path / "w.db")
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=2, data_path=str(data))
        evo = Evolution(ws, cfg, progress=lambda s: srv.stop())  # the server vanishes after the seed round
        evo.outage_waits = (0.01, 0.02)
        result = evo.run()
        assert result["status"] == "stopped" and "kept failing round 1" in result["reason"]
        assert [r["round"] for r in _rows(ws, result["run_id"])] == [0]  # the failed round was not stored
        assert Evolution(ws, cfg).find_resumable() == result["run_id"]
        srv.start()  # back on the same port
        again = Evolution(ws, cfg).run()
    assert again["run_id"] == result["run_id"] and again["status"] == "finished"
    assert [r["status"] for r in _rows(ws, result["run_id"])] == ["ok", "ok", "ok"]


def test_a_run_whose_seed_failed_is_not_finished(tmp_path, monkeypatch, data):
    with FakeLLMServer(Fault(status=400, body="model not loaded")) as srv:  # refused, not transient
        _env(monkeypatch, srv)
        ws = Workspace(tmp_path / "w.db")
        result = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=2, data_path=str(data))).run()
    assert result["status"] == "stopped" and "seed round failed" in result["reason"]
    assert "HTTP 400: model not loaded" in result["reason"] and _rows(ws, result["run_id"]) == []


def test_invalid_proposals_are_recorded_and_the_round_falls_back_to_the_operators(tmp_path, monkeypatch, data):
    def respond(req: dict) -> str:
        text = message_text(req)
        if "workflow optimizer of MermaidFlow" in text:
            return f"```mermaid\n{BROKEN}```"
        return "The answer is 42."

    with FakeLLMServer(respond) as srv:
        _env(monkeypatch, srv)
        ws = Workspace(tmp_path / "w.db")
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=1, candidates=2, data_path=str(data))
        result = Evolution(ws, cfg).run()
    r1 = _rows(ws, result["run_id"])[1]
    cands = json.loads(r1["candidates_json"])
    dropped = [c for c in cands if c.get("reason")]
    assert r1["status"] == "ok" and r1["operator"] in ops.OPERATORS  # the graph operators stepped in
    assert len(dropped) == 2 and all("M007" in c["reason"] and c["attempts"] == 4 for c in dropped)
    assert dropped[0]["diagnostics"][0]["code"] in ("M007", "M009")


def test_programmatic_mode_online_lets_the_optimizer_rewrite_prompts(tmp_path, monkeypatch, data):
    new = "Solve carefully, checking each step twice, and end with \\boxed{answer}."

    def respond(req: dict) -> str:
        return new if "You improve one instruction" in message_text(req) else "The answer is 42."

    with FakeLLMServer(respond) as srv:
        _env(monkeypatch, srv)
        ws = Workspace(tmp_path / "w.db")
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=1, candidates=1, data_path=str(data), mode="programmatic",
                              operators=["prompt"])
        result = Evolution(ws, cfg).run()
        asked = [r for r in srv.requests if "You improve one instruction" in message_text(r)]
    r1 = _rows(ws, result["run_id"])[1]
    assert asked and "Node C1 (CustomOp)" in message_text(asked[0])
    assert r1["status"] == "ok" and r1["judge"] == "rule" and "rewritten by the optimizer" in r1["detail"]
    assert json.loads(r1["prompts_json"]) == {"solver": new}


def test_offline_run_is_structure_only(tmp_path, monkeypatch):
    _env(monkeypatch, None)
    ws = Workspace(tmp_path / "w.db")
    evo = Evolution(ws, EvolutionConfig(benchmark="math", rounds=4, seed=3))
    result = evo.run()
    rows = _rows(ws, result["run_id"])
    assert evo.config.offline and evo.config.mode == "programmatic"
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4]
    assert all(r["status"] == "structure-only" and r["score"] is None and r["ci_low"] is None for r in rows)
    assert all(r["operator"] in ops.OPERATORS and r["judge"] == "rule" for r in rows[1:])
    assert len({r["workflow_text"] for r in rows}) == 5  # every round a new workflow
    assert ws.query("SELECT offline FROM evo_runs")[0]["offline"] == 1


def _fake_evaluator(calls: list):
    """Zero-latency evaluation: a deterministic score from the graph (more nodes, better, up to 6)."""
    async def evaluate(w, problems):
        calls.append(w)
        k = min(6, sum(1 for n in w.nodes.values() if not n.is_interface))
        results = [SimpleNamespace(id=p.id, correct=i < k * len(problems) // 6, prediction="x", extracted=None,
                                   cost=0.001, latency=0.0, error=None) for i, p in enumerate(problems)]
        score = sum(r.correct for r in results) / len(results)
        return SimpleNamespace(score=score, ci_low=score, ci_high=score, n=len(results), cost=0.004,
                               results=results, cancelled=False)
    return evaluate


def test_programmatic_mode_with_an_injected_evaluator_scores_rounds(tmp_path, monkeypatch, data):
    _env(monkeypatch, None)
    calls: list = []
    ws = Workspace(tmp_path / "w.db")
    cfg = EvolutionConfig(benchmark="gsm8k", rounds=4, data_path=str(data), mode="programmatic", remeasure=0)
    result = Evolution(ws, cfg, evaluator=_fake_evaluator(calls)).run()
    rows = _rows(ws, result["run_id"])
    assert len(calls) == 5 and all(r["status"] == "ok" and r["score"] is not None for r in rows)
    assert all(r["cost"] == pytest.approx(0.004) for r in rows)


def test_review_hook_can_choose_edit_and_veto(tmp_path, monkeypatch):
    _env(monkeypatch, None)
    edited = to_mermaid(parse(_variants()[1]))

    seen = {}

    def review(rnd, cands, verdict, dropped):
        assert cands and len(verdict.scores) == len(cands)
        assert len(cands) + len(dropped) == 4 and all(d["reason"] for d in dropped)  # all K, the rest with why
        seen[rnd] = len(cands)
        return {1: Review("edit", text=edited), 2: Review("veto", reason="too big"),
                3: Review("choose", index=len(cands) - 1)}.get(rnd)

    ws = Workspace(tmp_path / "w.db")
    result = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=3), review=review).run()
    rows = _rows(ws, result["run_id"])
    assert rows[1]["workflow_text"] == edited and "edited by the reviewer" in rows[1]["detail"]
    assert rows[2]["status"] == "failed" and "vetoed by you: too big" in rows[2]["reason"]
    assert rows[3]["status"] == "structure-only" and rows[3]["chosen"] == seen[3] - 1
    assert len(json.loads(rows[3]["candidates_json"])) == 4
    assert result["status"] == "finished"


def test_cancel_then_resume_gives_the_same_rounds_as_an_uninterrupted_run(tmp_path, monkeypatch):
    _env(monkeypatch, None)
    cfg = EvolutionConfig(benchmark="math", rounds=5, seed=11)
    straight = Evolution(Workspace(tmp_path / "a.db"), cfg).run()
    ws_a = Workspace(tmp_path / "a.db")

    ws = Workspace(tmp_path / "b.db")
    cancel = threading.Event()
    evo = Evolution(ws, cfg, cancel=cancel, progress=lambda rec: rec["round"] == 2 and cancel.set())
    first = evo.run()
    assert first["status"] == "cancelled" and [r["round"] for r in _rows(ws, first["run_id"])] == [0, 1, 2]
    before = _rows(ws, first["run_id"])
    again = Evolution(ws, cfg)  # same config: finds the unfinished run
    assert again.find_resumable() == first["run_id"]
    done = again.run()
    rows = _rows(ws, done["run_id"])
    assert done["status"] == "finished" and done["run_id"] == first["run_id"]
    assert rows[:3] == before and [r["round"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert [r["workflow_text"] for r in rows] == [r["workflow_text"] for r in _rows(ws_a, straight["run_id"])]
    # finished: nothing to resume (the `evolve` command then says the run is finished, test_evolve_again_...)
    assert Evolution(ws, cfg).find_resumable() is None


def test_budget_stops_the_run(tmp_path, monkeypatch, data):
    with FakeLLMServer(responder()) as srv:
        _env(monkeypatch, srv)
        ws = Workspace(tmp_path / "w.db")
        result = Evolution(ws, EvolutionConfig(benchmark="gsm8k", rounds=5, data_path=str(data),
                                                budget=1e-9)).run()
    rows = _rows(ws, result["run_id"])
    assert result["status"] == "stopped" and "budget" in result["reason"].lower()
    assert len(rows) < 6


def test_bad_config_is_refused_with_the_field_named(tmp_path, monkeypatch):
    _env(monkeypatch, None)
    ws = Workspace(tmp_path / "w.db")
    with pytest.raises(ValueError, match="benchmark"):
        Evolution(ws, EvolutionConfig(benchmark="chess"))
    with pytest.raises(ValueError, match="candidates"):
        Evolution(ws, EvolutionConfig(benchmark="math", candidates=0))
    with pytest.raises(ValueError, match="seed workflow is invalid"):
        Evolution(ws, EvolutionConfig(benchmark="math", workflow=BROKEN))
    with pytest.raises(ValueError, match="unknown operator"):
        Evolution(ws, EvolutionConfig(benchmark="math", operators=["teleport"]))


# ------------------------------------------------------------------------------------------------------- CLI

def test_evolve_cli_offline_json_lines(tmp_path, monkeypatch, capsys):
    _env(monkeypatch, None)
    db = tmp_path / "cli.db"
    assert main(["evolve", "--benchmark", "humaneval", "--rounds", "2", "--db", str(db), "--json", "--seed", "2"]) == 0
    out = capsys.readouterr()
    lines = [json.loads(x) for x in out.out.splitlines()]
    assert [x["round"] for x in lines] == [0, 1, 2] and all(x["score"] is None for x in lines)
    assert all(x["status"] == "structure-only" for x in lines) and "structure-only" in out.err
    assert main(["evolve", "--benchmark", "gsm8k", "--rounds", "1", "--data", str(tmp_path / "nope.jsonl")]) == 2
    bad = tmp_path / "bad.mmd"
    bad.write_text(BROKEN)
    assert main(["evolve", "--benchmark", "gsm8k", "--rounds", "1", "--workflow", str(bad), "--db", str(db)]) == 1
    assert "bad.mmd" in capsys.readouterr().err


def test_sigkill_mid_run_then_resume_keeps_every_committed_round(tmp_path, data):
    rounds = 6
    with FakeLLMServer(lambda req: "The answer is 42.", latency=0.25) as srv:
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-kill",
               "MERMAIDFLOW_CACHE": "0"}
        db = tmp_path / "kill.db"
        cmd = [sys.executable, "-m", "flowcore", "evolve", "--benchmark", "gsm8k", "--rounds", str(rounds),
               "--data", str(data), "--db", str(db), "--json", "--mode", "programmatic", "--seed", "5"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = []
        deadline = time.time() + 60
        while len(seen) < 2 and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(json.loads(line))
        assert len(seen) == 2, proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        with sqlite3.connect(db) as c:
            c.row_factory = sqlite3.Row
            before = [dict(r) for r in c.execute("SELECT * FROM evo_rounds ORDER BY round")]
            assert c.execute("SELECT status FROM evo_runs").fetchone()[0] == "running"
        assert 2 <= len(before) < rounds + 1
        again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "resuming run 1" in again.stderr
    resumed = [json.loads(x)["round"] for x in again.stdout.splitlines()]
    assert resumed == list(range(len(before), rounds + 1))
    with sqlite3.connect(db) as c:
        c.row_factory = sqlite3.Row
        after = [dict(r) for r in c.execute("SELECT * FROM evo_rounds ORDER BY round")]
        runs = c.execute("SELECT id, status FROM evo_runs").fetchall()
    assert [tuple(r) for r in runs] == [(1, "finished")]
    assert [r["round"] for r in after] == list(range(rounds + 1))
    assert after[:len(before)] == before  # every round committed before the kill is intact
    assert all(r["status"] == "ok" and r["score"] is not None for r in after)


@pytest.mark.parametrize("reply, why", [
    (f"```mermaid\n{SEED_TEXT}```", "not instruction text"),
    (SEED_TEXT, "not instruction text"),
    ("answer answer answer answer answer answer answer answer \\boxed{}", "the same word over and over"),
    ("Be good.", "too short"),
    ("Solve it carefully and check every step before you answer.", "\\boxed{} answer format"),
])
def test_a_junk_prompt_rewrite_is_declined_and_never_stored(tmp_path, monkeypatch, data, reply, why):
    def respond(req: dict) -> str:
        return reply if "You improve one instruction" in message_text(req) else "The answer is 42."

    with FakeLLMServer(respond) as srv:
        _env(monkeypatch, srv)
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k"))
        from flowcore.evolution.optimizer import rewrite_prompt

        with pytest.raises(ops.Declined, match=re.escape(why)):
            asyncio.run(rewrite_prompt(llm, SEED, "math", random.Random(0)))
        ws = Workspace(tmp_path / "w.db")
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=1, candidates=1, data_path=str(data), mode="programmatic",
                              operators=["prompt"])
        result = Evolution(ws, cfg).run()
    r1 = _rows(ws, result["run_id"])[1]
    assert r1["status"] == "ok" and "rewritten by the optimizer" not in (r1["detail"] or "")
    assert reply.strip() not in json.loads(r1["prompts_json"]).values()  # the library's variant was used


def test_evolve_again_says_the_run_is_finished_and_new_run_starts_another(tmp_path):
    import os
    import subprocess
    import sys

    db = str(tmp_path / "w.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    cmd = [sys.executable, "-m", "flowcore", "evolve", "--db", db, "--benchmark", "gsm8k", "--rounds", "2",
           "--offline", "--seed", "3"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and "run 1 with these settings is already finished (2 round(s)" in again.stderr
    assert "--rounds N with N > 2" in again.stderr and "--new-run" in again.stderr
    ws = Workspace(db)
    assert ws.query("SELECT COUNT(*) AS n FROM evo_runs")[0]["n"] == 1  # nothing was repeated
    more = subprocess.run(cmd + ["--new-run"], capture_output=True, text=True, env=env, timeout=120)
    assert more.returncode == 0 and ws.query("SELECT COUNT(*) AS n FROM evo_runs")[0]["n"] == 2
    ws.close_all()


def test_a_failure_that_only_names_the_budget_does_not_stop_the_run_as_spent(tmp_path, monkeypatch, data):
    """A budget stop is known by the error's type, never by its words: an endpoint (or a proxy) whose refusal
    reads "BudgetExceeded: ..." failed the round with those words in its reason, and the run stopped saying its
    own budget was spent, with no budget set at all, after round 1."""
    calls = {"n": 0}
    words = "BudgetExceeded: LLM budget of $0.0001 for this run is used up"

    def respond(req: dict) -> object:
        calls["n"] += 1
        return "The answer is 42." if calls["n"] <= len(DATA) else Fault(status=400, body=words)

    with FakeLLMServer(respond) as srv:
        _env(monkeypatch, srv)
        ws = Workspace(tmp_path / "w.db")
        cfg = EvolutionConfig(benchmark="gsm8k", rounds=2, candidates=1, data_path=str(data), mode="programmatic",
                              search="paper")
        result = Evolution(ws, cfg).run()
    rows = _rows(ws, result["run_id"])
    assert rows[0]["status"] == "ok" and rows[1]["status"] == "failed", [(r["status"], r["reason"]) for r in rows]
    assert words in rows[1]["reason"]  # the endpoint's words, kept as its reason
    # both rounds ran (a budget stop ends the run after round 1, with the round's reason as its own)
    assert len(rows) == 3 and result["reason"].startswith("every round failed"), (result["status"], result["reason"])
