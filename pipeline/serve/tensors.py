"""The `sr` Triton model's request interface, shared by the model (sr_service), its config (python_repo) and the
client (`sr --triton`): tensor names, types and the array layout. numpy only, so the client stays light.

  inputs  image_bytes  BYTES [1]       an encoded image (PNG/JPEG/WebP/TIFF/BMP), or
          pixels_u8    UINT8 [H,W,C]   / pixels_u16 UINT16 [H,W,C]: RGB(A) or gray (C = 1, 3, 4) pixels
          scale        FP64 [1]        optional; the model's default scale, within its range
          format       BYTES [1]       optional: png, jpg, webp, tiff, bmp (encoded answer) or array (default)
          quality      INT32 [1]       optional JPEG/WebP quality (default 95)
  outputs output_bytes BYTES [1]       the encoded result (format != array)
          output_u8 / output_u16       the result's pixels, RGB(A)/gray HxWxC, the input's bit depth (array)
          info         BYTES [1]       JSON: in/out size, mode, bit depth, tiles, notes, backend, timings
Every input and output also has Triton's leading batch dimension."""
from __future__ import annotations

import numpy as np

ARRAY = "array"   # the `format` that answers pixels instead of an encoded file
IMAGE_BYTES, SCALE, FORMAT, QUALITY = "image_bytes", "scale", "format", "quality"
OUTPUT_BYTES, OUTPUT_U8, OUTPUT_U16, INFO = "output_bytes", "output_u8", "output_u16", "info"
ARRAY_INPUTS = {"pixels_u8": np.uint8, "pixels_u16": np.uint16}
IMAGE_INPUTS = (IMAGE_BYTES, *ARRAY_INPUTS)
# name -> (Triton data type, dims without the batch dimension)
INPUTS = {IMAGE_BYTES: ("TYPE_STRING", [1]), "pixels_u8": ("TYPE_UINT8", [-1, -1, -1]),
          "pixels_u16": ("TYPE_UINT16", [-1, -1, -1]), SCALE: ("TYPE_FP64", [1]), FORMAT: ("TYPE_STRING", [1]),
          QUALITY: ("TYPE_INT32", [1])}
OUTPUTS = {OUTPUT_BYTES: ("TYPE_STRING", [1]), OUTPUT_U8: ("TYPE_UINT8", [-1, -1, -1]),
           OUTPUT_U16: ("TYPE_UINT16", [-1, -1, -1]), INFO: ("TYPE_STRING", [1])}
_SWAP = [2, 1, 0, 3]  # BGR(A) <-> RGB(A)


def array_from_output(out: np.ndarray) -> np.ndarray:
    """An sr-stage output buffer (BGR(A) or HxW, what imageio.encode takes) -> RGB(A)/gray HxWxC."""
    if out.ndim == 2:
        return out[:, :, None]
    return np.ascontiguousarray(out[:, :, _SWAP[:out.shape[2]]])


def output_from_array(a: np.ndarray) -> np.ndarray:
    """The inverse of array_from_output."""
    if a.shape[2] == 1:
        return a[:, :, 0]
    return np.ascontiguousarray(a[:, :, _SWAP[:a.shape[2]]])
