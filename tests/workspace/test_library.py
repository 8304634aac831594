"""The workflow library: versioned saves in the workspace, clear errors, and the bundled examples."""

from __future__ import annotations

import pytest

from flowcore import check, is_valid, parse
from flowcore.workspace.library import (
    LibraryError,
    examples,
    list_workflows,
    load_workflow,
    save_workflow,
    table_counts,
    task_of_example,
    validate_name,
    versions,
)
from flowcore.workspace.store import Workspace

SEED = 'flowchart TD\n    PROBLEM(["Problem"])\n    C1["Custom"]\n    RETURN(["Return"])\n' \
       "    PROBLEM --> C1\n    C1 --> RETURN\n"
BROKEN = "flowchart TD\n    PROBLEM --> C1 -->\n"


def test_every_save_of_a_change_is_a_new_version_and_old_ones_stay(ws):
    assert save_workflow(ws, "solver", SEED, "math") == 1
    changed = SEED.replace("C1 --> RETURN", "C1 -->|response| RETURN")
    assert save_workflow(ws, "solver", changed, "math") == 2
    assert load_workflow(ws, "solver") == (changed, "math")
    assert load_workflow(ws, "solver", 1) == (SEED, "math")
    assert [v for v, _, _ in versions(ws, "solver")] == [2, 1]


def test_saving_the_same_text_and_task_again_adds_nothing(ws):
    assert save_workflow(ws, "solver", SEED, "math") == 1
    assert save_workflow(ws, "solver", SEED, "math") == 1
    assert save_workflow(ws, "solver", SEED, "code") == 2  # another task is another version


def test_list_reports_latest_version_task_count_and_validity(ws):
    save_workflow(ws, "a", SEED, "math")
    save_workflow(ws, "a", SEED + "\n", "math")
    save_workflow(ws, "broken", BROKEN, "code")
    entries = {e.name: e for e in list_workflows(ws)}
    assert set(entries) == {"a", "broken"}
    a = entries["a"]
    assert (a.version, a.versions, a.task, a.valid) == (2, 2, "math", True)
    assert (entries["broken"].version, entries["broken"].valid) == (1, False)
    assert list_workflows(ws)[0].name == "broken"  # most recently updated first


def test_saved_workflows_survive_reopening_the_database(tmp_path):
    first = Workspace(tmp_path / "ws.db")
    save_workflow(first, "kept", SEED, "math")
    first.close()
    again = Workspace(tmp_path / "ws.db")
    assert load_workflow(again, "kept") == (SEED, "math")
    assert table_counts(again)["workflows"] == 1
    again.close()


@pytest.mark.parametrize("name", ["", "   ", "-dash-first", "a/b", "x" * 81, "semi;colon", None, 3])
def test_bad_names_are_refused_with_what_is_allowed(ws, name):
    with pytest.raises(LibraryError, match="name"):
        save_workflow(ws, name, SEED, "math")
    assert list_workflows(ws) == []


def test_names_are_stripped_and_may_hold_spaces_dots_dashes():
    assert validate_name("  my flow-v2.1_b ") == "my flow-v2.1_b"


def test_bad_task_empty_text_and_missing_workflow_are_clear_errors(ws):
    with pytest.raises(LibraryError, match="task 'physics'"):
        save_workflow(ws, "a", SEED, "physics")
    with pytest.raises(LibraryError, match="empty"):
        save_workflow(ws, "a", "  \n", "math")
    with pytest.raises(LibraryError, match="'nope' is not in the workspace"):
        load_workflow(ws, "nope")
    save_workflow(ws, "a", SEED, "math")
    with pytest.raises(LibraryError, match="'a' version 7"):
        load_workflow(ws, "a", 7)


def test_examples_are_bundled_valid_and_their_task_is_inferred_from_the_name():
    found = examples()
    names = [n for n, _, _ in found]
    assert names == sorted(names) and {"math_seed", "code_seed", "gsm8k_case_study"} <= set(names)
    for name, task, text in found:
        assert task == ("math" if name.startswith(("math_", "gsm8k_")) else
                        "text" if name.startswith("text_") else "code")
        parse(text)
        assert is_valid(check(text, task)), name
    assert task_of_example("GSM8K_x") == "math" and task_of_example("humaneval_x") == "code"
    assert task_of_example("text_seed") == "text"


def test_examples_from_another_folder(tmp_path):
    (tmp_path / "math_tiny.mmd").write_text(SEED)
    (tmp_path / "notes.txt").write_text("ignored")
    assert examples(tmp_path) == [("math_tiny", "math", SEED)]
