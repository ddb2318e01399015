"""The one table of settings and the chain that resolves them into params."""
