"""One scripted LLM endpoint and one real ``flowcore serve`` process per test module (starting one costs ~3 s).

The endpoint echoes the problem (so every client's answer is its own), except: a problem with FAIL gets HTTP
500, one with SLOW answers after 6 s, one with HANG after 20 s (a client that leaves is seen as dropped).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from flowcore.workspace import keys, published
from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text
from tests.helpers.served import Served

ROOT = Path(__file__).resolve().parents[2]
MATH_SEED = (ROOT / "assets" / "examples" / "math_seed.mmd").read_text()


def respond(request: dict) -> str | Fault:
    text = message_text(request)
    if "FAIL" in text:
        return Fault(status=500, body="scripted executor failure")
    if "SLOW" in text:
        return Fault(delay=6.0, body="slow answer")
    if "HANG" in text:
        return Fault(delay=20.0, body="hung answer")
    return "ECHO " + text.rsplit("\n", 1)[-1]


@pytest.fixture(scope="module")
def fake_llm():
    srv = FakeLLMServer(respond).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def served_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("served") / "ws.db"
    ws = Workspace(db)
    published.publish(ws, "solver", MATH_SEED, "math", created_by="alice@example.com", note="first")
    published.publish(ws, "solver", MATH_SEED.replace("step by step", "carefully, step by step"), "math",
                      created_by="alice@example.com")
    ws.close_all()
    return db


@pytest.fixture(scope="module")
def server(fake_llm, served_db):
    with Served(served_db, llm_url=fake_llm.base_url, extra=["--timeout", "2"]) as s:
        yield s


@pytest.fixture(scope="module")
def keyed(fake_llm, served_db):
    """The same workspace served with keys required (as beyond loopback), and a key for alice."""
    ws = Workspace(served_db)
    rec, key = keys.create_key(ws, "alice-ci", "alice@example.com")
    ws.close_all()
    with Served(served_db, llm_url=fake_llm.base_url, extra=["--require-key"]) as s:
        s.key, s.key_id = key, rec.id  # type: ignore[attr-defined]
        yield s


def alice_and_mallory_keys(db: Path, solver: str = MATH_SEED, mallory: str = "mallory@example.com",
                           ) -> tuple[keys.ApiKey, str, str]:
    """A workspace at ``db`` where alice has published ``solver`` and alice and ``mallory`` (owners) hold a key
    each: alice's key's record, her key, mallory's key."""
    ws = Workspace(db)
    published.publish(ws, "solver", solver, "math", created_by="alice@example.com")
    alice, alice_key = keys.create_key(ws, "alice-ci", "alice@example.com")
    _, mallory_key = keys.create_key(ws, "mallory-ci", mallory)
    ws.close_all()
    return alice, alice_key, mallory_key


class Owners(NamedTuple):
    server: Served
    llm: FakeLLMServer
    db: Path
    alice_id: str  # alice's key's record, to revoke it
    alice: str  # the keys themselves
    mallory: str


@contextmanager
def two_owners(tmp_path: Path, latency: float = 0.0) -> Iterator[Owners]:
    """A keyed server (as beyond loopback) over a scripted endpoint that answers 42 after ``latency`` s, whose
    workspace has alice's published ``solver`` and a key each for alice and mallory (two owners)."""
    db = tmp_path / "ws.db"
    alice, alice_key, mallory_key = alice_and_mallory_keys(db)
    llm = FakeLLMServer(lambda request: "The answer is 42", latency=latency).start()
    try:
        with Served(db, llm_url=llm.base_url, extra=["--require-key"]) as s:
            yield Owners(s, llm, db, alice.id, alice_key, mallory_key)
    finally:
        llm.stop()
