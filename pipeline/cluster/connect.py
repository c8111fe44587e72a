"""Starting or joining the Ray cluster a folder run uses, and what it offers."""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from pipeline.cluster.ray_log import StderrFilter
from pipeline.errors import PipelineError, first_line, install_command

LOCAL = "local"        # `--ray` with no address: a cluster of this machine only
# After ray.shutdown(): how long the local cluster's processes get to exit before they are killed. They are gone
# within about a second normally; one actor worker outlived a test's cluster, orphaned, ignoring SIGTERM, with 1 GB.
REAP_GRACE_S = 3.0
LOOPBACK = "127.0.0.1"
_filter: StderrFilter | None = None


@dataclass(frozen=True)
class Cluster:
    address: str
    cpus: float
    gpus: float
    started_here: bool


def import_ray():
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise PipelineError(f"--ray needs Ray with Ray Data: {install_command('cluster')} ({first_line(e)})") from None
    return ray


def connect(address: str, *, num_cpus: int | None = None) -> Cluster:
    """LOCAL: start a one-machine cluster on the loopback interface (no dashboard); 'auto' or ray://host:port:
    join that cluster. Logs from the workers stay in Ray's session folder, not on the driver's terminal."""
    global _filter
    ray = import_ray()
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "configure_logging": True}
    _filter = _filter or StderrFilter()  # Ray's C++ log lines off the terminal until disconnect()
    try:
        if address == LOCAL:
            ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address=LOOPBACK, **quiet)
        else:
            ray.init(address=address, **quiet)
    except Exception as e:  # ConnectionError, RuntimeError, ValueError: Ray's own messages are one line enough
        disconnect()
        raise PipelineError(f"cannot {'start a local' if address == LOCAL else 'join the'} Ray cluster"
                            f"{'' if address == LOCAL else f' at {address}'}: {first_line(e)}") from None
    res = ray.cluster_resources()
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False      # the driver draws its own bar, in images
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return Cluster(address, float(res.get("CPU", 0)), float(res.get("GPU", 0)), address == LOCAL)


def ray_descendants() -> list:
    """This process's descendants that are Ray's (a local cluster's GCS, raylet, agents and workers), by command
    line."""
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for p in kids:
        with contextlib.suppress(psutil.Error):
            if "ray" in " ".join(p.cmdline()).lower():
                found.append(p)
    return found


def reap(processes: list, grace: float = REAP_GRACE_S) -> list:
    """Wait up to `grace` seconds for `processes` to exit, then SIGKILL those left; returns the ones killed."""
    import psutil

    _, alive = psutil.wait_procs(processes, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    return alive


def disconnect() -> None:
    """Leave the cluster; a local one is stopped with it, every process of it (reap)."""
    global _filter
    import ray

    if ray.is_initialized():
        ours = ray_descendants()  # a local cluster's processes; none when this driver joined one elsewhere
        ray.shutdown()
        reap(ours)
    if _filter is not None:
        _filter.close()
        _filter = None
