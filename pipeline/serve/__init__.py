"""Serving: a model repository NVIDIA Triton Inference Server loads (TensorRT plan or ONNX Runtime), the `sr`
Python-backend model beside it, and a local server to run it.

    pbtxt          protobuf text format writer for config.pbtxt (no protobuf dependency at run time)
    triton_config  the model's I/O, batching and card facts -> Triton model configuration; which backends a plain
                   model is written for (SERVED: those whose descriptor names a Triton platform)
    triton_repo    REPO/<name>/config.pbtxt + 1/model.{plan,onnx}, plugin library, server command
    python_repo    REPO/sr/: the Python-backend model's config and adapter (python_model/model.py)
    tensors        the sr model's request interface (names, types, array layout)
    sr_service     what the sr model does with requests (the sr stage's steps), without Triton
    client         `sr --triton URL`: a folder through a running server's sr model
    triton_env     the unpacked tritonserver and the sr model's Python environment (`make triton-env`)
    server         `serve`: start tritonserver, wait for readiness, stop it
"""
from pipeline.serve.triton_config import (
    SERVED,
    ModelIO,
    TensorSpec,
    io_from_onnx,
    io_from_sidecar,
    served_backend,
    triton_config,
)
from pipeline.serve.triton_repo import RepoResult, write_repository

__all__ = ["SERVED", "ModelIO", "RepoResult", "TensorSpec", "io_from_onnx", "io_from_sidecar", "served_backend",
           "triton_config", "write_repository"]
