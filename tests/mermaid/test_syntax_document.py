"""Headers, front matter, directives, comments, accessibility, BOM (mermaid-js: flow-comments, flow-direction)."""

import pytest

from flowcore import parse
from tests.helpers.mermaid_oracle import agrees, rejected_at


@pytest.mark.parametrize("header", ["flowchart TD", "flowchart TB", "graph LR", "flowchart RL", "graph BT",
                                    "flowchart-elk TD", "graph", "flowchart LR;"])
def test_headers(header):
    agrees(f"{header}\n  A --> B\n")


def test_front_matter_directives_comments_and_bom():
    text = "\ufeff---\ntitle: My flow\n---\n%%{init: {\"theme\": \"forest\"}}%%\nflowchart TD\n  %% a note\n  A --> B\n"
    agrees(text)
    assert parse(text).front_matter == "title: My flow"


def test_accessibility_and_direction_statements():
    agrees("flowchart TD\n  accTitle: Title\n  accDescr: About\n  direction LR\n  A --> B\n")
    agrees("flowchart TD\n  accDescr {\n    two\n    lines\n  }\n  A --> B\n")


@pytest.mark.parametrize("text,line", [("flowchart T\n  A-->B\n", 1), ("graph TDA;\n  A-->B\n", 1),
                                       ("flowchart TD\n  A --> B\n  end\n", 3)])
def test_broken_headers_and_stray_end(text, line):
    rejected_at(text, line)
