"""`package.module:factory` -> a user's own nn.Module and its scale.

The contract (README "Your own model"): `factory()` is called with no arguments and returns either
`(module, scale)` or a module with an integer `scale` attribute. The module takes NCHW float RGB in [0, 1]
(any height/width, or a multiple of its optional `align` attribute, which we pad to) and returns
NCHW float at `scale` times the size; it loads its own weights. Optional attributes: `supports_half`
(default True), `architecture` (a name for reports; default the class name).
"""
from __future__ import annotations

import importlib
import os
import sys

from torch import nn

from models.spec import WeightsError


def build(ref: str) -> tuple[nn.Module, int]:
    """Import and call the factory; WeightsError naming `ref` when it is missing or breaks the contract."""
    module_name, _, attr = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        cwd = os.getcwd()
        searched = any(os.path.abspath(p or os.curdir) == cwd for p in sys.path)
        where = (f"searched the current folder {cwd}, PYTHONPATH and installed packages" if searched else
                 f"the current folder {cwd} is not on the search path; add its parent to PYTHONPATH")
        raise WeightsError(f"model factory {ref}: cannot import it ({e}; {where})") from None
    try:
        made = fn()
    except Exception as e:  # noqa: BLE001 - user code: report, do not trace back
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise WeightsError(f"model factory {ref} failed: {first}") from None
    net, scale = made if isinstance(made, tuple) and len(made) == 2 else (made, getattr(made, "scale", None))
    if not isinstance(net, nn.Module):
        raise WeightsError(f"model factory {ref} returned {type(net).__name__}, expected an nn.Module "
                           "or (nn.Module, scale)")
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise WeightsError(f"model factory {ref}: declare the scale as an integer >= 1 "
                           "(return (module, scale) or set module.scale)")
    return net, scale
