"""Shared test setup: Hypothesis profiles, and real-browser tests ordered last."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None)  # no deadline: a first call into a warm engine may be slow
# CI: the same examples on every run, so a failure reproduces.
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_collection_modifyitems(config, items):
    # Playwright's sync API keeps an asyncio loop marked as running in the main thread while the session-wide
    # browser is open, so any later `asyncio.run()` would fail: run the browser tests after everything else.
    def is_browser(item) -> bool:
        return item.get_closest_marker("browser") is not None or "browser" in item.nodeid.split("/")[:2]

    items.sort(key=is_browser)  # stable: keeps the order inside each group
