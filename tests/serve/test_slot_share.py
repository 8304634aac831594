"""The LLM slot share per key owner (flowcore.llm.slots) caps an owner only when there is another to keep slots
for: a one-owner server's owner gets every slot (serve_overhead.py's one-key benchmark lost ~10 % to a cap that
protected nobody), and a second owner's key brings the cap within a settings re-read."""

from __future__ import annotations

import pytest

from flowcore.llm.client import LLMSettings
from flowcore.serve import engine as eng
from flowcore.workspace import keys
from flowcore.workspace.store import Workspace


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setattr(eng, "SETTINGS_TTL", 0.0)  # every llm() re-reads: the count is seen at once
    w = Workspace(tmp_path / "w.db")
    yield w
    w.close_all()


def _engine(ws: Workspace, owner_slots: int | None) -> eng.Engine:
    e = eng.Engine(ws, settings=LLMSettings(base_url="http://127.0.0.1:9/v1", api_key="k", concurrency=8))
    e.fair_share(owner_slots)
    return e


def test_a_lone_owner_gets_every_slot_and_a_second_owners_key_brings_the_share(ws):
    keys.create_key(ws, "alice-laptop", "alice@example.com")
    keys.create_key(ws, "alice-ci", "alice@example.com")  # two keys, one owner: still nobody to share with
    e = _engine(ws, None)
    assert e.llm()._shared.share == 8
    keys.create_key(ws, "mallory", "mallory")
    assert e.llm()._shared.share == 6
    keys.revoke_key(ws, "mallory")
    assert e.llm()._shared.share == 8


def test_the_operators_setting_applies_as_set_whatever_the_owners(ws):
    keys.create_key(ws, "alice-ci", "alice@example.com")
    assert _engine(ws, 3).llm()._shared.share == 3
