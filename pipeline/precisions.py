"""The precisions and the artifacts they run from: one table each, read by export, the engine builder, the artifact
cache, the backends (whose descriptors say which precision each runs from which artifact), quality and the CLI.

    fp32   the reference: every other precision's loss is measured against it
    fp16   a graph precision: exported as an FP16 file; judged by `compare`'s PSNR bar
    bf16   made from the fp32 graph (OpenVINO's inference precision, torch autocast, a BF16 engine graph); may lose
           at most its budget of Y-PSNR on the held-out images, so `--precision auto` may trade for it
    int8   made from the fp32 graph's Q/DQ version (pipeline.export.quantize); the same, with a larger budget

An artifact's version is part of the name or stamp of every cached file of its kind: bump it here when its maker's
output changes, so older files are made again instead of reused (tests/test_backend_descriptors.py pins each maker's
code to its version: a code change fails it until that decision is made).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str
    onnx_type: int          # its tensors' onnx.TensorProto data type (FLOAT 1, INT8 3, FLOAT16 10, BFLOAT16 16)
    numpy: str              # its numpy dtype's name (bfloat16: ml_dtypes'); torch's dtype of the same name
    bits: int
    graph: bool             # exported as a graph of its own type; False: made from the fp32 graph
    export_tol: float | None  # a graph's export check: max |ONNX Runtime - PyTorch| on outputs in [0, 1]
    budget_db: float | None  # the most Y-PSNR it may lose against fp32 on the held-out set; None: not measured
    # the least Y-PSNR of its output against fp32's own output (fidelity) on the worst held-out image; None: no floor.
    # From measurements (docs/measurements.md, "The output check and fidelity"; the gate: docs/backends.md): about 10 dB
    # under srcnn-x3's measured fidelity (bf16 57.5-57.8 dB mean, int8 49.9; worst image 56.9-57.0 and 48.2)
    fidelity_floor_db: float | None
    peak: bool              # the roofline measures a GEMM peak of its own (else it is held to fp32's)
    # The fidelity rule's other floors (where fp32 is not above bicubic, e.g. a GAN model): the mean Y-PSNR to fp32's
    # output over the held-out images and the worst image's SSIM-Y to it. Set a few dB / a few thousandths under
    # Real-ESRGAN animevideov3's measured fidelity (docs/backends.md, "Models that do not aim at PSNR").
    fidelity_mean_floor_db: float | None = None
    fidelity_ssim_floor: float | None = None

    @property
    def half(self) -> bool:
        """A 16-bit float (fp16, bf16): a graph converted to it keeps some tensors fp32 (pipeline.export.fp16)."""
        return self.bits == 16 and self.numpy != "int16"

    @property
    def source(self) -> str:
        """The precision of the file it is made from: its own for a graph precision, else fp32."""
        return self.name if self.graph else DEFAULT


DEFAULT = "fp32"
AUTO = "auto"  # not a precision: the fastest one within its budget (pipeline.backends.select)
TABLE = (
    Precision("fp32", 1, "float32", 32, graph=True, export_tol=1e-4, budget_db=None, fidelity_floor_db=None, peak=True),
    Precision("fp16", 10, "float16", 16, graph=True, export_tol=1e-2, budget_db=None, fidelity_floor_db=45.0,
              peak=False),
    Precision("bf16", 16, "bfloat16", 16, graph=False, export_tol=None, budget_db=0.02, fidelity_floor_db=45.0,
              peak=True, fidelity_mean_floor_db=48.0, fidelity_ssim_floor=0.995),
    Precision("int8", 3, "int8", 8, graph=False, export_tol=None, budget_db=0.10, fidelity_floor_db=38.0, peak=True,
              fidelity_mean_floor_db=40.0, fidelity_ssim_floor=0.98),
)
BY_NAME = {p.name: p for p in TABLE}
NAMES = tuple(BY_NAME)                                        # what a run may ask for
GRAPH = tuple(p.name for p in TABLE if p.graph)               # ONNX files and their I/O types
DERIVED = tuple(p.name for p in TABLE if not p.graph)         # made from the fp32 graph
LOWER = tuple(p.name for p in TABLE if p.budget_db is not None)  # what `auto` may trade quality for speed with
BUDGET_DB = {p.name: p.budget_db for p in TABLE if p.budget_db is not None}
FIDELITY_FLOOR_DB = {p.name: p.fidelity_floor_db for p in TABLE if p.fidelity_floor_db is not None}
FIDELITY_MEAN_FLOOR_DB = {p.name: p.fidelity_mean_floor_db for p in TABLE if p.fidelity_mean_floor_db is not None}
FIDELITY_SSIM_FLOOR = {p.name: p.fidelity_ssim_floor for p in TABLE if p.fidelity_ssim_floor is not None}
# The gate's third test: a lower precision keeps at least this share of what the model adds over bicubic at fp32
# (held-out PSNR-Y and SSIM-Y, each, at the run's scale); where the model adds nothing there, nothing is within budget.
# An absolute budget alone let srcnn x3's int8 pass while giving back ~80 % of its SSIM-Y gain (issue 59).
GAIN_KEPT_MIN = 0.9
# The gate's rule, part of every quality record's and stored pick's key: a record or pick judged under an older rule
# is measured (and timed) again. 1: loss budget and fidelity floor; 2: and GAIN_KEPT_MIN, SSIM-Y with bicubic's scores;
# 3: where fp32 is not above bicubic, the fidelity rule (mean and worst Y-PSNR and worst SSIM-Y to fp32's output).
GATE_VERSION = 3
PEAKS = tuple(p.name for p in TABLE if p.peak)                # each a fallback for the ones after it
HALF = tuple(p.name for p in TABLE if p.half)                 # the 16-bit floats


@dataclass(frozen=True)
class Artifact:
    name: str
    version: int
    what: str


# The ONNX export's layout (part of every cached export's name), its folded siblings' too: they are exported with it.
# 2: the model spec in the metadata, reference outputs and folded variants beside the file. 3: sr::DynamicResize's
# body and the folded border strips are tile-exact. 5: the folded graphs' last conv is unpadded where the border
# strips recompute its ring. 6: the folded variants' SHA-256 in the metadata (checked before one runs).
_LAYOUT = 6
ARTIFACTS = {a.name: a for a in (
    Artifact("weights", 1, "the model's PyTorch weights, run as they are"),
    Artifact("graph", _LAYOUT, "the exported ONNX file"),
    Artifact("folded", _LAYOUT, "the exported file's folded siblings (bicubic folded into conv1, integer scales)"),
    # qdq 8: a folded SRCNN graph is quantized split per output phase (pipeline.export.phases). 9: Conv -> Relu -> Conv
    # pairs equalized, shifted convs' weights rounded against their input's covariance, 7 bits without VNNI
    Artifact("qdq", 9, "the fp32 graph's int8 Q/DQ version (pipeline.export.quantize's recipe)"),
    Artifact("bf16-graph", 2, "the fp32 graph in BF16, sr ops and Resize in FP32 (pipeline.export.fp16)"),
    # 1: the sidecar's format. Which graph a bf16/int8 engine is made from is pipeline.engine.precision's rule
    Artifact("engine", 1, "a TensorRT engine built from one of the graphs above, with its sidecar"),
)}


def version(artifact: str) -> int:
    return ARTIFACTS[artifact].version
