"""The one table of settings (table.py), the flags derived from it (flags.py) and the checks of every value (checks.py); the chain that resolves them into params is trainer/chain.py."""
