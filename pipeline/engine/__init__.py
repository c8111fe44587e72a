"""`engine` stage: ONNX -> TensorRT 11 engine with our sr plugins, plus a JSON sidecar per engine.

The plugin library is loaded through TensorRT's plugin registry, the sr function bodies are stripped
so the ONNX parser falls back to our plugins, and the network is strongly typed (TensorRT 11 always
is), so an FP16 engine comes from the FP16 ONNX graph, a BF16 one from the fp32 file converted at build time and
an INT8 one from its Q/DQ file (pipeline.engine.precision). Profiles, sidecars and staleness checks are plain
Python (tested without TensorRT); only `build_engine` and `current_environment` need it.

    environment  what engines need here (GPU, TensorRT) and the facts an engine is tied to
    profiles     min/opt/max shapes and scale range
    sidecar      the JSON next to each engine; fresh / stale / foreign
    plugins      loading our plugin library into TensorRT's registry
    precision    the graph an engine of each precision is built from
    workspace    the least --workspace our DeformConv2d layers need for a profile
    build        ONNX -> engine, and the cached-engine policy
"""
from pipeline.engine.build import build_engine, ensure_engine
from pipeline.engine.environment import (
                                      INSTALL_HINT,
                                      current_environment,
                                      tensorrt_problem,
)
from pipeline.engine.plugins import load_plugins
from pipeline.engine.precision import DERIVED, ENGINE_PRECISIONS, engine_precision, source_precision
from pipeline.engine.profiles import (
                                      Profile,
                                      default_profile,
                                      profile_for_input,
                                      profiles_from_config,
                                      validate_profile,
)
from pipeline.engine.sidecar import (
                                      ENV_KEYS,
                                      SIDECAR_VERSION,
                                      check_engine,
                                      make_sidecar,
                                      plan_engine,
                                      read_sidecar,
                                      sidecar_path,
                                      sidecar_problems,
                                      sidecar_profiles,
                                      sidecar_tf32,
)
from pipeline.engine.workspace import check_workspace, min_workspace_bytes

__all__ = ["DERIVED", "ENGINE_PRECISIONS", "ENV_KEYS", "INSTALL_HINT", "SIDECAR_VERSION", "Profile", "build_engine",
           "check_engine", "check_workspace", "current_environment", "default_profile", "engine_precision",
           "ensure_engine", "load_plugins", "make_sidecar", "min_workspace_bytes", "plan_engine", "profile_for_input",
           "profiles_from_config", "read_sidecar", "sidecar_path", "sidecar_problems", "sidecar_profiles",
           "sidecar_tf32", "source_precision", "tensorrt_problem", "validate_profile"]
