"""Reading a torch.save file safely: weights_only (no pickled code ever runs), torch's warnings silenced, every
failure one WeightsError line about the user's file. Used for --weights (models.registry) and for a user's
checkpoint (models.external.checkpoint) alike."""
from __future__ import annotations

import pickle
import warnings
import zipfile
from pathlib import Path

import torch

from models.spec import WeightsError


def _unreadable(path: Path, error: Exception) -> WeightsError:
    """torch.load's failure as one line about the user's file (torch's own text is a paragraph or an errno)."""
    with open(path, "rb") as f:
        is_zip_header = f.read(4) == b"PK\x03\x04"  # torch.save writes a zip archive
    if is_zip_header and not zipfile.is_zipfile(path):
        return WeightsError(f"{path} is truncated or corrupt (an incomplete PyTorch checkpoint); save or copy it again")
    if isinstance(error, pickle.UnpicklingError) and "weights only load failed" in str(error).lower():
        return WeightsError(f"refusing {path}: it is not a PyTorch checkpoint (state dict) but pickles code or objects "
                            "other than tensors (a whole model?), never unpickled here; save model.state_dict() "
                            "or .safetensors instead")
    if is_zip_header:
        return WeightsError(f"{path} is truncated or corrupt ({type(error).__name__})")
    return WeightsError(f"{path} is not a PyTorch checkpoint (state dict); expected a file written by "
                        "torch.save(model.state_dict(), ...)")


def read_checkpoint(path: Path) -> dict:
    """The object in a torch.save file, loaded with weights_only (no pickled code ever runs) and torch's warnings
    silenced: our one line is the message. Used for --weights and for a user's checkpoint (--model FILE.pth) alike."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the weights-only unpickler's protocol chatter
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, pickle error, not a torch file at all
        raise _unreadable(path, e) from None
    if not isinstance(obj, dict):
        raise WeightsError(f"{path} holds a {type(obj).__name__}, expected a state dict")
    return obj


def read_safetensors(path: Path) -> dict:
    """The tensors of a .safetensors file (no pickle at all: nothing in it can run); WeightsError naming the file when
    it is truncated or damaged. safetensors is imported here, on use: a GPU box's bare Python may lack it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        text = str(e).strip()
        raise WeightsError(f"cannot read checkpoint {path}: {text.splitlines()[0] if text else type(e).__name__}") \
            from None
