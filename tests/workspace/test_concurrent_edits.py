"""Optimistic concurrency on what people edit (issue 28.1): settings, library saves and drafts. Each save names the
version it started from; a save over a newer version merges what can be merged (settings field by field) and
refuses the rest with what changed, never overwriting it. SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flowcore.workspace import drafts, library
from flowcore.workspace import settings as store
from flowcore.workspace.drafts import OpenWorkflow

ROOT = Path(__file__).resolve().parents[2]
SEED = dict((n, (t, x)) for n, t, x in library.examples())["math_seed"][1]
BROWSER = "ab" * 16


# -- settings ------------------------------------------------------------------------------------------------------

def test_two_editors_changing_different_fields_both_keep_their_change(any_ws):
    store.save_llm_settings(any_ws, {"base_url": "http://127.0.0.1:9/v1", "timeout": 60, "concurrency": 8,
                                     "models": {"judge": "j", "executor": "e"}})
    base, v = store.load_versioned(any_ws)  # both open the Settings page on the same version
    store.save_llm_settings(any_ws, {**base, "timeout": 30}, base=base, version=v)  # A: the timeout
    merged = store.save_llm_settings(any_ws, {**base, "concurrency": 2, "models": {"judge": "J", "executor": "e"}},
                                     base=base, version=v)  # B, from the same version: the concurrency, a model
    now, v2 = store.load_versioned(any_ws)
    assert now == merged and v2 == v + 2
    assert (now["timeout"], now["concurrency"], now["models"]) == (30, 2, {"judge": "J", "executor": "e"})


def test_the_same_field_changed_by_both_is_refused_naming_it_and_nothing_is_written(any_ws):
    store.save_llm_settings(any_ws, {"timeout": 60, "concurrency": 8, "models": {"judge": "j"}})
    base, v = store.load_versioned(any_ws)
    store.save_llm_settings(any_ws, {**base, "timeout": 30, "models": {"judge": "theirs"}}, base=base, version=v)
    with pytest.raises(store.SettingsConflict) as err:
        store.save_llm_settings(any_ws, {**base, "timeout": 90, "models": {"judge": "mine"}, "concurrency": 4},
                                base=base, version=v)
    e = err.value
    assert [f for f, _, _ in e.fields] == ["models.judge", "timeout"]
    assert ("timeout", 90, 30) in e.fields and "yours 90, theirs 30" in str(e) and e.version == v + 1
    assert store.load_versioned(any_ws) == ({"timeout": 30, "concurrency": 8, "models": {"judge": "theirs"}}, v + 1)
    # one click, either way: keep mine (save again on their version) ...
    kept = store.save_llm_settings(any_ws, {**base, "timeout": 90, "models": {"judge": "mine"}, "concurrency": 4},
                                   base=e.current, version=e.version)
    assert (kept["timeout"], kept["models"]["judge"], kept["concurrency"]) == (90, "mine", 4)
    # ... and the same value chosen by both is still two changes of one field: told, not merged away
    base, v = store.load_versioned(any_ws)
    store.save_llm_settings(any_ws, {**base, "timeout": 5}, base=base, version=v)
    with pytest.raises(store.SettingsConflict, match="timeout: yours 5, theirs 5"):
        store.save_llm_settings(any_ws, {**base, "timeout": 5}, base=base, version=v)


def test_clearing_the_settings_is_seen_by_an_editor_on_an_older_version(any_ws):
    store.save_llm_settings(any_ws, {"timeout": 60, "concurrency": 8})
    base, v = store.load_versioned(any_ws)
    store.clear_llm_settings(any_ws)
    assert store.load_llm_settings(any_ws) is None
    with pytest.raises(store.SettingsConflict, match=r"concurrency: yours 3, theirs \(not set\)") as err:
        store.save_llm_settings(any_ws, {**base, "concurrency": 3}, base=base, version=v)
    kept = store.save_llm_settings(any_ws, {**base, "concurrency": 3}, base=err.value.current or {},
                                   version=err.value.version)  # keep mine: everything the page showed
    assert kept == {"timeout": 60, "concurrency": 3}


_HAMMER = textwrap.dedent("""
    import sys
    from flowcore.workspace import settings as store
    from flowcore.workspace.store import Workspace
    ws, field, n = Workspace(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    done = refused = 0
    while done < n:  # read, change, save: the way a page or a script edits the settings
        base, v = store.load_versioned(ws)
        base = base or {}
        try:
            store.save_llm_settings(ws, {**base, field: int(base.get(field, 0)) + 1}, base=base, version=v)
            done += 1
        except store.SettingsConflict:
            refused += 1  # told, not overwritten: read again and redo the change
    print(refused)
""")


@pytest.mark.slow
@pytest.mark.parametrize("fields", [("max_retries", "max_retries"), ("max_retries", "concurrency")])
def test_two_processes_making_200_read_change_save_updates_each_lose_none(any_ws, tmp_path, fields):
    target = str(any_ws.path) if not any_ws.is_postgres else any_ws.url
    store.save_llm_settings(any_ws, {"max_retries": 0, "concurrency": 0})
    procs = [subprocess.Popen([sys.executable, "-c", _HAMMER, target, f, "200"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for f in fields]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-1500:] for o in outs]
    now, version = store.load_versioned(any_ws)
    if fields[0] == fields[1]:
        assert now["max_retries"] == 400  # every update of the same field landed (refused ones were redone)
    else:
        assert (now["max_retries"], now["concurrency"]) == (200, 200)
        assert [int(o[0]) for o in outs] == [0, 0]  # different fields never even conflict: merged field by field
    assert version == 401


# -- the library ---------------------------------------------------------------------------------------------------

def test_a_library_save_over_a_newer_version_is_refused_with_a_merge(any_ws):
    v1 = library.save_workflow(any_ws, "team", SEED, "math")
    lines = SEED.splitlines(keepends=True)
    a_text = "".join(lines[:1] + ["%% A's note\n"] + lines[1:])  # A and B both opened version 1
    b_text = "".join(lines + ["%% B's note\n"])
    v2 = library.save_workflow(any_ws, "team", b_text, "math", base_version=v1)
    with pytest.raises(library.LibraryConflict) as err:
        library.save_workflow(any_ws, "team", a_text, "math", base_version=v1)
    e = err.value
    assert (e.base, e.latest, e.theirs) == (v1, v2, b_text) and "version 2 was saved" in str(e)
    assert [v for v, _, _ in library.versions(any_ws, "team")] == [2, 1]  # nothing written
    merged, clashes = e.merge(any_ws, a_text)
    assert clashes == [] and "%% A's note" in merged and "%% B's note" in merged
    v3 = library.save_workflow(any_ws, "team", merged, "math", base_version=e.latest)
    assert v3 == 3 and library.load_workflow(any_ws, "team")[0] == merged
    # the same line changed by both: a merge says so instead of choosing
    mine = SEED.replace("step by step", "carefully", 1)
    library.save_workflow(any_ws, "team", merged.replace("step by step", "slowly", 1), "math", base_version=3)
    with pytest.raises(library.LibraryConflict) as err:
        library.save_workflow(any_ws, "team", merged.replace("step by step", "carefully", 1), "math", base_version=3)
    assert err.value.merge(any_ws, merged.replace("step by step", "carefully", 1))[1] != [] and mine


# -- drafts --------------------------------------------------------------------------------------------------------

def test_two_tabs_of_one_browser_keep_a_draft_each(any_ws):
    a, b = drafts.new_tab_id(), drafts.new_tab_id()
    wa = OpenWorkflow("left", "math", SEED + "%% tab A\n")
    wb = OpenWorkflow("right", "math", SEED + "%% tab B\n")
    drafts.remember(any_ws, BROWSER, wa, None, tab=a)
    drafts.remember(any_ws, BROWSER, wb, None, tab=b)
    assert drafts.load_draft(any_ws, BROWSER, a) == wa and drafts.load_draft(any_ws, BROWSER, b) == wb
    assert drafts.load_draft(any_ws, BROWSER) == wb  # a new tab without a link opens the latest ...
    assert [w for _, w in drafts.other_drafts(any_ws, BROWSER, "new", wb)] == [wa]  # ... and offers the other
    rev = drafts.save_draft(any_ws, BROWSER, wa, a)
    with pytest.raises(drafts.DraftConflict):  # a write naming an older revision of its row is refused
        drafts.save_draft(any_ws, BROWSER, OpenWorkflow("x", "math", "flowchart TD\n"), a, rev=rev - 1)
    assert drafts.load_draft(any_ws, BROWSER, a) == wa
