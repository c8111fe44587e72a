"""Optimisation profiles: min/opt/max batch, input size and scale range (plain Python, no TensorRT)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from models.spec import output_size
from pipeline.errors import PipelineError


def _triple(value, kind=int, what="value") -> tuple:
    if isinstance(value, str):
        parts = [p for p in value.replace(" ", "").split(",") if p]
    else:
        parts = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        vals = [kind(p) for p in parts]
    except (TypeError, ValueError):
        raise PipelineError(f"{what}: expected MIN,OPT,MAX numbers, got {value!r}") from None
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) != 3:
        raise PipelineError(f"{what}: expected MIN,OPT,MAX (3 values), got {value!r}")
    return tuple(vals)


def _side_within(max_in: int, max_out: int, scale: float) -> int:
    """The largest input side <= max_in whose output (models.spec.output_size) at `scale` is <= max_out."""
    side = min(max_in, int((max_out + 1) / scale) + 1)
    while side > 0 and output_size(side, side, scale)[0] > max_out:
        side -= 1
    return side


@dataclass(frozen=True)
class Profile:
    """One optimisation profile: min/opt/max of batch, input height and width, and the scale range that
    the run-time `size` shape tensor may take (sizes derived with models.registry.output_size)."""

    batch: tuple[int, int, int] = (1, 1, 4)
    height: tuple[int, int, int] = (8, 256, 512)
    width: tuple[int, int, int] = (8, 256, 512)
    scale: tuple[float, float, float] = (2.0, 3.0, 4.0)

    def input_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return tuple((self.batch[i], 3, self.height[i], self.width[i]) for i in range(3))

    def size_values(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """min/opt/max values of the int64 [2] size input (H_out, W_out)."""
        return tuple(output_size(self.height[i], self.width[i], self.scale[i]) for i in range(3))

    def max_input_at(self, scale: float) -> tuple[int, int]:
        """Largest input (H, W) this profile admits at `scale`: its max input, and its max output (the `size`
        tensor's bound, which a scale above the profile's range reaches first) over the scale; 0 where none fits."""
        out_h, out_w = self.size_values()[2]
        return _side_within(self.height[2], out_h, scale), _side_within(self.width[2], out_w, scale)

    def to_dict(self) -> dict:
        d = {k: list(v) for k, v in asdict(self).items()}
        d["size"] = [list(s) for s in self.size_values()]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Profile:
        unknown = set(d) - {"batch", "height", "width", "scale", "size"}
        if unknown:
            raise PipelineError(f"profile: unknown keys {sorted(unknown)} (allowed: batch, height, width, scale)")
        default = cls()
        return cls(batch=_triple(d.get("batch", default.batch), int, "batch"),
                   height=_triple(d.get("height", default.height), int, "height"),
                   width=_triple(d.get("width", default.width), int, "width"),
                   scale=_triple(d.get("scale", default.scale), float, "scale"))


def default_profile(spec) -> Profile:
    """Default profile for a model: x2..x4 (its own factor for a static model) on inputs up to 512x512
    (bigger images are tiled by the sr stage), batch up to 4."""
    lo, hi = spec.scale_range
    if not spec.dynamic_scale:
        return Profile(scale=(lo, lo, lo))
    smin, smax = max(lo, 2.0), min(hi, 4.0)
    sopt = min(max(spec.default_scale, smin), smax)
    return Profile(scale=(smin, sopt, smax))


def validate_profile(profile: Profile, spec) -> Profile:
    """Raise PipelineError (one line) if the profile is unordered, empty or outside the model's scale range."""
    for what in ("batch", "height", "width", "scale"):
        lo, opt, hi = getattr(profile, what)
        if not (lo <= opt <= hi):
            raise PipelineError(f"profile {what}: need MIN <= OPT <= MAX, got {lo:g},{opt:g},{hi:g}")
        if lo < 1 or (what != "scale" and any(int(v) != v for v in (lo, opt, hi))):
            raise PipelineError(f"profile {what}: values must be integers >= 1, got {lo:g},{opt:g},{hi:g}")
    for s in profile.scale:
        try:
            spec.check_scale(s)
        except ValueError as e:
            raise PipelineError(f"profile scale: {e}") from None
    if not spec.dynamic_scale and len(set(profile.scale)) != 1:
        raise PipelineError(f"profile scale: model '{spec.name}' has a fixed factor; use {spec.default_scale:g} only")
    out_max = profile.size_values()[2]
    if out_max[0] * out_max[1] * profile.batch[2] > 2**31 - 1:
        raise PipelineError(f"profile: max output {profile.batch[2]}x3x{out_max[0]}x{out_max[1]} "
                            "is too large for one engine")
    return profile


def profiles_from_config(path: Path, spec) -> list[Profile]:
    """A JSON config: {"profiles": [{"batch": [1,1,4], "height": [8,256,512], "width": ..., "scale": [2,3,4]}]}
    (or a single profile object, or a list). Values may be 'MIN,OPT,MAX' strings."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise PipelineError(f"cannot read profile config {path}: {e.strerror}") from None
    except ValueError as e:
        raise PipelineError(f"profile config {path} is not valid JSON: {e}") from None
    if isinstance(data, dict) and "profiles" in data:
        data = data["profiles"]
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(p, dict) for p in items):
        raise PipelineError(f"profile config {path}: expected a profile object or a list of them")
    return [validate_profile(Profile.from_dict(p), spec) for p in items]


def _limits(p: Profile) -> str:
    (lo_h, lo_w), _, (hi_h, hi_w) = p.size_values()
    return (f"batch {p.batch[0]}-{p.batch[2]}, input {p.height[0]}-{p.height[2]} x {p.width[0]}-{p.width[2]}, "
            f"output {lo_h}-{hi_h} x {lo_w}-{hi_w}")


def profile_for_input(profiles: list[Profile], n: int, h: int, w: int, out_h: int, out_w: int) -> int:
    """Index of the first profile that admits this batch, or PipelineError naming the limits."""
    for i, p in enumerate(profiles):
        (smin_h, smin_w), _, (smax_h, smax_w) = p.size_values()
        if (p.batch[0] <= n <= p.batch[2] and p.height[0] <= h <= p.height[2] and p.width[0] <= w <= p.width[2]
                and smin_h <= out_h <= smax_h and smin_w <= out_w <= smax_w):
            return i
    limits = "; ".join(_limits(p) for p in profiles)
    raise PipelineError(f"input {n}x3x{h}x{w} -> {out_h}x{out_w} is outside the engine's profiles ({limits}); "
                        "use tiling or rebuild the engine with a wider profile")

