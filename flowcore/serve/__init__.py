"""Putting a workflow to work (DESIGN §12): publish immutable versions (publish.py), serve them as an
OpenAI-compatible API (openai_api.py, app.py, engine.py) and over MCP (mcp_tools.py), behind API keys (guard.py)."""
