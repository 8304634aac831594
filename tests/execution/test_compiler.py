"""The compiler: deterministic, standalone, lint-clean, and for the same LLM replies it behaves exactly like the
runtime (same answers, same number of calls, same cost)."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flowcore
from flowcore import parse, to_mermaid
from flowcore.execution.compiler import compile_workflow
from flowcore.execution.runtime import WorkflowInvalid, run_workflow
from flowcore.llm.client import LLM, LLMSettings
from tests.helpers.fakellm import FakeLLMServer, by_keyword

EXAMPLES = Path(__file__).resolve().parents[2] / "assets" / "examples"
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.mmd"))
RUFF = Path(sys.executable).with_name("ruff")
ADD_STUB = 'def add(a, b):\n    """Add two numbers.\n    >>> add(1, 2)\n    3\n    """\n'
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"


def example(name: str):
    return parse((EXAMPLES / f"{name}.mmd").read_text())


def test_output_is_deterministic_and_independent_of_spelling():
    for name in NAMES:
        w = example(name)
        first = compile_workflow(w)
        assert compile_workflow(w) == first
        assert compile_workflow(parse(to_mermaid(w))) == first
        assert flowcore.compile((EXAMPLES / f"{name}.mmd").read_text()) == first


def test_compiled_modules_compile_pass_ruff_and_never_import_flowcore(tmp_path):
    for name in NAMES:
        src = compile_workflow(example(name))
        imported = {a.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m and m.split(".")[0] == "flowcore"}
        assert "async def __call__(self, problem: str, entry_point: str | None = None" in src
        (tmp_path / f"{name}.py").write_text(src)
    files = [str(tmp_path / f"{n}.py") for n in NAMES]
    subprocess.run([sys.executable, "-m", "py_compile", *files], check=True)
    if not RUFF.exists():
        pytest.skip("ruff is not installed next to the interpreter")
    lint = subprocess.run([str(RUFF), "check", "--no-cache", "--isolated", *files], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


def test_independent_nodes_share_a_gather_step():
    src = compile_workflow(example("gsm8k_case_study"))
    assert "C1, P3, P4, P5 = await asyncio.gather(" in src and "P1, P2 = await asyncio.gather(" in src
    human = compile_workflow(example("humaneval_case_study"))
    assert "D1 = run.decide('D1', {'verdict': [T1]})" in human
    assert "routes=[(D1, 'Failed')]" in human and "answer = run.finish([(D1, 'Passed'), T2])" in human


def test_invalid_workflows_are_not_compiled():
    with pytest.raises(WorkflowInvalid):
        compile_workflow(parse("flowchart TD\n  PROBLEM([P])\n  class PROBLEM Interface\n"))
    with pytest.raises(WorkflowInvalid, match="M011"):
        compile_workflow(example("code_seed"), "math")


AWKWARD_IDS = """flowchart TD
    %% @prompt s: Say it.
    PROBLEM([Problem])
    run["Custom (role: s)"]
    async["Custom (role: s)"]
    1x["ScEnsemble"]
    RETURN([Return])
    class PROBLEM,RETURN Interface
    PROBLEM -->|input| run & async
    run & async --> 1x
    1x --> RETURN
"""


def _load(src: str, path: Path):
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod  # as an import would: dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_node_ids_that_are_not_python_names_still_compile_and_run(tmp_path):
    w = parse(AWKWARD_IDS)
    mod = _load(compile_workflow(w), tmp_path / "awkward.py")
    with FakeLLMServer(by_keyword({"Several candidate": "Answer: B"}, "one")) as srv:
        llm = LLM(LLMSettings(base_url=srv.base_url, api_key="k"))
        flow = mod.Workflow(llm)
        answer, cost = asyncio.run(flow("q"))
        runtime = asyncio.run(run_workflow(w, "q", llm=llm))
    assert answer == runtime.answer == "one" and flow.calls == runtime.calls == 2 and cost == runtime.cost


def _standalone(path: Path, server: FakeLLMServer, problem: str, entry: str | None) -> dict:
    """Run a compiled module as its own program: isolated mode, outside the repository, flowcore unimportable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_", "PYTHON"))}
    env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="test-key")
    cmd = [sys.executable, "-I", str(path), "--problem", problem, "--json"]
    if entry:
        cmd += ["--entry-point", entry]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=path.parent, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


CASES = {
    "math_seed": ("What is 6*7?", None, {}, "6*7 = 42, so \\boxed{42}"),
    # the GSM8K case study: a worked solution and five programs, ensembled (a real choice), then refined
    "gsm8k_case_study": ("Tom has 6 bags of 7 apples. How many apples?", None, {
        "Several candidate": "Candidates B-F agree. Answer: C",
        "Check the selected solution": "Rechecked: 6*7 = 42. The answer is 42",
        "solve()": "```python\ndef solve():\n    return 6 * 7\n```",
    }, "6 bags of 7 is 43. The answer is 43"),
    # the HumanEval case study, Failed branch: candidates fail, fixes fail, the improved candidate passes
    "humaneval_case_study": (ADD_STUB, "add", {"previous solution failed": RIGHT, "Fix the code": WRONG,
                                               "def add": WRONG}, "unexpected"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_standalone_compiled_module_matches_the_runtime(name, tmp_path):
    problem, entry, table, default = CASES[name]
    path = tmp_path / "workflow.py"
    path.write_text(compile_workflow(example(name)))
    with FakeLLMServer(by_keyword(table, default)) as srv:
        runtime = asyncio.run(run_workflow(example(name), problem, entry_point=entry,
                                           llm=LLM(LLMSettings(base_url=srv.base_url, api_key="test-key"))))
        runtime_requests = [r["messages"] for r in srv.requests]
        out = _standalone(path, srv, problem, entry)
        compiled_requests = [r["messages"] for r in srv.requests[len(runtime_requests):]]
    assert out["answer"] == runtime.answer
    assert out["calls"] == runtime.calls == len(runtime_requests) == len(compiled_requests)
    assert out["cost"] == pytest.approx(runtime.cost)
    # the same requests, in any order (concurrent calls may arrive in a different order)
    assert sorted(map(json.dumps, compiled_requests)) == sorted(map(json.dumps, runtime_requests))
    if name == "gsm8k_case_study":
        assert runtime.answer.endswith("The answer is 42") and runtime.calls == 8
    if name == "humaneval_case_study":
        assert runtime.answer == "def add(a, b):\n    return a + b" and runtime.calls == 7


# Two ids Python's NFKC folding makes one name: "C1" and fullwidth "\uff231". A chain then a join, so the order of
# the calls is fixed and a merged variable shows: J would be given the second node's output twice.
NFKC_TWINS = """flowchart TD
    %% @prompt a: Say alpha.
    %% @prompt b: Say beta after this.
    %% @prompt c: Join them.
    PROBLEM([Problem])
    C1["Custom (role: a)"]
    \uff231["Custom (role: b)"]
    J["Custom (role: c)"]
    RETURN([Return])
    class PROBLEM,RETURN Interface
    PROBLEM --> C1 --> \uff231
    C1 --> J
    \uff231 --> J
    J --> RETURN
"""


def _twin_reply(request: dict) -> str:
    text = request["messages"][-1]["content"]
    if "Join them" in text:
        return "joined: " + " | ".join(w for w in ("ALPHA", "BETA") for _ in range(text.count(w)))
    return "BETA" if "Say beta" in text else "ALPHA"


def test_node_ids_that_nfkc_folds_together_stay_two_nodes_in_the_exported_module(tmp_path):
    # Issue 25.10: the exported module merged them and ran a different workflow than the one evaluated.
    w = parse(NFKC_TWINS)
    assert {"C1", "\uff231"} <= set(w.nodes)
    src = compile_workflow(w)
    names = {t.id for node in ast.walk(ast.parse(src)) if isinstance(node, ast.Assign)
             for t in ast.walk(node) if isinstance(t, ast.Name)}
    assert all(n.isascii() for n in names), sorted(n for n in names if not n.isascii())
    path = tmp_path / "twins.py"
    path.write_text(src, encoding="utf-8")
    with FakeLLMServer(_twin_reply) as srv:
        runtime = asyncio.run(run_workflow(w, "q", llm=LLM(LLMSettings(base_url=srv.base_url, api_key="k"))))
        ran = [r["messages"] for r in srv.requests]
        out = _standalone(path, srv, "q", None)
        exported = [r["messages"] for r in srv.requests[len(ran):]]
    assert runtime.answer == "joined: ALPHA | BETA"
    assert out["answer"] == runtime.answer and out["calls"] == runtime.calls == 3
    assert exported == ran  # the same calls, in the same order, with the same texts


def test_a_compiled_module_without_an_endpoint_says_how_to_configure(tmp_path):
    path = tmp_path / "workflow.py"
    path.write_text(compile_workflow(example("math_seed")))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTHON"))}
    proc = subprocess.run([sys.executable, "-I", str(path), "--problem", "1+1"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1 and "OPENAI_BASE_URL" in proc.stderr and "Traceback" not in proc.stderr
