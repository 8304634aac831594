"""The checker: a workflow's diagnostics (DESIGN §5 codes) before anything runs."""
