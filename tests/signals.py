"""Children that take Ctrl-C as a user's shell hands it to them."""
from __future__ import annotations

import signal


def default_sigint() -> None:
    """A subprocess's preexec_fn: SIGINT at its default disposition in the child, whatever the test process holds. A
    Python started with SIGINT ignored keeps ignoring it (it installs its KeyboardInterrupt handler only over the
    default), and a long-lived test worker may have had it ignored by something it ran earlier: a Ctrl-C test must
    test the product, not that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
