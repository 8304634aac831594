"""Flow with an LLM: an OpenAI-compatible server on 127.0.0.1 answers with scripted replies."""

from __future__ import annotations

import json
import re
import threading

import pytest

from flowcore.aov import AOVGraph, Execution, LLMAgent, LLMInspector, generate_candidates, run_sync, select
from flowcore.aov.inspector import parse_verdict
from flowcore.cli.aov import main
from flowcore.llm.client import LLM, LLMSettings
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

MODELS = {"executor": "exec-model", "judge": "judge-model", "optimizer": "opt-model"}


def make_llm(srv: FakeLLMServer) -> LLM:
    return LLM(LLMSettings(base_url=srv.base_url, api_key="sk-test", models=dict(MODELS), max_retries=0,
                           timeout=10))


def diamond() -> AOVGraph:
    return AOVGraph.from_dict({"goal": "a small website", "agents": [
        {"id": "planner", "role": "plans"}, {"id": "coder", "role": "writes code"},
        {"id": "reviewer", "role": "reviews"}], "subtasks": {
        "a": {"subtask_requirement": "plan the page", "agent": "planner", "child": ["b", "c"]},
        "b": {"subtask_requirement": "write index.html", "agent": "coder"},
        "c": {"subtask_requirement": "write style.css", "agent": "coder"},
        "d": {"subtask_requirement": "review the site", "agent": "reviewer", "parents": ["b", "c"]}}})


class Script:
    """Executor: subtask b answers ERROR the first time. Judge: fails outputs holding ERROR. Optimizer:
    one good localized edit, one non-local edit, one reply that is not JSON."""

    REPAIRS = ['{"operations": [{"op": "edit", "subtask": "b", '
               '"requirement": "write index.html from the plan"}]}',
               '{"operations": [{"op": "edit", "subtask": "a", "requirement": "plan again"}]}',
               "I would rerun it."]

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.opt = 0

    def __call__(self, req: dict) -> str:
        text, model = message_text(req), req["model"]
        if model == "exec-model":
            sid = re.search(r"Your subtask \((\w+)\)", text).group(1)
            with self.lock:
                self.calls[sid] = self.calls.get(sid, 0) + 1
                first = self.calls[sid] == 1
            return "ERROR: the page template is missing" if sid == "b" and first else f"result of {sid}"
        if model == "judge-model":
            output = text.split("<<<", 1)[1].rsplit(">>>", 1)[0]
            if "ERROR" in output:
                return '```json\n{"passed": false, "reason": "the agent reported an error"}\n```'
            return json.dumps({"passed": True, "reason": "fine"})
        with self.lock:
            self.opt += 1
        number = int(re.search(r"This is proposal (\d+) of", text).group(1))  # calls run concurrently
        return self.REPAIRS[(number - 1) % 3]


def test_failing_subtask_is_repaired_by_an_accepted_llm_proposal() -> None:
    script = Script()
    with FakeLLMServer(script) as srv:
        llm = make_llm(srv)
        ex = Execution(diamond(), LLMAgent(llm), LLMInspector(llm), repair_llm=llm, mode="interactive")
        reports = run_sync(ex.run())
        assert ex.status == "paused" and [r.subtasks for r in reports] == [["a"], ["b", "c"]]
        assert reports[1].clones == [{"agent": "coder", "clone": "coder#2", "subtask": "c"}]
        v = reports[1].verdicts
        # the rule inspector's failure stands whatever the LLM would say (it is not even asked)
        assert not v["b"].passed and v["b"].source == "rules" and v["b"].reason.startswith("error marker in output")
        assert v["c"].passed
        rs = ex.pending_failure
        assert rs.failed == "b" and len(rs.proposals) == 3
        best = rs.proposals[0]
        assert best.source == "llm" and best.summary == "edit b: write index.html from the plan"
        assert len(rs.dropped) == 2
        assert "not local" in rs.dropped[0] and "JSON" in rs.dropped[1]
        assert "~ b.subtask_requirement: 'write index.html' -> 'write index.html from the plan'" in \
            best.diff.lines()
        ex.accept(0)
        more = run_sync(ex.run())
        assert ex.status == "completed" and [r.subtasks for r in more] == [["b"], ["d"]]
        assert ex.graph.subtasks["b"].data == "result of b"
        assert ex.graph.subtasks["a"].data == "result of a" and ex.graph.subtasks["c"].data == "result of c"
        assert script.calls == {"a": 1, "b": 2, "c": 1, "d": 1}
        # the agent of d saw its parents' results; the clone's prompt names the clone
        d_req = next(r for r in srv.requests
                     if r["model"] == "exec-model" and "Your subtask (d)" in message_text(r))
        assert "result of b" in message_text(d_req) and "result of c" in message_text(d_req)
        assert any("You are agent coder#2" in message_text(r) for r in srv.requests)
        # judge and optimizer calls ask for JSON
        assert all(r.get("response_format") == {"type": "json_object"}
                   for r in srv.requests if r["model"] in ("judge-model", "opt-model"))
        assert llm.usage.calls == len(srv.requests)


def test_inspector_falls_back_to_rules_when_the_judge_fails() -> None:
    with FakeLLMServer([Fault(status=500, body="overloaded"), "no verdict here"]) as srv:
        llm = make_llm(srv)
        g = diamond()
        insp = LLMInspector(llm)
        v1 = run_sync(insp.inspect(g, g.subtasks["b"], "<p>one</p>"))
        assert v1.passed and v1.source == "rules" and "judge unavailable" in v1.reason
        v2 = run_sync(insp.inspect(g, g.subtasks["b"], "<html></html>"))
        assert v2.passed and v2.source == "rules" and "unreadable" in v2.reason
        n = len(srv.requests)
        v3 = run_sync(insp.inspect(g, g.subtasks["b"], ""))
        assert not v3.passed and len(srv.requests) == n  # empty output needs no judge


def test_the_rule_inspectors_failures_stand_and_a_template_echo_is_no_verdict() -> None:
    echo = '{"passed": true, "reason": "one short sentence"}'
    with FakeLLMServer([echo]) as srv:
        llm = make_llm(srv)
        g = diamond()
        insp = LLMInspector(llm)
        v1 = run_sync(insp.inspect(g, g.subtasks["b"], "ERROR: the build broke"))
        assert not v1.passed and v1.source == "rules" and srv.requests == []  # the model is not asked
        v2 = run_sync(insp.inspect(g, g.subtasks["b"], "<html>fine</html>"))
        assert v2.source == "rules" and "echoed the template: no verdict" in v2.reason
    assert parse_verdict(echo) is None and parse_verdict('{"passed": false, "reason": "no CSS"}').reason == "no CSS"


VALID = {"goal": "bakery site", "agents": [{"id": "planner", "role": "p"}, {"id": "coder", "role": "c"}],
         "subtasks": {"plan": {"subtask_requirement": "plan", "agent": "planner", "child": ["html", "css"]},
                      "html": {"subtask_requirement": "html", "agent": "coder"},
                      "css": {"subtask_requirement": "css", "agent": "coder"},
                      "merge": {"subtask_requirement": "merge", "agent": "coder",
                                "parents": ["html", "css"]}}}
CYCLIC = {"subtasks": {"x": {"subtask_requirement": "x", "agent": "coder", "parents": ["y"]},
                       "y": {"subtask_requirement": "y", "agent": "coder", "parents": ["x"]}}}
REPAIRABLE = {"subtasks": [  # a list of records, an unknown agent and a parent that does not exist
    {"id": "plan", "subtask_requirement": "plan", "agent": "designer", "child": ["p1", "p2", "p3"]},
    {"id": "p1", "subtask_requirement": "page 1", "agent": "coder", "parents": ["ghost"]},
    {"id": "p2", "subtask_requirement": "page 2", "agent": "coder"},
    {"id": "p3", "subtask_requirement": "page 3", "agent": "coder", "status": "completed"}]}


def test_generate_candidates_repairs_drops_and_selects() -> None:
    replies = ["Here you go:\n```json\n" + json.dumps(VALID) + "\n```", json.dumps(CYCLIC),
               json.dumps(REPAIRABLE), "Sorry, I cannot help with that."]

    def respond(req: dict) -> str:  # the K calls run concurrently: each prompt says which candidate it is
        return replies[int(re.search(r"candidate (\d+) of 4", message_text(req)).group(1)) - 1]

    with FakeLLMServer(respond) as srv:
        llm = make_llm(srv)
        cands = run_sync(generate_candidates(llm, "Build a bakery website", k=4,
                                                agents=[{"id": "planner", "role": "plans"}, "coder"]))
        assert [c.valid for c in cands] == [True, False, True, False]
        assert cands[1].error == "cycle: x -> y -> x"
        assert "no JSON object" in cands[3].error
        assert any("unknown agent 'designer' replaced by 'planner'" in n for n in cands[2].repairs)
        assert any("'ghost'" in n for n in cands[2].repairs)
        g2 = cands[2].graph
        assert g2.subtasks["p1"].parents == ["plan"] and g2.subtasks["p3"].status == "pending"
        assert g2.goal == "Build a bakery website" and g2.agent_ids() == ["planner", "coder"]
        assert cands[0].metrics.P_avg == pytest.approx(4 / 3) and cands[2].metrics.P_avg == 2.0
        idx, m = select(cands)
        assert idx == 2 and m.steps == [["plan"], ["p1", "p2", "p3"]]
        assert len(srv.requests) == 4 and all(r["model"] == "opt-model" for r in srv.requests)
        assert "Build a bakery website" in message_text(srv.requests[0])


def test_cli_run_with_llm_and_auto_repair(tmp_path, monkeypatch, capsys) -> None:
    f = tmp_path / "site.json"
    f.write_text(diamond().to_json())
    with FakeLLMServer(Script()) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
        for role, model in MODELS.items():
            monkeypatch.setenv(f"MERMAIDFLOW_MODEL_{role.upper()}", model)
        rc = main(["run", str(f), "--json", "--auto-repair", "--db", str(tmp_path / "ws.db"),
                   "--schedule", "steps"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    steps = [json.loads(line) for line in out.splitlines()]
    assert [s["subtasks"] for s in steps] == [["a"], ["b", "c"], ["b"], ["d"]]
    assert steps[1]["repairs"][0]["source"] == "llm" and steps[1]["clones"][0]["clone"] == "coder#2"
    assert steps[-1]["status"] == "completed" and "no LLM configured" not in err
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("ws.db*"))  # database, WAL and all
    assert b"result of b" in stored and b"sk-test" not in stored


def test_cli_generate_select_run_is_the_whole_flow_path(tmp_path, monkeypatch, capsys) -> None:
    """`aov generate` (K graphs requested at once), then `aov select` and `aov run` on what it wrote."""
    replies = {1: json.dumps(VALID), 2: json.dumps(CYCLIC), 3: json.dumps(REPAIRABLE)}

    def respond(req: dict) -> str:
        text = message_text(req)
        m = re.search(r"candidate (\d+) of 3", text)
        if m:
            return replies[int(m.group(1))]
        if "global inspector" in text:
            return '{"passed": true, "reason": "fine"}'
        return "my part, done"

    out_dir = tmp_path / "plans"
    with FakeLLMServer(respond, latency=0.3) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
        monkeypatch.setenv("MERMAIDFLOW_CACHE", "0")
        rc = main(["generate", "Build a bakery website", "--k", "3", "--out", str(out_dir), "--json",
                   "--agents", "planner,coder"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert srv.max_in_flight == 3  # the three candidates were requested at once
        rows = [json.loads(x) for x in out.splitlines()]
        assert [r["valid"] for r in rows[:3]] == [True, False, True]
        assert rows[1]["error"] == "cycle: x -> y -> x" and rows[1]["file"].endswith("candidate_2.invalid.txt")
        assert rows[3] == {"event": "chosen", "index": 2, "file": str(out_dir / "candidate_3.json")}
        assert sorted(p.name for p in out_dir.iterdir()) == ["candidate_1.json", "candidate_2.invalid.txt",
                                                             "candidate_3.json"]
        assert main(["select", *sorted(str(p) for p in out_dir.glob("*.json")), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["chosen"] == 1  # candidate_3: the second file given
        assert main(["run", str(out_dir / "candidate_3.json"), "--json", "--refine-every", "0"]) == 0
        events = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert {e["subtask"] for e in events if e["event"] == "result"} == {"plan", "p1", "p2", "p3"}


def test_cli_generate_with_no_valid_candidate_fails(tmp_path, monkeypatch, capsys) -> None:
    with FakeLLMServer("no graph, sorry") as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("MERMAIDFLOW_CACHE", "0")
        assert main(["generate", "x", "--k", "2", "--out", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "none of the 2 candidates is a valid AOV graph" in err and "invalid: the reply holds no JSON" in out
    assert (tmp_path / "candidate_1.invalid.txt").read_text() == "no graph, sorry"
