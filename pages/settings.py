"""Settings: the LLM endpoint, the API key (this session only), a model per role, prices and limits.

The token prices are a section of their own, outside the endpoint form and built only while it is open (issue 30:
the editable grid was the page's most expensive element for the browser; a container inside a form cannot rerun
the page, so it cannot be lazy there). Each section saves its own fields and leaves the other's stored values as
they are (the merge of flowcore.workspace.settings keeps another save's change of a field this one did not touch)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from flowcore.llm.client import LLM, ROLES, LLMError, LLMSettings, public_url
from flowcore.llm.egress import EndpointRefused
from flowcore.mermaid import safe
from flowcore.ui import endpoints
from flowcore.workspace import settings as settings_store
from pages import common, serve_parts

common.app_shell()
ss = st.session_state
PRICES_OPEN = "set_show_prices"  # not a FORM_KEYS prefix: the section stays open after its save
FORM_KEYS = ("set_url", "set_model_", "set_prices", "set_budget", "set_concurrency", "set_timeout", "set_retries",
             "set_cache", "set_cap_", "set_context", "set_stream", "set_base")


def remember_key() -> None:
    """The typed key goes to session memory only (a plain session value survives page switches)."""
    typed = (ss.get("set_key_input") or "").strip()
    if typed:  # bound to the endpoint this session uses now (flowcore.ui.endpoints)
        endpoints.remember_key(common.workspace(), common.viewer(), ss, typed)


def forget_key() -> None:
    endpoints.forget_key(ss)
    ss["set_key_input"] = ""


def resolve(prefer: str | None) -> None:
    """One click on a save refused for a newer version: merge (whose value the fields both changed take), or
    reload (``prefer`` None: this form's changes are dropped)."""
    message, mine = ss.pop("set_conflict")
    if prefer is not None:
        version, base = ss["set_base"]
        try:
            endpoints.save(common.workspace(), common.viewer(), ss, mine, base=base, version=version, prefer=prefer)
        except (settings_store.SettingsError, EndpointRefused) as e:
            ss["set_conflict"] = (str(e), mine)
            return
        ss["set_flash"] = f"Saved, merged with the other change (keeping {prefer} where both changed a field)."
    ss["set_reload"] = True


def form_settings(values: dict) -> dict:
    """The public settings from the endpoint form, the prices as ``values["prices"]`` (the stored ones: the
    prices have their own section); ValueError with a readable message when a value is wrong."""
    public = {"base_url": values["base_url"].strip() or None, "models": values["models"], "prices": values["prices"],
              "timeout": values["timeout"], "max_retries": values["max_retries"],
              "concurrency": values["concurrency"],
              "budget_usd": values["budget"] if values["budget"] > 0 else None, "cache": values["cache"],
              "max_tokens": values.get("max_tokens") or {}, "stream": values.get("stream", False),
              "context_tokens": values.get("context") or None}
    return LLMSettings.from_public_dict(public).to_public_dict()  # every value checked where it was typed


def price_settings(base: dict, table: pd.DataFrame) -> dict:
    """The public settings ``base`` with the prices of the edited grid (SettingsError naming the row)."""
    prices = settings_store.prices_from_rows(table.to_dict("records"))
    return LLMSettings.from_public_dict({**base, "prices": prices}).to_public_dict()


def save_or_test(make_public, save: bool, role: str | None = None) -> None:  # noqa: ANN001 - () -> dict
    """Save (or test, with ``role``) the public settings ``make_public()`` builds from a section's values:
    a conflict with a newer save is kept for the merge buttons, a refused or wrong value is told."""
    version, base = ss["set_base"]
    try:
        public = make_public()
        if save:
            done = endpoints.save(common.workspace(), viewer, ss, public, base=base, version=version)
        else:
            chosen = endpoints.for_test(common.workspace(), viewer, ss, public)
    except settings_store.SettingsConflict as e:  # someone saved the same fields meanwhile: never overwritten
        ss["set_conflict"] = (str(e), public)
    except EndpointRefused as e:
        st.error(f"Not sent: {safe.markdown(e)}", icon=":material/block:")
    except (ValueError, settings_store.SettingsError) as e:
        st.error(f"Not applied: {safe.markdown(e)}")
    else:
        if save:
            ss["set_flash"] = f"{done} ({common.db_label()}); the API key was not saved."
            ss["set_reload"] = True
            st.rerun()
        elif not chosen.configured:
            st.warning("No endpoint to test: enter an endpoint URL or an API key first.")
        else:
            test_connection(chosen, role)


def test_connection(settings: LLMSettings, role: str) -> None:
    quick = dataclasses.replace(settings, cache=False, max_retries=0, timeout=min(settings.timeout, 20.0))
    with st.spinner(f"Asking {quick.model_for(role)} at {public_url(quick.base_url)} ..."):
        try:
            reply = LLM(quick).chat_sync("Reply with the single word OK.", role=role, max_tokens=8)
        except LLMError as e:
            st.error(f"Connection test failed: {safe.markdown(e)}")  # the endpoint's own words
            return
    st.success(f"The endpoint answered in {reply.latency:.2f} s: “{safe.plain(reply.text.strip()[:200])}” "
               f"(model {safe.plain(reply.model)}, {reply.prompt_tokens}+{reply.completion_tokens} tokens, "
               f"${reply.cost:.6f}).")


common.header("Settings", show_open=False)
if "set_flash" in ss:  # after a save the page runs again, so the header and sidebar show the new endpoint
    st.success(ss.pop("set_flash"))
current = common.llm_settings()
if ss.pop("set_reload", False):  # after a save or a reload the form shows the stored settings again
    for k in [k for k in ss if isinstance(k, str) and k.startswith(FORM_KEYS)]:
        del ss[k]
if "set_base" not in ss or "set_url" not in ss:  # the version and values this form starts from: its save names them
    ss["set_base"] = (settings_store.load_versioned(common.workspace())[1], current.to_public_dict())
common.llm_banner(current)
common.sandbox_banner(show_ready=True)
viewer = common.viewer()
shared_ok = viewer.may_change_shared()
if not shared_ok:
    st.info("The team's endpoint is set by its admins (`MERMAIDFLOW_ADMINS`). What you save here is kept for your "
            "session only and goes out with the key you type, never with the server's key.", icon=":material/group:")

st.subheader("API key")
st.text_input("API key", type="password", key="set_key_input", on_change=remember_key,
              placeholder="sk-...", help="Kept in this browser session's memory only.")
st.caption("The key is **never saved**: not in the workspace database, not in files, logs, run history or "
           "exports. It lasts until this browser session ends. Alternatively set `OPENAI_API_KEY` in the "
           "environment before starting the app.")
if ss.get(common.KEY_STATE):
    st.caption(":green[A key typed here is in use for this session.]")
    st.button("Forget the key", on_click=forget_key, key="set_forget")
elif current.api_key:
    st.caption(":green[The server's key (`OPENAI_API_KEY`) is in use with the team's endpoint.]")
else:
    st.caption("No key set (a local server such as vLLM, Ollama or llama.cpp may not need one).")

st.subheader("Endpoint, models and limits")
with st.form("llm_settings_form", enter_to_submit=False):  # Enter in a box must not save it all
    base_url = st.text_input("Endpoint URL (OpenAI-compatible)", value=current.base_url or "", key="set_url",
                             placeholder="https://api.openai.com/v1 or http://127.0.0.1:8000/v1")
    cols = st.columns(len(ROLES))
    models = {r: cols[i].text_input(f"Model for the {r}", value=current.model_for(r), key=f"set_model_{r}")
              for i, r in enumerate(ROLES)}
    c1, c2, c3, c4 = st.columns(4)
    budget = c1.number_input("Budget per run (USD, 0 = no cap)", min_value=0.0, step=0.5, format="%.2f",
                             value=float(current.budget_usd or 0.0), key="set_budget")
    concurrency = c2.number_input("Concurrent LLM calls", min_value=1, max_value=256, step=1,
                                  value=int(current.concurrency), key="set_concurrency")
    timeout = c3.number_input("Timeout per call (s)", min_value=1.0, max_value=3600.0, step=5.0,
                              value=float(current.timeout), key="set_timeout")
    retries = c4.number_input("Retries per call", min_value=0, max_value=10, step=1,
                              value=int(current.max_retries), key="set_retries")
    cache = st.checkbox("Cache LLM answers in the workspace (re-runs are free and reproducible)",
                        value=current.cache, key="set_cache")
    st.markdown("**Token caps and context** (a small local model needs both)")
    tcols = st.columns(len(ROLES) + 1)
    caps = {r: tcols[i].number_input(f"Max tokens, {r}", min_value=16, max_value=200_000, step=64,
                                     value=int(current.max_tokens[r]), key=f"set_cap_{r}")
            for i, r in enumerate(ROLES)}
    context = tcols[-1].number_input("Context window (tokens, 0 = ask the server)", min_value=0, step=512,
                                     value=int(current.context_tokens or 0), key="set_context",
                                     help="Used when the server does not state it in /v1/models.")
    stream = st.checkbox("Stream replies (the timeout then counts silence, not the length of an answer)",
                         value=current.stream, key="set_stream")
    b1, b2, b3 = st.columns([1, 1, 2], vertical_alignment="bottom")
    save = b1.form_submit_button("Save settings" if shared_ok else "Use for my session", type="primary")
    role = b3.selectbox("Role to test", ROLES, index=ROLES.index("executor"), key="set_test_role")
    test = b2.form_submit_button("Test connection")

if save or test:
    values = {"base_url": base_url, "models": models, "prices": ss["set_base"][1]["prices"], "budget": budget,
              "concurrency": int(concurrency), "timeout": float(timeout), "max_retries": int(retries),
              "cache": cache, "max_tokens": {r: int(v) for r, v in caps.items()}, "stream": stream,
              "context": int(context)}
    save_or_test(lambda: form_settings(values), save, role)

n_prices = len(current.prices)
prices_box = st.expander(f"Token prices · {n_prices} model{'s' * (n_prices != 1)} (USD per 1M tokens)",
                         key=PRICES_OPEN, on_change="rerun", icon=":material/sell:")
if prices_box.open:  # the editable grid is built only when asked for
    with prices_box:
        with st.form("llm_prices_form", enter_to_submit=False, border=False):
            st.caption("A model not listed shows \"price unknown\"; a dated model name uses the longest listed "
                       "prefix. Saved on their own: the endpoint, models and limits above keep their stored values.")
            table = pd.DataFrame([{"model": m, "input": p[0], "output": p[1]} for m, p in current.prices.items()],
                                 columns=["model", "input", "output"])
            money = st.column_config.NumberColumn
            prices = st.data_editor(table, num_rows="dynamic", hide_index=True,
                                    placeholder="—", key="set_prices", width="stretch",
                                    column_config={"model": st.column_config.TextColumn("model", required=True),
                                                   "input": money("input $/1M", min_value=0.0),
                                                   "output": money("output $/1M", min_value=0.0)})
            save_prices = st.form_submit_button("Save prices" if shared_ok else "Use these prices for my session",
                                                type="primary")
        if save_prices:
            save_or_test(lambda: price_settings(ss["set_base"][1], prices), True)

if "set_conflict" in ss:
    st.warning(ss["set_conflict"][0].capitalize() + ".", icon=":material/group:")
    m1, m2, m3 = st.columns(3)
    m1.button("Merge, keeping mine", on_click=resolve, args=("mine",), key="set_keep_mine", type="primary")
    m2.button("Merge, keeping theirs", on_click=resolve, args=("theirs",), key="set_keep_theirs")
    m3.button("Reload (drop my changes)", on_click=resolve, args=(None,), key="set_reload_btn")

with st.expander("Forget saved settings" if shared_ok else "Use the team's settings again"):
    st.caption("Go back to the environment's settings (`OPENAI_BASE_URL`, `MERMAIDFLOW_MODEL_<ROLE>`, ...)." if shared_ok
               else "Forget the settings you kept for your session.")
    if st.button("Forget saved settings" if shared_ok else "Forget my settings", key="set_clear"):
        ss["set_flash"], ss["set_reload"] = endpoints.clear(common.workspace(), viewer, ss), True
        st.rerun()

serve_parts.keys_section()
