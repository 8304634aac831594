"""The reader's two errors, in a module of their own: the compiled and the plain build of ``lalr`` share them."""

from __future__ import annotations


class MermaidParseError(Exception):
    """What Mermaid would throw: jison's parse/lexical errors (with its hash) or FlowDB's own errors."""

    def __init__(self, message: str, *, pos: int, line: int | None, column0: int | None,
                 text: str = "", token: str | None = None, expected: list[str] | None = None,
                 kind: str = "parse", at: tuple[int, int] | None = None):
        super().__init__(message)
        self.at = at  # (line, column) in the original text, for an error placed outside the code (front matter)
        self.message, self.pos, self.line, self.column0 = message, pos, line, column0
        self.text, self.token, self.expected, self.kind = text, token, expected or [], kind

    def as_mermaid(self) -> dict:
        """The error in the shape ``mermaid_text.to_error`` reads from Mermaid (name, message, hash)."""
        hash_ = None
        if self.kind == "parse":
            hash_ = {"text": self.text, "token": self.token, "expected": self.expected,
                     "loc": {"first_line": self.line, "first_column": self.column0}}
        return {"name": "Error", "message": self.message, "hash": hash_}


class _DbError(Exception):
    """An error FlowDB itself throws while the grammar is being read (bad shape, linkStyle index...)."""
