"""A workflow's files: the standalone Python module, canonical Mermaid, SVG/PNG drawings and JSON."""
