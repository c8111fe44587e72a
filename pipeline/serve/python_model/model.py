"""Triton Python-backend adapter of the `sr` model: tensors in, pipeline.serve.sr_service, tensors out.

Runs in Triton's Python stub with the environment the config names (EXECUTION_ENV_PATH): numpy<2, ONNX
Runtime, OpenCV and the srdeploy checkout on its path (`make triton-env`). Parameters (config.pbtxt):
model_file (relative to this model's folder), backend (ort, ort-cpu, ort-cuda, trt), threads, tile."""
import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from pipeline.serve.sr_service import SrService
from pipeline.serve.tensors import INPUTS


def _tensors(request) -> dict:
    tensors = {}
    for name in INPUTS:
        t = pb_utils.get_input_tensor_by_name(request, name)
        if t is not None:
            tensors[name] = t.as_numpy()
    return tensors


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        model_dir = Path(args["model_repository"])
        threads = int(params["threads"]) if params.get("threads") else None
        tile = int(params["tile"]) if params.get("tile") else None
        gpu = args.get("model_instance_kind") == "GPU"  # KIND_GPU instances run on the device Triton names
        self.service = SrService(model_dir / params["model_file"], params.get("backend") or "ort",
                                 max_batch=int(config.get("max_batch_size") or 1), threads=threads, tile=tile,
                                 device=int(args["model_instance_device_id"]) if gpu else None)

    def execute(self, requests):
        decoded = []
        for request in requests:
            try:
                decoded.append(_tensors(request))
            except Exception as e:  # this request fails alone (SrService.run says why without server paths)
                decoded.append(e)
        responses = []
        for result in self.service.run(decoded):
            if isinstance(result, str):
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(result)))
            else:
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(k, np.ascontiguousarray(v)) for k, v in result.items()]))
        return responses

    def finalize(self):
        self.service = None
