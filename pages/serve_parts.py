"""Page parts for serving (a plain module, not a page): the Publish popover of the Editor and History pages and the
API keys section of the Settings page. Logic lives in flowcore.serve.publish and flowcore.workspace.keys."""

from __future__ import annotations

from typing import Any

import streamlit as st

from flowcore.serve.publish import publish_workflow
from flowcore.workspace import keys, published
from pages import common
from pages.common import md

ss = st.session_state


def user() -> str:
    """Who is acting: the logged-in member (flowcore.ui.access via app.py), else 'local'."""
    return ss.get("mf_user") or "local"


def publish_popover(where: Any, text: str, task: str, name: str, *, key: str, run_id: int | None = None,
                    rnd: int | None = None) -> None:
    """A Publish popover in ``where`` (a column): name, note, and the button; says what was published."""
    pop = where.popover("Publish", icon=":material/rocket_launch:", key=f"{key}_pop", on_change="rerun")
    if not pop.open:  # built when opened: its versions are read from the workspace then
        return
    with pop:
        st.caption("Publish this workflow as the next immutable version NAME@vN, served by "
                   "`python -m flowcore serve`.")
        pub_name = st.text_input("Name", value=name or "", key=f"{key}_name", max_chars=80)
        note = st.text_input("Note", key=f"{key}_note", placeholder="What changed, for its callers")
        if st.button("Publish version", key=f"{key}_go", type="primary", disabled=not text.strip()):
            try:
                p = publish_workflow(common.workspace(), pub_name, text, task, created_by=user(), note=note or None,
                                     run_id=run_id, rnd=rnd)
            except ValueError as e:
                st.error(f"Not published: {md(str(e))}")
            else:
                origin = f" from run {p.run_id} round {p.round}" if p.run_id is not None else ""
                st.success(f"Published **{md(p.model_id)}**{origin} by {md(p.created_by)}.")
        versions = published.list_published(common.workspace(), (pub_name or "").strip() or None, text=False)
        if versions and pub_name.strip():
            st.dataframe([{"version": p.model_id, "by": p.created_by, "note": p.note or "",
                           "validation": p.validation_score, "test": p.test_score} for p in versions[:10]],
                         hide_index=True, placeholder="—", key=f"{key}_versions")


def keys_section() -> None:
    """Settings: make a key (shown once), list keys with their owners, revoke one."""
    st.subheader("API keys for the served workflows")
    st.caption("`python -m flowcore serve` answers only requests with `Authorization: Bearer KEY` (unless started "
               "with `--no-keys`, on 127.0.0.1 only). "
               "A key is shown once; the workspace keeps only its hash.")
    ws = common.workspace()
    c = st.columns([3, 1], vertical_alignment="bottom")
    name = c[0].text_input("New key's name", key="keys_name", placeholder="e.g. ci-bot")
    if c[1].button("Create key", key="keys_create", icon=":material/key:"):
        try:
            # on loopback (no login) the key belongs to its name: never to "local", the server's operator
            owner = None if user() == "local" else user()
            rec, key = keys.create_key(ws, name, owner, created_by=user())
        except keys.KeyProblem as e:
            st.error(md(str(e)))  # it quotes the typed name
        else:
            st.success(f"Key {rec.id} for {md(rec.owner)}: copy it now, it is not shown again.")
            st.code(key, language=None)
    rows = keys.list_keys(ws)
    if rows:
        st.dataframe([{"id": k.id, "name": k.name, "owner": k.owner, "state": "active" if k.active else "revoked"}
                      for k in rows], hide_index=True, placeholder="—", key="keys_table")
        by = _revoker()  # a member who is no admin revokes only her own keys
        active = [k.id for k in rows if k.active and (by is None or k.owner == by)]
        r = st.columns([3, 1], vertical_alignment="bottom")
        pick = r[0].selectbox("Revoke", active, key="keys_revoke_pick", placeholder="Choose a key…",
                              format_func=lambda i: next(f"{k.id} · {k.name} · {k.owner}" for k in rows if k.id == i))
        if r[1].button("Revoke", key="keys_revoke", disabled=pick is None):
            try:
                keys.revoke_key(ws, pick, by=by)  # checked again there: the choice list is only a view
            except keys.KeyProblem as e:
                st.error(md(str(e)))
            else:
                st.rerun()


def _revoker() -> str | None:
    """Whose keys this session may revoke: None for any (loopback without a login, or an admin), else the
    signed-in member's own."""
    from flowcore.ui import access

    who = user()
    return None if who == "local" or access.is_admin(access.parse_address(who)) else who
