"""The `sr` model's Python-backend file: `model.py` is copied into REPO/sr/1/ and runs inside Triton's stub, in
the environment the config names (EXECUTION_ENV_PATH); it is never imported by the pipeline itself."""
