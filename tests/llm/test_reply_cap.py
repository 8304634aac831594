"""LLM replies are capped (issue 25.11): a 50 MB completion was accepted and stored in the workspace. Now the
body is counted as it streams in through the real openai client (plain, gzip-compressed, or server-sent events),
reading stops at MERMAIDFLOW_MAX_REPLY_MB (1 MB), the call is an endpoint failure (errored, never a wrong answer)
and nothing of the reply is cached or logged (a stream's call is charged for the text it delivered before the
cap, as any stream that breaks off is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore.cli.main import main
from flowcore.execution.compiler import compile_workflow
from flowcore.llm.client import LLM, LLMError, LLMSettings
from flowcore.mermaid.reader import parse
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault

ROOT = Path(__file__).resolve().parents[2]
HUGE = 50_000_000

_CLIENT = r'''
import json, os, resource, sqlite3, sys
sys.path.insert(0, sys.argv[1])
from flowcore.llm.client import LLM, LLMSettings
from flowcore.workspace.store import Workspace
base_url, db, stream = sys.argv[2], sys.argv[3], sys.argv[4] == "stream"
llm = LLM(LLMSettings(base_url=base_url, api_key="k", max_retries=2, stream=stream), Workspace(db), run_id="r")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
try:
    llm.chat_sync("hello")
    out = {"error": None}
except Exception as e:
    out = {"error": f"{type(e).__name__}: {e}", "transient": getattr(e, "transient", None)}
con = sqlite3.connect(db)
out.update(before_mb=before, peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
           cache=con.execute("select count(*) from llm_cache").fetchone()[0],
           calls=[list(r) for r in con.execute("select error, completion_tokens, estimated from llm_calls")],
           db_bytes=os.path.getsize(db))
print(json.dumps(out))
'''


@pytest.mark.parametrize("how", ["plain", "gzip", "stream"])
def test_a_50_mb_reply_is_refused_as_it_streams_in_and_nothing_is_kept(how, tmp_path):
    with FakeLLMServer(Fault(huge=HUGE, gzip=how == "gzip")) as srv:
        p = subprocess.run([sys.executable, "-c", _CLIENT, str(ROOT), srv.base_url, str(tmp_path / "w.db"), how],
                           capture_output=True, text=True, timeout=300)
        asked = len(srv.requests)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.splitlines()[-1])
    print(how, {k: v for k, v in got.items() if k != "calls"})
    assert got["error"].startswith("LLMError: LLM call failed (executor, model 'gpt-4o-mini' at http://127.0.0.1:")
    assert "over the 1 MB cap for an LLM reply" in got["error"] or "passed the 1 MB cap" in got["error"]
    assert got["transient"] is False and asked == 1  # refused once, not asked again (it would flood again)
    assert got["cache"] == 0 and len(got["calls"]) == 1  # logged as a failure only
    # what a stream delivered before the cap was generated: charged, estimated (~4 characters a token); a plain
    # body cut at the cap holds no completion to count
    _, tokens, estimated = got["calls"][0]
    if how == "stream":
        assert 0 < tokens <= 2**20 // 4 and estimated == 1
    else:
        assert tokens == 0 and estimated == 0
    assert got["db_bytes"] < 200_000  # was 47.7 MB of workspace
    assert got["peak_mb"] - got["before_mb"] < 40, got  # was +190 MB for the 50 MB reply


MATH = """flowchart TD
    %% @prompt solver: Solve it.
    PROBLEM([Problem])
    C1["Custom (role: solver)"]
    RETURN([Return])
    class PROBLEM,RETURN Interface
    PROBLEM --> C1 --> RETURN
"""


def test_a_capped_reply_is_an_errored_problem_not_a_wrong_answer(endpoint, capsys, tmp_path):
    rows = tmp_path / "m.jsonl"
    rows.write_text("".join(json.dumps({"problem": f"What is {i}+1?", "solution": f"\\boxed{{{i + 1}}}"}) + "\n"
                            for i in range(2)))
    wf = tmp_path / "m.mmd"
    wf.write_text(MATH)
    endpoint(Fault(huge=3_000_000))
    code = main(["evaluate", str(wf), "--benchmark", "math", "--data", str(rows), "--json",
                 "--max-error-rate", "1"])
    out, err = capsys.readouterr()
    doc = json.loads(out) if out.strip() else {}
    assert doc.get("errors") == 2 and doc.get("n") == 0, (code, out, err)


def test_the_cap_is_a_setting(tmp_path):
    with FakeLLMServer([Fault(huge=600_000), Fault(huge=300_000)]) as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k", max_retries=0, max_reply_mb=0.5),
                  Workspace(tmp_path / "w.db"))
        with pytest.raises(LLMError, match=r"over the 0.5 MB cap"):
            llm.chat_sync("one")
        assert len(llm.chat_sync("two").text) == 262_144  # under the cap: an answer like any other
    assert LLMSettings.from_env({"MERMAIDFLOW_MAX_REPLY_MB": "2"}).max_reply_bytes == 2 << 20
    with pytest.raises(ValueError, match="MERMAIDFLOW_MAX_REPLY_MB"):
        LLMSettings.from_env({"MERMAIDFLOW_MAX_REPLY_MB": "lots"})
    with pytest.raises(ValueError, match="max_reply_mb"):
        LLMSettings(max_reply_mb=0)
    saved = LLMSettings(max_reply_mb=3.0).to_public_dict()
    assert LLMSettings.from_public_dict(saved).max_reply_mb == 3.0


@pytest.mark.parametrize("http", ["openai", "urllib"])
def test_an_exported_module_refuses_it_too(http, tmp_path):
    path = tmp_path / "wf.py"
    path.write_text(compile_workflow(parse(MATH)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_", "PYTHON"))}
    with FakeLLMServer(Fault(huge=HUGE)) as srv:
        env.update(OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="k", MERMAIDFLOW_HTTP=http,
                   MERMAIDFLOW_MAX_RETRIES="0")
        p = subprocess.run([sys.executable, "-I", str(path), "--problem", "1+1"], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 1 and "1 MB cap for an LLM reply" in p.stderr and "Traceback" not in p.stderr, p.stderr
