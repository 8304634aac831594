"""API keys for the served workflows (DESIGN §12): made once, shown once, stored only as a hash, each with an
owner; revoked keys stay listed (who had access, and when it ended) but never verify again.

A key is ``mf_<id>_<secret>``: ``id`` (8 hex digits, not secret) finds the row, ``secret`` is 32 random bytes
from ``secrets`` (256 bits). Only SHA-256 of the whole key is stored. A slow KDF (scrypt, argon2) protects
passwords a person chose, which are guessable; a 256-bit random secret cannot be guessed, so a leaked hash
gives nothing to search and one fast hash per request is enough. The stored and computed hashes are compared
with ``hmac.compare_digest`` (constant time), and an unknown id costs the same hash and comparison as a known
one, so timing says nothing about which ids exist.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass, replace

from flowcore.workspace.store import Workspace

_DDL = """
CREATE TABLE IF NOT EXISTS api_keys(
    id TEXT PRIMARY KEY, name TEXT NOT NULL, owner TEXT NOT NULL, hash TEXT NOT NULL, created REAL NOT NULL,
    created_by TEXT NOT NULL, revoked REAL, last_used REAL);
"""
KEY_RE = re.compile(r"^mf_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")
_DUMMY = hashlib.sha256(b"no such key").hexdigest()
LOCAL = "local"  # the operator's identity (flowcore.workspace.published.LOCAL): never a key's owner
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.@\-]{0,79}$")
TOUCH_EVERY = 60  # seconds: a key's last_used is written at most this often
_revoked_here = [0]  # revocations made by this process (a change token does not see its own connection's writes)


class KeyProblem(ValueError):
    """A bad key name, or a key id that is not in the workspace."""


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    owner: str
    created: float
    created_by: str
    revoked: float | None
    last_used: float | None

    @property
    def active(self) -> bool:
        return self.revoked is None


def _schema(ws: Workspace) -> None:
    ws.ensure_schema("api_keys", _DDL)


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _row(r: object) -> ApiKey:
    d = dict(r)  # type: ignore[call-overload]
    return ApiKey(d["id"], d["name"], d["owner"], float(d["created"]), d["created_by"], d["revoked"], d["last_used"])


def create_key(ws: Workspace, name: str, owner: str | None = None, *,
               created_by: str | None = None) -> tuple[ApiKey, str]:
    """A new key for ``owner`` (default: the key's name; never "local"): (its record, the key itself). The key is
    returned once and never stored."""
    name = (name or "").strip()
    if not NAME_RE.match(name):
        raise KeyProblem(f"key name {name!r} is not allowed: use 1-80 letters, digits, spaces, '_', '-', '.' or "
                        "'@', starting with a letter or digit")
    owner = (owner or "").strip() or name
    if owner == LOCAL:
        # "local" is who the server's own command line is (and a keyless loopback caller): it may add versions
        # to any published name. A key is carried elsewhere, so it never gets that identity.
        raise KeyProblem(f"a key's owner cannot be {LOCAL!r} (the server's own operator): name who holds it, e.g. "
                         "an address or the key's name")
    _schema(ws)
    for _ in range(8):  # an id collision (1 in 4 billion per key) draws again
        kid = secrets.token_hex(4)
        key = f"mf_{kid}_{secrets.token_urlsafe(32)}"
        with ws.transaction() as conn:
            if conn.execute("SELECT 1 FROM api_keys WHERE id=?", (kid,)).fetchone():
                continue
            conn.execute("INSERT INTO api_keys(id, name, owner, hash, created, created_by) VALUES (?,?,?,?,?,?)",
                         (kid, name, owner, _hash(key), time.time(), (created_by or owner)))
        return get_key(ws, kid), key
    raise RuntimeError("could not draw an unused key id")  # pragma: no cover - needs 8 collisions in a row


def get_key(ws: Workspace, key_id: str) -> ApiKey:
    _schema(ws)
    rows = ws.query("SELECT * FROM api_keys WHERE id=?", (key_id,))
    if not rows:
        raise KeyProblem(f"no key with id {key_id!r} in the workspace {ws.path}")
    return _row(rows[0])


def list_keys(ws: Workspace) -> list[ApiKey]:
    """Every key (revoked ones too), newest first. Never the key itself: it is not stored."""
    _schema(ws)
    return [_row(r) for r in ws.query("SELECT * FROM api_keys ORDER BY created DESC, id")]


def revoke_key(ws: Workspace, key_id_or_name: str, *, by: str | None = None) -> ApiKey:
    """Revoke by id, or by name when exactly one active key has that name. Revoking twice keeps the first time.
    ``by``: a team member who is no admin may revoke only the keys she owns (None: the operator or an admin)."""
    _schema(ws)
    wanted = (key_id_or_name or "").strip()
    mine, args = ("", ()) if by is None else (" AND owner=?", (by,))
    rows = ws.query(f"SELECT * FROM api_keys WHERE id=?{mine}", (wanted, *args))
    if not rows:
        rows = ws.query(f"SELECT * FROM api_keys WHERE name=? AND revoked IS NULL{mine}", (wanted, *args))
        if len(rows) > 1:
            raise KeyProblem(f"{len(rows)} active keys are named {wanted!r}: revoke one by its id "
                            f"({', '.join(dict(r)['id'] for r in rows)})")
    if not rows:
        whose = "" if by is None else f" owned by {by}"
        raise KeyProblem(f"no key{whose} with id or active name {wanted!r} in the workspace {ws.path}")
    kid = dict(rows[0])["id"]
    with ws.transaction() as conn:
        conn.execute("UPDATE api_keys SET revoked=? WHERE id=? AND revoked IS NULL", (time.time(), kid))
    _revoked_here[0] += 1
    return get_key(ws, kid)


def verify_key(ws: Workspace, presented: str | None, *, touch: bool = True) -> ApiKey | None:
    """The active key ``presented`` is, or None (malformed, unknown, wrong secret or revoked)."""
    text = presented or ""
    m = KEY_RE.match(text)
    kid = m.group(1) if m else "--------"
    _schema(ws)
    rows = ws.query("SELECT * FROM api_keys WHERE id=?", (kid,)) if m else []
    stored = dict(rows[0])["hash"] if rows else _DUMMY
    ok = hmac.compare_digest(_hash(text), stored)  # the same work whether or not the id exists
    if not (ok and m and rows):
        return None
    rec = _row(rows[0])
    if not rec.active:
        return None
    now = time.time()
    if touch and (rec.last_used is None or now - rec.last_used > TOUCH_EVERY):  # at most a write a minute a key
        with ws.transaction() as conn:
            conn.execute("UPDATE api_keys SET last_used=? WHERE id=?", (now, kid))
        rec = replace(rec, last_used=now)
    return rec


class KeyCheck:
    """``verify_key`` for a server, which checks the key of every request. A key that verified is remembered (by
    its hash) together with the workspace's change token (flowcore.workspace.store.Workspace.change_token), and
    looked up in the database again as soon as anything else has committed to the workspace (``keys revoke`` or
    the Settings page, from their own processes) or this process revoked a key: a revocation holds from the next
    request on, and an unchanged workspace costs a request no query (~20 us of the server's event loop less).
    Only keys that verified are remembered; anything else is looked up every time, as before. In PostgreSQL (no
    change token) every request reads the database."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self._ok: dict[str, ApiKey] = {}
        self._token: object = None
        self._lock = threading.Lock()

    def __call__(self, presented: str | None) -> ApiKey | None:
        token = self.ws.change_token()
        if token is None:
            return verify_key(self.ws, presented)
        token = (token, _revoked_here[0])
        digest = _hash(presented or "")
        with self._lock:
            if token != self._token:
                self._ok.clear()
                self._token = token
            rec = self._ok.get(digest)
        if rec is not None and rec.last_used is not None and time.time() - rec.last_used <= TOUCH_EVERY:
            return rec
        rec = verify_key(self.ws, presented)  # its last_used write (once a minute) is this connection's own
        if rec is not None:
            with self._lock:
                if self._token == token:
                    self._ok[digest] = rec
        return rec
