"""Scale-out of the sr stage's folder runs onto a Ray cluster (`python -m pipeline sr IN OUT --ray [ADDRESS]`).

    connect    start a local cluster (127.0.0.1) or join one; what it offers (CPUs, GPUs)
    artifacts  the files the driver's Choice names, shared once; actors put the same bytes in their cache
    unit       the one adapter onto the backends (load the Choice) and pipeline.sr's per-image unit of work
    actor      the Ray Data actor: backend loaded once, images in, one record per image out
    spool      the merged --summary, streamed to disk so the driver never holds every record
    runner     the driver: list files, stream them through the actor pool, progress bar, summary, exit code

Ray (with Ray Data) is the optional `[cluster]` extra: it is imported only when --ray is given.
"""
