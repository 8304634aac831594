"""The pages say whether generated code can run: Settings shows the sandbox ready; without bubblewrap, Home,
Settings, Run and Evolve say plainly that generated code is refused (and how to install it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.execution import sandbox

APP = str(Path(__file__).resolve().parents[2] / "app.py")
pytestmark = pytest.mark.usefixtures("app_env")


def _page(name: str | None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    if name:
        at.switch_page(f"pages/{name}.py").run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    monkeypatch.setenv("MERMAIDFLOW_BWRAP", str(tmp_path / "no-bwrap"))
    monkeypatch.setattr(sandbox, "_status_ok", None)
    monkeypatch.setattr(sandbox, "_layout_cache", None)
    yield
    sandbox._layout_cache = None  # the next test computes the real layout again


def test_settings_shows_the_sandbox_ready():
    if not Path("/usr/bin/bwrap").exists():
        pytest.skip("bubblewrap is not installed")
    at = _page("settings")
    ok = [s.value for s in at.success if "Sandbox: bubblewrap sandbox ready" in s.value]
    assert ok and "no network" in ok[0]
    assert not [e.value for e in at.error if "Generated code will not run" in e.value]


@pytest.mark.parametrize("name", [None, "settings", "run", "evolve"])
def test_without_bubblewrap_the_page_says_generated_code_is_refused(no_bwrap, name):
    at = _page(name)
    shown = [e.value for e in at.error if "Generated code will not run here" in e.value]
    assert shown, [e.value for e in at.error]
    assert "bubblewrap (bwrap) is not installed" in shown[0] and "apt-get install -y bubblewrap" in shown[0]


def test_settings_states_how_a_runs_budget_is_held(monkeypatch):
    """The budget line of `python -m flowcore sandbox` is on the Settings page: the cgroup here, and the rlimit
    fallback where no cgroup can be made."""
    if not Path("/usr/bin/bwrap").exists():
        pytest.skip("bubblewrap is not installed")
    line = sandbox.budget_mode()
    assert [s.value for s in _page("settings").success if line in s.value]
    monkeypatch.setattr(sandbox, "_status_ok", None)
    monkeypatch.setattr(sandbox, "_layout_cache", {**sandbox._sbx_layout(), "cgroups": None})
    fallback = [s.value for s in _page("settings").success if "the fallback holds" in s.value]
    assert fallback and "address space capped at the run's memory" in fallback[0]
    sandbox._status_ok = None
