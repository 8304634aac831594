"""Mermaid 11's JavaScript run for real: the sources, and the V8 / QuickJS hosts that run them."""
