"""Triton Python-backend adapter of the `sr` model: tensors in, pipeline.serve.sr_service, tensors out.

Runs in Triton's Python stub with the environment the config names (EXECUTION_ENV_PATH): numpy<2, ONNX
Runtime, OpenCV and the srdeploy checkout on its path (`make triton-env`). Parameters (config.pbtxt, named in
pipeline.serve.protocol): the model file (relative to this model's folder) and the backend (ort, ort-cpu,
ort-cuda, trt). Tiles are sized as a local run's default, so served outputs equal a local run's."""
import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from pipeline.serve import protocol
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
        gpu = args.get("model_instance_kind") == "GPU"  # KIND_GPU instances run on the device Triton names
        self.service = SrService(model_dir / params[protocol.MODEL_FILE], params.get(protocol.BACKEND) or "ort",
                                 max_batch=int(config.get("max_batch_size") or 1),
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
