"""Labels: quoted, multi-line, markdown strings, entity codes, HTML (mermaid-js: flow-text, flow-md-string)."""

from flowcore import parse
from tests.helpers.mermaid_oracle import agrees, fmt


def test_multi_line_quoted_and_markdown_labels():
    text = 'flowchart TD\n  A["first\nsecond"] --> B["`**bold** and _it_`"]\n'
    agrees(text)
    w = parse(text)
    assert w.nodes["A"].label == "first\nsecond" and w.nodes["B"].label_type == "markdown"


def test_entity_codes_and_html_are_kept_as_written():
    text = 'flowchart TD\n  A["say #quot;hi#quot; #9829;"] --> B["<img src=\'x.png\' width=20/> pic"]\n'
    agrees(text)
    assert parse(text).nodes["A"].label == "say #quot;hi#quot; #9829;"


def test_unquoted_text_with_punctuation():
    agrees("flowchart TD\n  A[a: b, c! 50%] --> B(x & y)\n")


def test_fmt_quotes_labels_and_is_a_fixed_point():
    out = fmt("flowchart TD\n  A[Custom<br/>role x]\n")
    assert 'A["Custom<br/>role x"]' in out
