"""The deployment pipeline: export -> engine -> run (sr) -> compare / bench. `python -m pipeline --help`."""
