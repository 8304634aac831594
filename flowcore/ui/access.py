"""Who may use the app. Served on loopback (``make run``) it is one person's tool and asks for no login; served
to a team (any other bind address, or MERMAIDFLOW_LOGIN=1) it requires a login through OpenID Connect
(Streamlit's ``st.login``), and only members get in: the addresses or @domains in MERMAIDFLOW_MEMBERS, or, when
that is unset, everyone the provider authenticates (the provider then decides who is on the team)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

LOGIN_ENV = "MERMAIDFLOW_LOGIN"
MEMBERS_ENV = "MERMAIDFLOW_MEMBERS"


def _loopback(address: str | None) -> bool:
    if address is None or address.strip() == "":
        return False  # Streamlit's default binds every interface
    host = address.strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: reachable from elsewhere


def login_required(bind_address: str | None, env: Mapping[str, str] = os.environ) -> bool:
    """A team deployment: bound beyond loopback, or asked for explicitly (it cannot be switched off there)."""
    asked = (env.get(LOGIN_ENV) or "").strip().lower() in ("1", "true", "yes", "on")
    return asked or not _loopback(bind_address)


def is_member(email: str | None, env: Mapping[str, str] = os.environ) -> bool:
    spec = [m.strip().lower() for m in (env.get(MEMBERS_ENV) or "").split(",") if m.strip()]
    if not spec:
        return bool(email)  # every authenticated user: the provider decides
    who = (email or "").strip().lower()
    return bool(who) and any(who == m or (m.startswith("@") and who.endswith(m)) for m in spec)
