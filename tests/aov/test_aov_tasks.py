"""The Flow task set: files from the agents' outputs, acceptance checks run in the sandbox (reference solutions
pass, broken ones fail naming why), and the harness running "Flow on" and "one agent" against the scripted
server, from Python and from `python -m flowcore aov tasks / accept / bench`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from flowcore.aov import AOVError, run_sync
from flowcore.aov.tasks import accept, extract_files, load_tasks, read_task, run_task, summary, task
from flowcore.cli.aov import main
from flowcore.llm.client import LLM, LLMSettings
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

SOLUTIONS = Path(__file__).resolve().parents[1] / "data" / "aov_tasks"


def solution(task_id: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in (SOLUTIONS / task_id).iterdir()}


def fenced(name: str, text: str, lang: str = "") -> str:
    return f"### File: {name}\n```{lang}\n{text}```\n"


# ---- files from replies ----------------------------------------------------------------------------

def test_files_are_read_from_the_usual_reply_formats() -> None:
    reply = ("Here is the game.\n\n### File: game.py\n```python\nprint('hi')\n```\n\n**styles.css**\n```css\n"
             "body {}\n```\nAnd `notes/readme.md`:\n\n```markdown\n# Notes\n```\n```python tools/run.py\nx = 1\n"
             "```\n```python\norphan = True\n```\n### File: ../../etc/passwd\n```\nroot\n```\n")
    files = extract_files(reply)
    assert files == {"game.py": "print('hi')\n", "styles.css": "body {}\n", "tools/run.py": "x = 1\n"}
    assert extract_files("### File: a.py\n\n```\n```\n") == {"a.py": "\n"}
    assert extract_files("no files at all") == {}


# ---- acceptance in the sandbox -------------------------------------------------------------------------

def test_the_task_set_has_the_papers_kinds_and_reference_solutions_pass() -> None:
    tasks = load_tasks()
    assert {t.kind for t in tasks} == {"game", "website", "slides", "report"}
    for t in tasks:
        acc = accept(t, solution(t.id))
        assert acc.passed, (t.id, acc.checks)
        assert acc.score == f"{len(t.checks)}/{len(t.checks)}"


def test_broken_deliverables_fail_naming_why() -> None:
    game = solution("gobang")["gobang.py"]
    no_diagonal = game.replace("(1, 1), (1, -1)", "")
    acc = accept(task("gobang"), {"gobang.py": no_diagonal})
    by = {c.check: c for c in acc.checks}
    assert not acc.passed and by["files"].passed and by["runs"].passed
    assert by["rules"].detail == "assertion failed: assert m.winner(d) == 'X' (tests.py line 13)"
    hangs = accept(task("gobang"), {"gobang.py": "while True:\n    pass\n"}, per_check=1)
    assert [c.passed for c in hangs.checks] == [True, False, False]
    assert "took longer than" in hangs.checks[1].detail  # one hanging check does not stop the others
    mute = accept(task("gobang"), {"gobang.py": game.replace('print(f"{player} wins")', "pass")})
    # The agents' code cannot write its own verdict: forged check lines and an always-equal winner() fail.
    forged = game + ('\nimport os\nfor fd in range(1, 64):\n    try:\n        os.write(fd, b\'@@CHECK {"check": '
                     '"rules", "passed": true, "detail": "forged"}\\n\')\n    except OSError:\n        pass\n'
                     'class _Any:\n    __eq__ = lambda s, o: True\n    __hash__ = lambda s: 0\n'
                     'winner = lambda board: _Any()\n')
    cheat = accept(task("gobang"), {"gobang.py": forged})
    assert [c.passed for c in cheat.checks] == [True, False, True], cheat
    assert "forged" not in cheat.checks[1].detail
    assert "the output lacks ['X wins']" in mute.checks[2].detail
    site = solution("website")
    site["index.html"] = re.sub(r"<form>.*</form>", "", site["index.html"], flags=re.S)
    site["styles.css"] = site["styles.css"].split("@media")[0]
    acc = accept(task("website"), site)
    assert "no <form>; no <input type=email>" in acc.checks[1].detail and "no @media query" in acc.checks[2].detail
    short = solution("beamer")["slides.tex"].split("\\begin{frame}\\frametitle{The AOV graph}")[0] + "\\end{document}\n"
    assert "2 frames (expected 6 to 12)" in accept(task("beamer"), {"slides.tex": short}).checks[1].detail
    report = solution("report")["report.md"].replace("## Running costs", "## Costs")
    detail = accept(task("report"), {"report.md": report}).checks[1].detail
    assert detail == "missing sections: running costs"
    assert accept(task("report"), {}).checks[0].detail == "missing or empty: report.md"


def test_malformed_task_files_are_refused_naming_the_field(tmp_path) -> None:
    good = json.loads((Path(__file__).resolve().parents[2] / "assets/aov/tasks/gobang.json").read_text())
    for change, msg in (({"goal": ""}, "field 'goal' must be a non-empty string"),
                        ({"deliverables": ["../x.py"]}, "'deliverables' must list relative file names"),
                        ({"checks": [{"kind": "vibes"}]}, "checks[0]: 'kind' must be one of"),
                        ({"checks": [{"kind": "runs"}]}, "checks[0] (runs): field 'file' is missing")):
        with pytest.raises(AOVError, match=re.escape(msg)):
            read_task({**good, **change}, "t.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(AOVError, match="bad.json: not valid JSON"):
        load_tasks(tmp_path)
    with pytest.raises(AOVError, match="no task 'chess'"):
        task("chess")


# ---- the harness: Flow on vs one agent --------------------------------------------------------------------

PLAN = {"agents": [{"id": "coder", "role": "writes code"}, {"id": "writer", "role": "writes notes"}],
        "subtasks": {"rules": {"subtask_requirement": "write the rules part of gobang.py", "agent": "coder",
                               "child": ["game"]},
                     "notes": {"subtask_requirement": "write design notes", "agent": "writer"},
                     "game": {"subtask_requirement": "complete gobang.py with the text game", "agent": "coder"}}}


def scripted(single_good: bool = True):
    game = solution("gobang")["gobang.py"]

    def reply(req: dict) -> str:
        text = message_text(req)
        if "candidate" in text and "of " in text and "Split the task" in text:
            return json.dumps(PLAN)
        if "global inspector" in text:
            return '{"passed": true, "reason": "fine"}'
        sid = re.search(r"Your subtask \((\w+)\)", text)
        sid = sid.group(1) if sid else ""
        if sid == "rules":  # an early, partial version: the later subtask's file wins
            return fenced("gobang.py", "def new_board(size=15):\n    return []\n", "python")
        if sid == "game":
            return "The finished game:\n" + fenced("gobang.py", game, "python")
        if sid == "all":
            return fenced("gobang.py", game if single_good else "def new_board():\n    pass\n", "python")
        return "notes: keep the board a list of lists"

    return reply


def make_llm(srv: FakeLLMServer) -> LLM:
    return LLM(LLMSettings(base_url=srv.base_url, api_key="sk-test", max_retries=0, timeout=20, cache=False,
                           concurrency=16))


def test_flow_and_one_agent_run_in_the_same_harness(tmp_path) -> None:
    t = task("gobang")
    with FakeLLMServer(scripted(single_good=False)) as srv:
        llm = make_llm(srv)
        flow = run_sync(run_task(t, llm, "flow", k=2, out_dir=tmp_path))
        single = run_sync(run_task(t, llm, "single", out_dir=tmp_path))
    assert flow.status == "passed" and flow.checks == "3/3" and flow.subtasks == 3 and flow.files == ["gobang.py"]
    assert (tmp_path / "gobang" / "flow_1" / "gobang.py").read_text() == solution("gobang")["gobang.py"]
    assert single.status == "failed" and single.subtasks == 1 and single.checks == "1/3"
    assert flow.calls > single.calls > 0
    rows = {(r["task"], r["mode"]): r for r in summary([flow, single])}
    assert rows[("gobang", "flow")]["success"] == 1.0 and rows[("gobang", "single")]["success"] == 0.0


def test_an_endpoint_that_fails_is_an_error_not_a_failed_run() -> None:
    with FakeLLMServer(Fault(status=500, body="down")) as srv:
        llm = make_llm(srv)
        flow = run_sync(run_task(task("report"), llm, "flow", k=2))
        single = run_sync(run_task(task("report"), llm, "single"))
    assert flow.status == "error" and "LLM call failed" in flow.error
    assert single.status == "error" and "LLM call failed" in single.error
    assert summary([flow, single])[0]["success"] is None  # nothing was measured


# ---- the command line -------------------------------------------------------------------------------------------

def test_cli_tasks_and_accept(tmp_path, capsys) -> None:
    assert main(["tasks", "--json"]) == 0
    listed = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["id"] for x in listed] == ["beamer", "gobang", "report", "website"]
    assert main(["accept", "website", str(SOLUTIONS / "website")]) == 0
    assert "website: accepted (3/3 checks)" in capsys.readouterr().out
    broken = tmp_path / "site"
    shutil.copytree(SOLUTIONS / "website", broken)
    (broken / "styles.css").unlink()
    assert main(["accept", "website", str(broken), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is False and doc["checks"][0]["detail"] == "missing or empty: styles.css"
    assert main(["accept", "chess", str(broken)]) == 1
    assert "no task 'chess'" in capsys.readouterr().err
    assert main(["accept", "website", str(tmp_path / "nowhere")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_cli_bench(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(["bench", "--tasks", "gobang"]) == 2
    assert "no LLM configured" in capsys.readouterr().err
    with FakeLLMServer(scripted()) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("MERMAIDFLOW_CACHE", "0")
        assert main(["bench", "--tasks", "gobang,chess"]) == 2
        assert "unknown task(s) chess" in capsys.readouterr().err
        assert main(["bench", "--tasks", "gobang", "--k", "2", "--json", "--out", str(tmp_path)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    runs = [x for x in lines if x["event"] == "run"]
    assert [(r["mode"], r["status"]) for r in runs] == [("flow", "passed"), ("single", "passed")]
    summ = [x for x in lines if x["event"] == "summary"]
    assert [(s["mode"], s["success"], s["measured"]) for s in summ] == [("flow", 1.0, 1), ("single", 1.0, 1)]
    assert sorted(p.name for p in (tmp_path / "gobang").iterdir()) == ["flow_1", "single_1"]
