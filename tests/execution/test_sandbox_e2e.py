"""End to end: a hostile endpoint writes the code the app runs, and no secret ever travels back to it; without
bubblewrap every surface (CLI, compiled module, evaluation) refuses generated code instead of running it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowcore.cli.main import main
from tests.helpers.fakellm import FakeLLMServer, message_text

ROOT = Path(__file__).resolve().parents[2]
PROGRAMMER = """flowchart TD
    PROBLEM(["Problem"])
    P1["Programmer"]
    RETURN(["Return"])
    class PROBLEM,RETURN Interface
    class P1 ProgrammerOp
    PROBLEM -->|problem| P1
    P1 --> RETURN
"""
SECRET = "hunter2-SECRET-5c8e1b"
KEY = "sk-parent-env-key-0a7d3f"


def _hostile(secret_file: Path, ppid: int) -> str:
    """A program that reads what it should not and puts it in its error, so a retry prompt would carry it."""
    return ("```python\nimport os, glob\n\ndef solve():\n    got = []\n"
            f"    for p in [{str(secret_file)!r}, '/proc/{ppid}/environ', '/proc/1/environ', '/root/.bashrc']:\n"
            "        try:\n            got.append(open(p, errors='replace').read())\n"
            "        except OSError as e:\n            got.append(repr(e))\n"
            "    got.append(repr(dict(os.environ)))\n"
            "    raise RuntimeError('LEAK ' + ' | '.join(got))\n```")


@pytest.fixture
def env(monkeypatch):
    for var in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
    return monkeypatch


def test_a_hostile_endpoint_never_receives_the_secret(env, tmp_path, capsys):
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    secret_file = vault / "secret.txt"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o600)
    wf = tmp_path / "prog.mmd"
    wf.write_text(PROGRAMMER)
    with FakeLLMServer(_hostile(secret_file, os.getpid())) as srv:
        env.setenv("OPENAI_BASE_URL", srv.base_url)
        env.setenv("OPENAI_API_KEY", KEY)  # in this process's environment, as `make run` has it
        code = main(["run", str(wf), "--task", "math", "--problem", "What is 6*7?", "--json"])
        out, err = capsys.readouterr()
        bodies = [json.dumps(r) for r in srv.requests]
    assert code == 0, err
    assert len(bodies) == 3  # first try and two retries, each retry quoting the previous failure
    retries = [message_text(r) for r in srv.requests[1:]]
    assert all("RuntimeError: LEAK" in t and "No such file or directory" in t for t in retries)
    for text in bodies + [out, err]:
        assert SECRET not in text and KEY not in text
    assert "LEAK" in json.loads(out)["answer"] and SECRET not in json.loads(out)["answer"]


def _refused(proc: subprocess.CompletedProcess) -> None:
    assert "bubblewrap (bwrap) is not installed" in proc.stderr and "apt-get install -y bubblewrap" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_bubblewrap_the_cli_and_a_compiled_module_refuse(tmp_path):
    wf = tmp_path / "prog.mmd"
    wf.write_text(PROGRAMMER)
    marker = tmp_path / "ran"
    reply = (f"```python\ndef solve():\n    try:\n        open({str(marker)!r}, 'w').write('x')\n"
             "    except OSError:\n        pass\n    return 42\n```")
    with FakeLLMServer(reply) as srv:
        env = {"PATH": os.environ["PATH"], "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "k",
               "MERMAIDFLOW_MAX_RETRIES": "0", "MERMAIDFLOW_BWRAP": str(tmp_path / "no-bwrap")}

        def run(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                                  timeout=120)

        status = run("-m", "flowcore", "sandbox")
        assert status.returncode == 1 and status.stdout.startswith("not ready: generated code was not run")
        proc = run("-m", "flowcore", "run", str(wf), "--task", "math", "--problem", "6*7?")
        assert proc.returncode == 2
        _refused(proc)
        assert srv.requests == []  # refused before any LLM call
        module = tmp_path / "workflow.py"
        assert run("-m", "flowcore", "compile", str(wf), "--task", "math", "-o", str(module)).returncode == 0
        proc = run(str(module), "--problem", "6*7?")
        assert proc.returncode == 1
        _refused(proc)
        assert not marker.exists()
        env["MERMAIDFLOW_BWRAP"] = "/usr/bin/bwrap"  # the same module with the sandbox: runs, confined
        if not Path("/usr/bin/bwrap").exists():
            pytest.skip("bubblewrap is not installed")
        proc = run(str(module), "--problem", "6*7?")
        assert proc.returncode == 0 and "\\boxed{42}" in proc.stdout, proc.stderr
        assert not marker.exists()  # that folder does not exist in the sandbox


def test_without_bubblewrap_evolve_and_code_evaluation_refuse_before_any_call(tmp_path):
    with FakeLLMServer("```python\ndef f(x):\n    return x\n```") as srv:
        env = {"PATH": os.environ["PATH"], "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "k",
               "MERMAIDFLOW_MAX_RETRIES": "0", "MERMAIDFLOW_BWRAP": str(tmp_path / "no-bwrap")}
        for argv in (["evolve", "--benchmark", "mbpp", "--rounds", "1", "--limit", "2",
                      "--db", str(tmp_path / "ws.db")],
                     ["evaluate", str(ROOT / "assets" / "examples" / "code_seed.mmd"), "--benchmark", "mbpp",
                      "--limit", "2"]):
            proc = subprocess.run([sys.executable, "-m", "flowcore", *argv], capture_output=True, text=True,
                                  env=env, cwd=ROOT, timeout=120)
            assert proc.returncode == 2, (argv[0], proc.stderr)
            _refused(proc)
        assert srv.requests == []
