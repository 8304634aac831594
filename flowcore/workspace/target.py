"""Naming a workspace without leaking it: a database URL with its password masked, for messages and logs."""

from __future__ import annotations


def redact(url: str) -> str:
    """The URL without its password (safe for messages and logs)."""
    from urllib.parse import urlsplit, urlunsplit  # here: keeps `python -m flowcore check`'s start-up short

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
