"""What a person reads about a run: the HTML report page (python -m trainer.report OUT) and a command's closing summary."""
