"""The deployment pipeline: export -> engine -> run (sr) -> compare / bench. `python -m pipeline --help`."""
import os

# PyTorch's OpenMP threads spin for milliseconds after every parallel op unless told to sleep; on the 2-core
# machine that spinning was most of the torch backend's CPU time around cheap ops and starved the sr stage's
# decode/encode threads (as ONNX Runtime's did before its spinning was turned off). Read once, when torch's
# OpenMP runtime starts, so it is set here, before anything imports torch; a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
