"""The one set of ONNX Runtime session options every session here uses (backends, export verification, folded
variants), each choice measured on SRCNN x3 (docs/measurements.md)."""
from __future__ import annotations

import onnxruntime as ort
import psutil


def physical_cores() -> int:
    return max(1, psutil.cpu_count(logical=False) or psutil.cpu_count() or 1)


def cpu_session_options(threads: int | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL   # a chain of convs: no branch parallelism to win
    so.intra_op_num_threads = int(threads or physical_cores())  # hyper-threads only add contention in GEMMs
    so.inter_op_num_threads = 1
    so.enable_cpu_mem_arena = True  # freed buffers reused run after run (without it: 1.6x the time, page faults)
    # No memory pattern: it plans one block per input shape, and a tiled folder has dozens of shapes (edge tiles),
    # so the arena, which never shrinks, grew by a block per shape: ort-folded held 2.04 GB for one 0.62 GB tile
    # (srcnn-x3, 8 photos). Without it each tensor comes from the arena as asked: 0.99 GB, the same speed.
    so.enable_mem_pattern = False
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
    # idle intra-op threads sleep instead of spinning, which starved the sr stage's encode/decode threads
    # (2 cores: folder run 75 % -> 87 % of pure inference throughput; inference itself within noise)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # fatal only: ORT logs a failed load or run in colour on stderr before raising the same text, which we turn
    # into our one-line error (warnings were already off)
    so.log_severity_level = 4
    return so
