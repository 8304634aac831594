"""``python -m flowcore``: one COMMANDS table (cli/main.py), one module per group of commands."""
