"""The LLM client (OpenAI-compatible), its settings, prices, cache and context-window fitting."""
