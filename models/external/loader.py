"""Loading a user's model (torch side): checkpoint through spandrel, or a factory; spec facts; receptive field."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from models.spec import WeightsError, file_sha256

from . import checkpoint, factory, receptive
from .modules import AnyScale, PaddedNet, make_traceable
from .spec import RGB, ExternalSpec, is_factory


@dataclass
class External:
    spec: ExternalSpec
    module: PaddedNet  # NCHW [0, 1] -> NCHW at spec.scale, eval mode, CPU

    def module_for(self, scale: float | None) -> nn.Module:
        """The net itself at its own factor (or scale None); otherwise AnyScale(net): forward(x, size)."""
        if scale is None or float(scale) == self.spec.scale:
            return self.module
        return AnyScale(self.module, self.spec.scale).eval()


def factory_sha256(ref: str, net: nn.Module) -> str:
    """A factory model's weights identity: the factory reference, then every state-dict tensor in key order (name,
    dtype, shape, bytes). Stable across runs and processes; changes exactly when the weights or the name do."""
    h = hashlib.sha256(ref.encode())
    for k, v in sorted(net.state_dict().items()):
        h.update(k.encode())
        h.update(f"{v.dtype}{tuple(v.shape)}".encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _from_checkpoint(path: Path) -> tuple[dict, nn.Module]:
    desc = checkpoint.load_descriptor(path)
    req = desc.size_requirements
    if req.square:
        raise WeightsError(f"checkpoint {path}: {desc.architecture.id} needs square inputs, which the pipeline "
                           "does not provide")
    window = getattr(desc.model, "window_size", 1)
    align = math.lcm(max(1, req.multiple_of), window if isinstance(window, int) and window > 0 else 1)
    facts = dict(name=path.name, source=str(path.resolve()), architecture=desc.architecture.id, scale=desc.scale,
                 sha256=file_sha256(path), input_channels=desc.input_channels,
                 output_channels=desc.output_channels, min_size=max(1, req.minimum), align=align,
                 supports_half=desc.supports_half, supports_bfloat16=desc.supports_bfloat16)
    return facts, desc.model


def _from_factory(ref: str) -> tuple[dict, nn.Module]:
    net, scale = factory.build(ref)
    align = getattr(net, "align", 1)
    facts = dict(name=ref, source=ref, architecture=f"factory:{type(net).__name__}", scale=scale,
                 sha256=factory_sha256(ref, net), input_channels=getattr(net, "in_channels", RGB),
                 output_channels=getattr(net, "out_channels", RGB), min_size=1,
                 align=align if isinstance(align, int) and align > 0 else 1,
                 supports_half=bool(getattr(net, "supports_half", True)), supports_bfloat16=True)
    return facts, net


def load(value: str | Path, *, measure: bool = True) -> External:
    """Resolve a checkpoint path or `package.module:factory` to its spec and module (CPU, eval, float32).

    measure=False skips the receptive-field probe (spec.receptive_field is then None).
    """
    value = str(value)
    facts, net = _from_factory(value) if is_factory(value) else _from_checkpoint(Path(value))
    if facts["input_channels"] != RGB or facts["output_channels"] != RGB:
        raise WeightsError(f"model {value} maps {facts['input_channels']} to {facts['output_channels']} channels; "
                           f"the pipeline runs RGB models ({RGB} to {RGB})")
    module = PaddedNet(make_traceable(net.float().eval()), facts["scale"], facts["align"]).eval()
    rf = None
    if measure:
        try:
            rf = receptive.measure(module, facts["scale"], RGB, facts["align"], side=max(48, facts["min_size"]))
        except Exception as e:  # noqa: BLE001 - user nets: a forward failure is their model's fault, one line
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise WeightsError(f"model {value} does not run on a 1x3x48x48 input: {first}") from None
    return External(ExternalSpec(**facts, receptive_field=rf), module)
