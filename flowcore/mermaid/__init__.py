"""Reading and printing Mermaid flowcharts: the reader (text -> Workflow) and printer, Mermaid 11's own grammar
tables, the preprocessing of text, the live preview, and agreement with Mermaid itself (engines/: V8, QuickJS)."""
