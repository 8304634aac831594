"""The Run and Export pages under Streamlit's AppTest: no endpoint (banner, disabled runs), a scripted
endpoint (one problem; a background benchmark evaluation that survives a reload), invalid workflows, and the
export code view with its download buttons."""

from __future__ import annotations

import html
import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from flowcore.tasks import load
from flowcore.ui import code_view
from flowcore.workspace import jobs
from tests.helpers.fakellm import FakeLLMServer, Fault, message_text

RUN, EXPORT = "../../pages/run.py", "../../pages/export.py"
BROKEN = "flowchart TD\n    PROBLEM([\"Problem\"])\n    C1[\"Custom\"]\n    PROBLEM --> C1\n"


pytestmark = pytest.mark.usefixtures("app_env")  # own workspace, no endpoint


def app(path: str) -> AppTest:
    at = AppTest.from_file(path, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def code_boxes(at: AppTest) -> list[str]:
    """The text of each code box the page drew (pages/widgets.code: HTML highlighted on the server)."""
    return [html.unescape(re.sub(r"<[^>]+>", "", h.value.split("</style>", 1)[1]))
            for h in at.html if f'class="{code_view.BOX}"' in h.value]


def with_workflow(path: str, text: str, name: str) -> AppTest:
    """The page with ``text`` as the current (math) workflow, as the Editor would leave it."""
    at = AppTest.from_file(path, default_timeout=60)
    for k, v in {"mf_text": text, "mf_task": "math", "mf_name": name, "mf_rev": 0}.items():
        at.session_state[k] = v
    return at.run()


def buttons(at: AppTest) -> dict[str, bool]:
    """label -> disabled"""
    return {b.label: b.disabled for b in at.button}


# -- Run ----------------------------------------------------------------------------------------------------------

def test_run_without_endpoint_says_so_and_disables_running():
    at = app(RUN)
    assert any("No LLM endpoint is configured" in i.value for i in at.info)
    assert buttons(at)["Run"] is True
    at.radio(key="run_mode").set_value("Benchmark").run()
    assert not at.exception
    assert buttons(at)["Start evaluation"] is True
    assert any("No evaluations yet" in c.value for c in at.caption)


def test_run_one_problem_shows_the_scripted_answer_and_trace(monkeypatch):
    with FakeLLMServer("The answer is \\boxed{42}", latency=0.1) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = app(RUN)
        assert not at.info  # no "not configured" banner
        at.text_area(key="run_problem_text").input("What is 6 times 7?")
        at.button(key="run_one").click().run()
    assert not at.exception and not at.error
    assert [c.value for c in at.code] == ["The answer is \\boxed{42}"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["LLM calls"] == "1" and 10 < float(metrics["Tokens/s"]) < 50  # 4 tokens in ~0.1 s
    trace = at.dataframe[0].value
    assert list(trace["node"]) == ["C1"] and list(trace["operator"]) == ["Custom"]
    assert "What is 6 times 7?" in message_text(srv.requests[0])


@pytest.mark.parametrize("no_usage", [True, False])
def test_a_cost_the_endpoint_gave_no_usage_for_is_shown_as_an_estimate(monkeypatch, no_usage):
    """A server that leaves usage out is charged an estimate (~4 characters a token); the page said "$0.0000"-like
    exact figures all the same. Now the cost reads "~$..." with a tooltip saying how many calls were estimated,
    for one problem and for an evaluation; a server that reports usage gets no "~"."""
    reply = Fault(body="The answer is \\boxed{42}", no_usage=no_usage)
    with FakeLLMServer(reply) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = app(RUN)
        at.text_area(key="run_problem_text").input("What is 6 times 7?")
        at.button(key="run_one").click().run()
        cost = next(m for m in at.metric if m.label == "Cost")
        assert cost.value.startswith("~$") is no_usage and cost.value.lstrip("~$") not in ("0.0000", "")
        assert ("reported no (usable) token counts for 1 paid call;" in cost.proto.help) is no_usage

        at.radio(key="run_mode").set_value("Benchmark").run()
        at.number_input(key="run_limit").set_value(2).run()
        at.button(key="run_start").click().run()
        job = jobs.get(at.session_state["run_job_id"])
        assert job is not None and job.wait(30) and job.status == "done", job.error
        at.run()
    assert not at.exception
    cost = next(m for m in at.metric if m.label == "Cost")
    assert cost.value.startswith("~$") is no_usage
    assert ("for 2 paid calls;" in cost.proto.help) is no_usage


def test_run_empty_problem_warns_instead_of_calling(monkeypatch):
    with FakeLLMServer("x") as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = app(RUN)
        at.button(key="run_one").click().run()
        assert any("Type a problem" in w.value for w in at.warning) and srv.requests == []


def test_an_errored_problem_shows_as_not_run_next_to_the_score(monkeypatch):
    """Issue 25 (e): a problem with no verdict is left out of the score, and the page says so beside it."""
    problems = load("gsm8k", "validation", limit=3)

    def respond(request: dict):  # right, wrong, and an endpoint failure (no verdict)
        text = message_text(request)
        if problems[2].question in text:
            return Fault(status=400, body="bad request")
        return f"The answer is {problems[0].reference}" if problems[0].question in text else "The answer is -7"

    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("MERMAIDFLOW_MAX_RETRIES", "0")
        at = app(RUN)
        at.radio(key="run_mode").set_value("Benchmark").run()
        at.number_input(key="run_limit").set_value(3).run()
        at.button(key="run_start").click().run()
        job = jobs.get(at.session_state["run_job_id"])
        assert job is not None and job.wait(30) and job.status == "done", job.error
        at.run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Score"] == "50.0% · 1 not run" and metrics["Solved"] == "1 / 2"


def test_run_benchmark_evaluation_runs_in_background_and_survives_a_reload(monkeypatch):
    problems = load("gsm8k", "validation", limit=3)

    def respond(request: dict) -> str:  # right for the first problem only
        text = message_text(request)
        return f"The answer is {problems[0].reference}" if problems[0].question in text else "The answer is -7"

    with FakeLLMServer(respond) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = app(RUN)
        at.radio(key="run_mode").set_value("Benchmark").run()
        at.number_input(key="run_limit").set_value(3).run()
        at.button(key="run_start").click().run()
        assert not at.exception and not at.error
        job = jobs.get(at.session_state["run_job_id"])
        assert job is not None and job.wait(30) and job.status == "done", job.error
        at.run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Score"] == "33.3%" and metrics["Solved"] == "1 / 3"
    assert metrics["95% interval"].endswith("%")
    assert any("(bootstrap, n = 3)" in c.value for c in at.caption)
    assert any("All 3 LLM answers are fresh" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert list(table.columns) == ["id", "verdict", "extracted", "reference", "error", "cost", "latency", "answer"]
    assert list(table["id"]) == [p.id for p in problems]
    assert list(table["verdict"]) == ["correct", "wrong", "wrong"]
    assert list(table["reference"]) == [p.reference for p in problems]
    assert list(table["extracted"]) == [problems[0].reference, "-7", "-7"]
    eval_id = job.meta["eval_id"]
    at.session_state[f"run_filter_{eval_id}"] = "failures"  # the "Failures" filter
    at.run()
    failures = at.dataframe[0].value
    assert list(failures["id"]) == [p.id for p in problems[1:]] and set(failures["verdict"]) == {"wrong"}

    fresh = app(RUN)  # a new session on the same workspace: the stored evaluation is listed and shown
    fresh.radio(key="run_mode").set_value("Benchmark").run()
    assert {m.label: m.value for m in fresh.metric}["Score"] == "33.3%"
    assert fresh.selectbox[-1].value == job.meta["eval_id"]


def start_slow_benchmark(source: str = "validation", limit: int = 10):
    """A Run page that has started a 10-problem benchmark, one problem at a time (1 s each with the server's
    latency): long enough that a reload or a Cancel lands mid-run even on a loaded machine."""
    at = app(RUN)
    at.radio(key="run_mode").set_value("Benchmark").run()
    if source != "validation":
        at.radio(key="run_source").set_value(source).run()
    at.number_input(key="run_limit").set_value(limit).run()
    at.number_input(key="run_conc").set_value(1).run()
    at.button(key="run_start").click().run()
    return at


def test_a_reload_mid_evaluation_opens_on_its_progress(monkeypatch):
    """A reloaded Run page (a new session) opened in 'One problem' mode: the running evaluation was nowhere to
    be seen until the user found the Benchmark switch."""
    with FakeLLMServer("The answer is 3", latency=1.0) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = start_slow_benchmark("test", 12)
        job = jobs.get(at.session_state["run_job_id"])
        try:
            reloaded = app(RUN)
            assert reloaded.radio(key="run_mode").value == "Benchmark"
            # the form mirrors the job in progress (Test / 12 / 1), not the defaults (Validation / 10 / 4)
            assert reloaded.radio(key="run_source").value == "test"
            assert reloaded.number_input(key="run_limit").value == 12
            assert reloaded.number_input(key="run_conc").value == 1
            assert reloaded.selectbox(key="run_bench_math").value == "gsm8k"
            reloaded.number_input(key="run_limit").set_value(5).run()  # mirrored once: the user's change stays
            assert reloaded.number_input(key="run_limit").value == 5
            assert buttons(reloaded)["Start evaluation"] is True and "Cancel" in buttons(reloaded)
        finally:
            job.cancel()
            job.wait(30)
    assert app(RUN).radio(key="run_mode").value == "One problem"  # nothing running: the usual first mode


def test_run_benchmark_cancel_keeps_the_partial_evaluation(monkeypatch):
    with FakeLLMServer("The answer is 3", latency=1.0) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = start_slow_benchmark()
        assert buttons(at)["Start evaluation"] is True  # one evaluation at a time
        at.button(key="run_cancel").click().run()
        assert any("Cancelling" in i.value for i in at.info)
        job = jobs.get(at.session_state["run_job_id"])
        assert job.wait(30) and job.status == "cancelled"
        at.run()
    assert not at.exception
    assert any(w.value.startswith("Cancelled after") for w in at.warning)
    n = len(at.dataframe[0].value)
    assert 0 < n < 10 and {m.label: m.value for m in at.metric}["Solved"] == f"0 / {n}"


def test_run_invalid_workflow_shows_diagnostics_and_disables_running(monkeypatch):
    with FakeLLMServer("x") as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = with_workflow(RUN, BROKEN, "broken")
    assert not at.exception
    assert any("invalid" in e.value for e in at.error)
    assert "M004" in set(at.dataframe[0].value["code"])  # RETURN is missing
    assert buttons(at)["Run"] is True


# -- Export -------------------------------------------------------------------------------------------------------

def test_export_shows_code_and_downloads():
    at = app(EXPORT)
    boxes = code_boxes(at)  # Python (numbered lines), Mermaid, JSON
    assert len(boxes) == 3 and "class Workflow" in boxes[0] and boxes[0].lstrip().startswith("1")
    assert boxes[1].split("\n", 1)[0].endswith("flowchart TD") and json.loads(boxes[2])
    downloads = {b.proto.label: b.proto for b in at.get("download_button")}
    assert list(downloads) == ["Python (.py)", "Mermaid (.mmd)", "Drawing (.svg)", "Drawing (.png)",
                               "JSON (.json)"]
    assert not any(p.disabled for p in downloads.values())
    assert downloads["Python (.py)"].url.endswith(".py") and downloads["JSON (.json)"].url.endswith(".json")
    assert any("3 nodes, 2 edges, 1 prompt" in m and "1 prompts" not in m for m in (x.value for x in at.markdown))
    # a bundled example instead of the current workflow
    at.selectbox(key="ex_pick").set_value(("example", "code_seed")).run()
    assert not at.exception
    assert "CustomCodeGenerate" in code_boxes(at)[0]


def test_export_shows_an_odd_workflow_name_as_written_not_as_markdown():
    from flowcore.workspace.library import examples

    seed = next(t for n, _, t in examples() if n == "math_seed")
    odd = "**B** [link](javascript:alert(1)) $x^2$ <b>h</b>"
    at = with_workflow(EXPORT, seed, odd)  # a name from a copied link can be any text
    assert not at.exception
    line = next(m.value for m in at.markdown if "nodes," in m.value)
    escaped = odd.translate({ord(c): "\\" + c for c in "*[]$<>"}).replace(":a", "\\:a")  # a directive's colon too
    assert line.startswith("**" + escaped + "**"), line


def test_export_invalid_workflow_shows_diagnostics_not_code():
    at = with_workflow(EXPORT, BROKEN, "broken")
    assert not at.exception
    assert any("invalid" in e.value for e in at.error)
    assert not code_boxes(at)
    assert "M004" in set(at.dataframe[0].value["code"])
    assert [b.proto.label for b in at.get("download_button")] == ["Download the text as .mmd anyway"]


def test_export_refuses_a_workflow_carrying_the_key(monkeypatch):
    key = "sk-page-test-KEY-987654321"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    text = ("flowchart TD\n    %% @prompt solver: use " + key + " and solve\n    PROBLEM([\"Problem\"])\n"
            "    C1[\"Custom<br/>(role: solver)\"]\n    RETURN([\"Return\"])\n    class PROBLEM,RETURN Interface\n"
            "    class C1 CustomOp\n    PROBLEM -->|input| C1\n    C1 --> RETURN\n")
    at = with_workflow(EXPORT, text, "leaky")
    assert not at.exception
    assert any("API key" in e.value for e in at.error)
    assert not at.get("download_button") and not at.code and not code_boxes(at)


def test_forms_keep_their_values_across_pages():
    at = app("../../app.py")
    at.switch_page("pages/run.py").run()
    at.radio(key="run_mode").set_value("Benchmark").run()
    at.number_input(key="run_limit").set_value(7).run()
    at.switch_page("pages/editor.py").run()
    assert not at.exception
    at.switch_page("pages/run.py").run()
    assert at.radio(key="run_mode").value == "Benchmark" and at.number_input(key="run_limit").value == 7


def test_a_single_run_of_a_sample_problem_says_whether_it_is_right(monkeypatch):
    p = load("gsm8k", "validation", limit=1)[0]
    with FakeLLMServer("The answer is -5") as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = app(RUN)
        at.button(key="run_sample").click().run()
        assert at.text_area(key="run_problem_text").value == p.question
        assert at.text_input(key="run_reference").value == p.reference
        at.button(key="run_one").click().run()
    assert not at.exception
    assert any(e.value.startswith("Wrong: extracted answer `-5`, reference") and p.reference in e.value
               for e in at.error)


def test_a_run_answered_from_the_cache_says_so(monkeypatch):
    """Issue 21.5: the same problem run twice; the second is answered from the workspace's cache, and the page says
    so instead of showing '$0.0000 · Tokens/s —' as if the run were free."""
    with FakeLLMServer("The answer is -5") as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        at = app(RUN)
        at.button(key="run_sample").click().run()
        at.button(key="run_one").click().run()
        assert not any("answered from this workspace's cache" in c.value for c in at.caption)
        sent = len(srv.requests)
        at.button(key="run_one").click().run()
    assert not at.exception and len(srv.requests) == sent  # the second run sent nothing
    assert any("were answered from this workspace's cache: nothing new was paid" in c.value for c in at.caption)
