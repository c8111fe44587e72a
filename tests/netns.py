"""Private network namespaces for tests that start servers (Ray, Triton): they bind 127.0.0.1 inside one and
contact nothing else."""
from __future__ import annotations

import shutil
import subprocess


def namespace_problem(tools: tuple[str, ...] = ("unshare", "ip")) -> str | None:
    """Why a private network namespace with loopback up cannot be made here (None: it can)."""
    for tool in tools:
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux, iproute2) for a private network namespace"
    try:
        p = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot make a private network namespace: {e}"
    if p.returncode != 0:
        return f"cannot make a private network namespace (needs root or user namespaces): {p.stderr.strip()}"
    return None
