"""`python -m flowcore link`: a Studio link for a workflow file, and the workflow a copied link holds."""

from __future__ import annotations

import json

import pytest

from flowcore.cli.main import main
from flowcore.workspace import drafts

SEED = "assets/examples/math_seed.mmd"


def test_link_round_trips_through_decode(capsys):
    assert main(["link", SEED, "--task", "math", "--name", "mine", "--base", "http://127.0.0.1:9999/"]) == 0
    link = capsys.readouterr().out.strip()
    assert link.startswith("http://127.0.0.1:9999/editor?wf=mine&task=math&code=z%3A")
    assert main(["link", "--decode", link, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    with open(SEED, encoding="utf-8") as f:
        assert got == {"name": "mine", "task": "math", "version": None, "text": f.read()}


def test_bad_links_and_files_exit_with_a_message(capsys, tmp_path):
    assert main(["link", "--decode", "http://x/editor?wf=a&code=z:abc"]) == 1
    assert "does not decompress" in capsys.readouterr().err
    assert main(["link", "--decode", "http://x/editor?page=1"]) == 1
    assert "names no workflow" in capsys.readouterr().err
    assert main(["link", str(tmp_path / "missing.mmd")]) == 2
    assert "no such file" in capsys.readouterr().err
    empty = tmp_path / "empty.mmd"
    empty.write_text("  \n")
    assert main(["link", str(empty)]) == 2 and "empty" in capsys.readouterr().err


def test_a_link_opens_what_the_pages_open(ws):
    from flowcore.cli.link import studio_link, workflow_of_link

    link = studio_link("flowchart LR\n    A --> B\n", "code", "ab")
    assert workflow_of_link(link, ws) == drafts.OpenWorkflow("ab", "code", "flowchart LR\n    A --> B\n")


@pytest.mark.parametrize("base", ["127.0.0.1:8501", "localhost", "ftp://h/", "http://", "http://h:99999"])
def test_a_base_a_browser_could_not_open_is_refused(capsys, base):
    assert main(["link", SEED, "--base", base]) == 2
    err = capsys.readouterr().err
    assert "--base" in err and repr(base.rstrip("/")) in err and "Traceback" not in err


def test_a_link_cut_inside_the_code_prefix_says_so(capsys):
    assert main(["link", "--decode", "http://127.0.0.1:8501/editor?wf=a&task=math&code=z%3"]) == 1
    assert "cut short" in capsys.readouterr().err
