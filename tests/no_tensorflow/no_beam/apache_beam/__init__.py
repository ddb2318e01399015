"""An `apache_beam` that cannot be imported (tests/user_commands.py, user_env_without_beam): a command
that answers with it on its path answered before Beam loads."""
raise ImportError("Beam was imported: this answer was meant to come before Beam loads")
