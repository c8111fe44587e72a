"""A near-free x3 model for measuring the sr stage's own CPU cost: `pipeline.bench.near_free:nearest_x3`
(the `--model package.module:factory` contract, docs/own-model.md) is nearest-neighbour upsampling,
so a folder run's CPU time is almost all decode, conversion, copies and encode."""
from __future__ import annotations

from torch import nn


class NearestX3(nn.Module):
    scale = 3
    architecture = "nearest-x3"

    def forward(self, x):
        return nn.functional.interpolate(x, scale_factor=3, mode="nearest")


def nearest_x3() -> NearestX3:
    return NearestX3()
