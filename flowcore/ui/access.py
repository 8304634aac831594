"""Who may use the app. Served on loopback (``make run``) it is one person's tool and asks for no login; served
to a team (any other bind address, or MERMAIDFLOW_LOGIN=1) it requires a login through OpenID Connect
(Streamlit's ``st.login``), and only members get in: the addresses or @domains in MERMAIDFLOW_MEMBERS, or, when
that is unset, everyone the provider authenticates (the provider then decides who is on the team). Admins
(``MERMAIDFLOW_ADMINS``, written the same way) are members who may also change what the team shares (the LLM
endpoint).

Who someone is comes from the provider's claims and is read strictly (issue 25.4): the ``email`` claim only,
never ``sub`` (a provider lets people choose their subject); ``email_verified`` must be true; the address must be
one ``@`` between a non-empty local part and domain, with no whitespace or control or format characters; a
domain rule compares the domain exactly (``x\n@team.example.org`` is not at team.example.org). ASCII addresses
compare without case. An address with other characters matches only an entry it equals exactly after NFC, and
one that NFC turns into ASCII (``mi\u212ae@example.com``, a Kelvin sign, becomes ``miKe@…``) is refused: it
looks like someone it is not."""

from __future__ import annotations

import ipaddress
import os
import unicodedata
from collections.abc import Mapping

from flowcore.serve.guard import proxied

LOGIN_ENV = "MERMAIDFLOW_LOGIN"
MEMBERS_ENV = "MERMAIDFLOW_MEMBERS"
ADMINS_ENV = "MERMAIDFLOW_ADMINS"


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


def served_names_beyond_loopback(env: Mapping[str, str] = os.environ) -> list[str]:
    """The names in MERMAIDFLOW_HOSTS that are not this machine's (``studio.example.org``, ``*.example.org``)."""
    from flowcore.ui.webguard import HOSTS_ENV, split_host

    out = []
    for raw in (x.strip() for x in (env.get(HOSTS_ENV) or "").split(",")):
        got = split_host(raw)
        if raw and (got is None or not _loopback(got[0])):  # (a wildcard or a bad entry is no loopback name)
            out.append(raw)
    return out


def login_required(bind_address: str | None, env: Mapping[str, str] = os.environ,
                   headers: Mapping[str, str] | None = None) -> bool:
    """A team deployment: bound beyond loopback, asked for explicitly (it cannot be switched off there), or
    bound to loopback but served to others through a reverse proxy: the app answers to a name that is not this
    machine's (MERMAIDFLOW_HOSTS, which a proxied browser's name must be in), or the request (``headers``)
    carries a proxy's forwarding header (flowcore.serve.guard.proxied; a local visitor who sends one himself
    only locks his own session, and a proxy sets these headers itself). Before, a loopback app behind a proxy
    was login-free for everyone the proxy served, and its Settings sent the server's key to any URL tested."""
    asked = (env.get(LOGIN_ENV) or "").strip().lower() in ("1", "true", "yes", "on")
    return asked or not _loopback(bind_address) or bool(served_names_beyond_loopback(env)) or proxied(headers)


def parse_address(value: object) -> str | None:
    """The address as it may be compared (ASCII lower-cased, anything else NFC), or None when it is not one
    plain address: not text, not exactly one ``@``, an empty part, whitespace, control or format characters,
    or characters NFC turns into ASCII (a disguise)."""
    if not isinstance(value, str) or value.count("@") != 1:
        return None
    if any(unicodedata.category(c)[0] in "CZ" for c in value):  # control, format, unassigned, any space
        return None
    local, domain = value.split("@")
    if not local or not domain or domain.startswith(".") or domain.endswith(".") or ".." in domain:
        return None
    if value.isascii():
        return value.lower()
    folded = unicodedata.normalize("NFC", value)
    return None if folded.isascii() else folded


def member_address(claims: Mapping[str, object]) -> tuple[str | None, str]:
    """(address, "") for a signed-in user whose claims name a verified, plain address, else (None, why)."""
    verified = claims.get("email_verified")
    if verified is not True and not (isinstance(verified, str) and verified.lower() == "true"):
        return None, "the identity provider did not say that this account's email address is verified"
    email = claims.get("email")
    if not email:
        return None, "the identity provider gave no email address for this account"
    address = parse_address(email)
    if address is None:
        return None, "the identity provider gave an email address that is not one plain address"
    return address, ""


def _listed(address: str | None, raw: str) -> bool:
    """Whether ``address`` (as parse_address returns it) is one of the addresses or @domains in ``raw``."""
    if not address:
        return False
    for entry in (e.strip() for e in raw.split(",")):
        if entry.startswith("@") and address.isascii():
            if "@" + address.split("@")[1] == entry.lower():
                return True
        elif address == parse_address(entry):
            return True
    return False


def is_member(address: str | None, env: Mapping[str, str] = os.environ) -> bool:
    """Whether a parsed address is on the team (everyone when MERMAIDFLOW_MEMBERS is unset); admins are members."""
    if not (env.get(MEMBERS_ENV) or "").strip():
        return bool(address)  # every verified address the provider authenticates: the provider decides
    return _listed(address, env.get(MEMBERS_ENV) or "") or is_admin(address, env)


def is_admin(address: str | None, env: Mapping[str, str] = os.environ) -> bool:
    """Whether a parsed address may change what the team shares (MERMAIDFLOW_ADMINS; nobody when unset)."""
    return _listed(address, env.get(ADMINS_ENV) or "")
