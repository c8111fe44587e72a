"""Checkpoint files -> a spandrel model descriptor, without ever unpickling code.

We read the file ourselves (`torch.load(weights_only=True)`, which refuses any pickle that would import or
call something, or `safetensors`) and hand spandrel only the state dict: spandrel's own file loader would
`torch.jit.load` a `.pt` file. Every failure is a WeightsError whose one line names the file.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import spandrel

from models.checkpoint_io import read_checkpoint, read_safetensors
from models.spec import MODELS, WeightsError

from .spec import SUFFIXES


def architectures() -> list[str]:
    """Ids of the architectures spandrel recognises from a state dict (e.g. 'Compact', 'ESRGAN', 'SwinIR')."""
    return sorted(a.architecture.id for a in spandrel.MAIN_REGISTRY.architectures())


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def read_state_dict(path: Path) -> dict:
    """The tensors in a checkpoint file; WeightsError naming the file when it is missing, truncated or unsafe."""
    if path.suffix.lower() not in SUFFIXES:
        raise WeightsError(f"{path}: not a checkpoint ({', '.join(SUFFIXES)})")
    if not path.is_file():
        raise WeightsError(f"checkpoint not found: {path}")
    if path.suffix.lower() == ".safetensors":
        return read_safetensors(path)
    return read_checkpoint(path)  # the same reading, and the same one-line messages, as --weights


def registered_twins(state: dict) -> list[str]:
    """The registered models whose layers have exactly these names and shapes (srcnn and srcnn-x3 share theirs)."""
    twins = []
    for spec in MODELS.values():
        own = spec.build().state_dict()
        if own.keys() == state.keys() and all(tuple(own[k].shape) == tuple(state[k].shape) for k in own):
            twins.append(spec.name)
    return twins


def load_descriptor(path: Path) -> spandrel.ImageModelDescriptor:
    """The spandrel descriptor (architecture, scale, channels, size needs, net with weights) of a checkpoint."""
    state = read_state_dict(path)
    try:
        with warnings.catch_warnings():  # e.g. torch.meshgrid's indexing notice from SwinIR's constructor
            warnings.simplefilter("ignore", UserWarning)
            desc = spandrel.MAIN_REGISTRY.load(spandrel.canonicalize_state_dict(state))
    except spandrel.UnsupportedModelError:
        twins = registered_twins(state)
        if twins:  # our own model's weights given as a checkpoint
            raise WeightsError(f"{path} holds weights of our model {' / '.join(twins)}, not a checkpoint of another "
                               f"architecture: use --model {twins[0]} --weights {path}") from None
        raise WeightsError(f"checkpoint {path}: spandrel does not recognise its architecture "
                           f"(these load: {', '.join(architectures())})") from None
    except Exception as e:  # noqa: BLE001 - a recognised family whose keys/shapes do not fit together
        raise WeightsError(f"checkpoint {path} does not load: {_first_line(e)}") from None
    if not isinstance(desc, spandrel.ImageModelDescriptor):
        raise WeightsError(f"checkpoint {path} is a {desc.purpose} model ({desc.architecture.id}), "
                           "not an image-to-image one")
    return desc
