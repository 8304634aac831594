"""Which LLM endpoint and key a browser session uses, and who may change the endpoint the team shares
(issue 25.3). The Settings page and every page's settings come from here; the session's own values live in
its session state (a mutable mapping handed in), never in the workspace.

Served on loopback the app is one person's tool: the environment, overlaid by the workspace's saved
settings, overlaid by the key typed this session; Save changes the saved settings.

Served to a team:

- **The shared endpoint** is the environment's (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``) overlaid by the settings
  saved in the workspace, and only admins (``MERMAIDFLOW_ADMINS``) may save them; saved settings are used only
  when the one who saved them is an admin now (settings a member saved before this rule are ignored, saying so).
- **The server's key** (``OPENAI_API_KEY``) goes only to the shared endpoint, or to a URL an admin tests: never
  to a URL a member typed.
- **A member's own endpoint**: a member may use other settings for their own session only. They live in the
  session, never in the workspace, and the server's key never goes with them.
- **A key typed in a session** is bound to the endpoint it was typed for (the session's endpoint at that moment,
  or the one the same person then saves or picks with the key in hand): if the shared endpoint changes under it,
  the key is not sent there (a run uses the server's key, or none, until its owner types it again), and a
  connection test sends it only to that endpoint.
- Every outbound URL passes the endpoint policy (:mod:`flowcore.llm.egress`): checked here when typed, and again
  at every connection.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from flowcore.llm import egress
from flowcore.llm.client import OPENAI_URL, LLMSettings
from flowcore.ui import access
from flowcore.workspace import settings as store
from flowcore.workspace.store import Workspace

KEY = "llm_api_key"  # the key typed this session (session memory only)
KEY_URL = "llm_key_url"  # the endpoint that key was typed for
OWN = "llm_own_settings"  # a team member's own public settings, for this session only


@dataclass(frozen=True)
class Viewer:
    """Who is asking: in a team deployment or not, their address, and whether they are an admin."""

    team: bool = False
    user: str | None = None

    def admin(self, env: Mapping[str, str] = os.environ) -> bool:
        return access.is_admin(self.user, env)

    def may_change_shared(self, env: Mapping[str, str] = os.environ) -> bool:
        return not self.team or self.admin(env)


def _where(url: str | None) -> tuple:
    try:
        o = egress.Origin.of(url or OPENAI_URL)
    except egress.EndpointRefused:
        return ("?", url)
    return (o.scheme, o.host, o.port, o.path)


def shared(ws: Workspace, viewer: Viewer, env: Mapping[str, str] = os.environ) -> tuple[LLMSettings, list[str]]:
    """The team's settings with the server's key (the environment and what an admin saved)."""
    ok = (lambda by: access.is_admin(access.parse_address(by), env)) if viewer.team else None
    settings, problems = store.effective_llm_settings(ws, None, saved_ok=ok)
    return _policed(settings, viewer), problems


def _policed(settings: LLMSettings, viewer: Viewer) -> LLMSettings:
    return dataclasses.replace(settings, egress=egress.Egress.from_env(team=viewer.team))


def effective(ws: Workspace, viewer: Viewer, session: Mapping[str, Any],
              env: Mapping[str, str] = os.environ) -> tuple[LLMSettings, list[str]]:
    """The settings this session's runs use, and what was ignored (see the module docstring)."""
    team, problems = shared(ws, viewer, env)
    typed = (session.get(KEY) or "").strip() or None
    if not viewer.team:
        return (dataclasses.replace(team, api_key=typed) if typed else team), problems
    own = session.get(OWN)
    chosen = team
    if own:
        try:
            chosen = _policed(LLMSettings.from_public_dict(own), viewer)
        except ValueError as e:
            problems.append(f"Ignoring your session's own settings: {e}")
    mine = typed if typed and session.get(KEY_URL) == _where(chosen.base_url) else None
    if chosen is team:  # the shared endpoint: the member's own key for it, else the server's
        return dataclasses.replace(team, api_key=mine or team.api_key), problems
    return dataclasses.replace(chosen, api_key=mine), problems  # their own endpoint: never the server's key


def remember_key(ws: Workspace, viewer: Viewer, session: MutableMapping[str, Any], key: str) -> None:
    """Keep a typed key for this session, bound to the endpoint the session uses now."""
    session.pop(KEY, None)
    settings, _ = effective(ws, viewer, session)
    session[KEY], session[KEY_URL] = key.strip(), _where(settings.base_url)


def forget_key(session: MutableMapping[str, Any]) -> None:
    session.pop(KEY, None)
    session.pop(KEY_URL, None)


def check(settings: LLMSettings) -> None:
    """EndpointRefused (saying why) when the policy would not let the client call this endpoint."""
    (settings.egress or egress.Egress.from_env()).check_url(settings.base_url)


def save(ws: Workspace, viewer: Viewer, session: MutableMapping[str, Any], public: dict,
         env: Mapping[str, str] = os.environ, **versioned: Any) -> str:
    """Save ``public`` as the team's settings (an admin, or anyone on loopback; ``versioned``: the base, version
    and prefer of ``store.save_llm_settings``), or, for a team member, keep it as this session's own settings.
    Returns what happened; SettingsError (SettingsConflict) / EndpointRefused when refused."""
    settings = _policed(LLMSettings.from_public_dict(public), viewer)
    check(settings)
    if viewer.may_change_shared(env):
        store.save_llm_settings(ws, settings.to_public_dict(), secret=session.get(KEY),
                                saved_by=viewer.user or "local", **versioned)
        session.pop(OWN, None)
        done = "Saved to the workspace for everyone"
    else:
        session[OWN] = settings.to_public_dict()
        done = "Kept for your session only (only admins change the team's endpoint)"
    if session.get(KEY):  # the same person chose this endpoint with their key in hand
        session[KEY_URL] = _where(settings.base_url)
    return done


def clear(ws: Workspace, viewer: Viewer, session: MutableMapping[str, Any], env: Mapping[str, str] = os.environ) -> str:
    """Forget the saved settings (admins and loopback) or this session's own ones (team members)."""
    if session.pop(OWN, None) is not None or not viewer.may_change_shared(env):
        return "Your session uses the team's settings again."
    store.clear_llm_settings(ws, saved_by=viewer.user or "local")
    return "Saved settings removed."


def for_test(ws: Workspace, viewer: Viewer, session: Mapping[str, Any], public: dict,
             env: Mapping[str, str] = os.environ) -> LLMSettings:
    """The settings a connection test of the form's values uses. The key typed this session goes only to the
    endpoint it is bound to (on loopback, anywhere: it is one person's); the server's key only to the shared
    endpoint, or wherever an admin (or the loopback owner) tests. EndpointRefused when the policy refuses the URL
    (nothing is sent)."""
    settings = _policed(LLMSettings.from_public_dict(public), viewer)
    check(settings)
    typed = (session.get(KEY) or "").strip() or None
    here = _where(settings.base_url)
    if typed and (not viewer.team or session.get(KEY_URL) == here):
        return dataclasses.replace(settings, api_key=typed)
    team, _ = shared(ws, viewer, env)
    server_key = team.api_key if viewer.may_change_shared(env) or here == _where(team.base_url) else None
    return dataclasses.replace(settings, api_key=server_key)
