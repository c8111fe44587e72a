"""PyTorch super-resolution nets, their registry and their shipped weights."""
from .registry import MODELS, ModelSpec, WeightsError, get_spec, load_model, output_size

__all__ = ["MODELS", "ModelSpec", "WeightsError", "get_spec", "load_model", "output_size"]
