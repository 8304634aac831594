"""Shared test setup: Hypothesis profiles, shared fixtures, and real-browser tests ordered last."""

import os

import pytest
from hypothesis import HealthCheck, settings
from streamlit import config as st_config

from flowcore.workspace.store import Workspace
from tests.helpers.fakellm import FakeLLMServer

# The page tests (AppTest) run the app as `make run` serves it, on 127.0.0.1: no login (flowcore.ui.access).
st_config.set_option("server.address", "127.0.0.1")
settings.register_profile("dev", deadline=None)  # no deadline: a first call into a warm engine may be slow
# CI: the same examples on every run, so a failure reproduces.
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


# Left out of `make test-fast` (all of them run in `make test`): whole files, then single tests taking seconds.
SLOW_FILES = ("tests/browser/", "tests/real/", "tests/execution/test_cluster.py",  # a real browser; Ray
              "tests/evolution/test_resume_kill.py", "tests/execution/test_sandbox_hostile.py",  # kills; both modes
              "tests/execution/test_sandbox_load.py",  # CPU burners
              "tests/serve/test_mcp.py", "tests/serve/test_load.py", "tests/serve/test_otlp.py")  # servers, load
SLOW_TESTS = ("test_evolution_under_faults_matches_the_fault_free_run", "test_sigkill_mid_run_then_resume",
              "test_an_endpoint_that_fails_is_an_error_not_a_failed_run", "test_worker_killed_mid_run_is_replaced",
              "test_ctrl_c_during", "test_evaluate_stops_on_sigterm", "test_exit_codes_from_a_real_process",
              "test_the_test_operator_and_an_exported_module_see_through_a_cheat",
              "test_printer_round_trips_every_accepted_workflow", "test_checker_never_raises",
              "test_without_bubblewrap_the_cli_and_a_compiled_module_refuse", "test_broken_deliverables_fail_naming_why",
              "test_the_real_benchmarks_canonical_solutions_pass", "test_export_writes_the_pages_five_files",
              "test_v8_drawing_process_renders", "test_streaming_times_out_on_silence",
              "test_a_timed_out_request_is_cancelled_at_the_server",
              "test_format_and_the_mermaid_11_check",  # V8 sometimes fails to boot beside another worker
              "test_a_queued_run_calls_the_endpoint", "test_evolve_again_says_the_run_is_finished")


def _slow(item) -> bool:
    if item.get_closest_marker("slow") or item.get_closest_marker("browser"):
        return True
    if item.nodeid.startswith(SLOW_FILES) or any(t in item.name for t in SLOW_TESTS):
        return True
    callspec = getattr(item, "callspec", None)  # the PostgreSQL half of any_ws, and pg_server users
    return "pg_server" in getattr(item, "fixturenames", ()) or (
        callspec is not None and "postgresql" in callspec.params.values())


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _slow(item):
            item.add_marker(pytest.mark.slow)

    # Playwright's sync API keeps an asyncio loop marked as running in the main thread while the session-wide
    # browser is open, so any later `asyncio.run()` would fail: run the browser tests after everything else.
    def is_browser(item) -> bool:
        return item.get_closest_marker("browser") is not None or "browser" in item.nodeid.split("/")[:2]

    items.sort(key=is_browser)  # stable: keeps the order inside each group


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL server for the session (Debian's binaries, a temp dir, 127.0.0.1)."""
    from tests.helpers import pgserver

    try:
        server = pgserver.start()
    except RuntimeError as e:
        if os.environ.get("CI"):
            raise  # `make test` installs PostgreSQL: on CI a missing server is a failure, not a skip
        pytest.skip(str(e))
    yield server
    server.stop()


def _new_ws(request, tmp_path, backend: str) -> Workspace:
    if backend == "postgresql":
        return Workspace(request.getfixturevalue("pg_server").new_schema())
    return Workspace(tmp_path / "ws.db")


@pytest.fixture
def ws(request, tmp_path):
    """A fresh workspace database for one test (SQLite; MERMAIDFLOW_TEST_BACKEND=postgresql runs the whole
    suite's workspaces on the test PostgreSQL server instead)."""
    w = _new_ws(request, tmp_path, os.environ.get("MERMAIDFLOW_TEST_BACKEND", "sqlite"))
    yield w
    w.close_all()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_ws(request, tmp_path):
    """The storage suite's workspace: every test using it runs on SQLite and on PostgreSQL."""
    w = _new_ws(request, tmp_path, request.param)
    yield w
    w.close_all()


@pytest.fixture
def app_env(tmp_path, monkeypatch):
    """Pages under AppTest get their own workspace and no LLM endpoint unless the test sets one."""
    monkeypatch.setenv("MERMAIDFLOW_DB", str(tmp_path / "ws.db"))
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "MERMAIDFLOW_CACHE"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def endpoint(monkeypatch):
    """``endpoint(responder, **kw)`` starts a scripted OpenAI-compatible server and points a clean environment
    at it (no retries, so a fault shows at once); every server started is stopped after the test."""
    for var in [v for v in os.environ if v.startswith(("OPENAI_", "MERMAIDFLOW_"))]:
        monkeypatch.delenv(var)
    servers = []

    def start(responder, **kw) -> FakeLLMServer:
        srv = FakeLLMServer(responder, **kw).start()
        servers.append(srv)
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
        return srv

    yield start
    for srv in servers:
        srv.stop()
