"""The AOV page's actions around a background run: a decision taken while the run is ending (its last save
still under way) is applied once, and the run the user asked for goes on by itself, never left at "ready"."""

from __future__ import annotations

import threading
import time

from flowcore.aov import AOVGraph, ManualAgent, RuleInspector
from flowcore.aov import session as S
from flowcore.aov.execute import Execution
from flowcore.workspace.store import Workspace


def graph() -> AOVGraph:
    return AOVGraph.from_dict({"goal": "ship it", "agents": [{"id": "w", "role": "worker"}],
                               "subtasks": {"a": {"subtask_requirement": "do a", "agent": "w"},
                                            "bad": {"subtask_requirement": "do bad", "agent": "w", "parents": ["a"]},
                                            "end": {"subtask_requirement": "do end", "agent": "w",
                                                    "parents": ["bad"]}}})


class Page(S.Actions):
    """The page's actions with a scripted agent: 'bad' fails its first attempt."""

    def choices(self):  # noqa: ANN201
        agent = ManualAgent(lambda g, st, agent_id, attempt: "ERROR: not yet" if (st.id, attempt) == ("bad", 0)
                            else f"{st.id} ok")
        return agent, RuleInspector(), None


def test_a_decision_taken_while_the_run_is_saving_its_end_resumes_the_run(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "ws.db")
    act = Page({"aov_agents": "echo", "aov_inspector": "rules", "aov_repairs": "rules"}, ws, lambda: None)
    act.start(graph())
    ex: Execution = act.s["aov_ex"]
    ending, release = threading.Event(), threading.Event()
    save = Execution.save

    def slow_save(self) -> None:  # the run's last save (the loop has ended) waits until the user clicked
        if self._loop is None and self.queue and threading.current_thread() is not threading.main_thread() \
                and not release.is_set():
            ending.set()
            release.wait(10)
        save(self)

    monkeypatch.setattr(Execution, "save", slow_save)
    act.run_to_end()
    assert ending.wait(10), "the run never paused for the decision"
    assert act.job() is not None  # the job is still finishing: the page sees it as running
    threading.Timer(0.3, release.set).start()  # the last save completes while the click is handled
    act.accept(0, None, S.decision_token(ex))
    assert act.s.pop("aov_flash")[0] == "success"
    deadline = time.monotonic() + 10
    while act.s["aov_ex"].status != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    ex = act.s["aov_ex"]
    assert ex.status == "completed", f"left at {ex.status!r}, step {ex.step_index}"
    assert [e["payload"]["subtask"] for e in ex.events if e["kind"] == "repair"] == ["bad"]
