"""Reading an exported ONNX file and the metadata pipeline.export wrote into it (model, scale contract, precision,
folded variants, reference outputs), so a runtime can use the file without the model registry or PyTorch.
Which model a file holds is pipeline.artifacts.identity's answer (from the metadata read here)."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import onnx

from models.spec import MODELS, ModelSpec, file_sha256
from pipeline.artifacts.confine import inside_problem, regular_file_problem, sibling
from pipeline.errors import PipelineError, first_line

# Metadata keys naming sibling files: folded variants ("2:F.folded-x2.onnx,3:...") and the reference outputs.
FOLDED_KEY = "folded_variants"
FOLDED_SCALE_KEY = "folded_scale"  # a folded file's own metadata: the scale it is exact at
FOLDED_SHA_KEY = "folded_sha256"  # "2:HEX,3:HEX": each folded variant's SHA-256, checked before it runs
REFERENCE_KEY = "reference"
REFERENCE_SHA_KEY = "reference_sha256"


class OnnxFile(os.PathLike):
    """An ONNX file opened once for a run (check_onnx_file): checked, its graph parsed without external data, its
    metadata read. Handed down to every layer that asks which model it holds or what precision it is (identity,
    backends, reports), so none parses it again; anything that needs only the path uses it as one (os.fspath,
    str, and Path's attributes: .name, .parent, .with_suffix ...)."""

    def __init__(self, path: Path, model, meta: dict[str, str]):
        self.path, self.model, self.meta = Path(path), model, meta

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"OnnxFile({str(self.path)!r})"

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("path", "model", "meta"):  # copy/pickle probe before __init__
            raise AttributeError(name)
        return getattr(self.path, name)


def path_or_file(onnx) -> Path | OnnxFile | None:
    """A file argument kept as it is when already opened, else as a Path (what the backends store)."""
    return onnx if onnx is None or isinstance(onnx, OnnxFile) else Path(onnx)


def load_onnx(path: Path | OnnxFile, *, external_data: bool = True):
    """(ModelProto, metadata dict); an unreadable file is a one-line PipelineError. An opened file gives its graph
    without a second parse when external data is not needed."""
    if isinstance(path, OnnxFile) and not external_data:
        return path.model, path.meta
    try:
        model = onnx.load(str(path), load_external_data=external_data)
    except Exception as e:  # protobuf decode errors, truncated files, missing external data
        raise PipelineError(f"cannot read ONNX file {path}: {first_line(e)}") from None
    return model, {p.key: p.value for p in model.metadata_props}


def onnx_metadata(path: Path | OnnxFile) -> dict[str, str]:
    if isinstance(path, OnnxFile):
        return path.meta
    path = Path(path)
    problem = regular_file_problem(path)  # a FIFO, folder or /dev/zero is named for what it is (as --onnx does)
    if problem == "does not exist":
        raise PipelineError(f"ONNX file not found: {path}")
    if problem:
        raise PipelineError(f"ONNX file {path} {problem}")
    return load_onnx(path, external_data=False)[1]


def check_onnx_precision(path: Path, precision: str) -> dict[str, str]:
    """Refuse an ONNX file exported at another precision (the model it holds: pipeline.artifacts.identity)."""
    meta = onnx_metadata(path)
    if meta.get("precision") and meta["precision"] != precision:
        raise PipelineError(f"{path} is a {meta['precision']} graph but precision {precision} was requested")
    return meta


# The metadata fields that make a model's scale contract (what a runtime does with the file).
CONTRACT_KEYS = ("default_scale", "scale_min", "scale_max", "dynamic_scale")


@functools.lru_cache(maxsize=16)
def _sha_of(path: str, mtime_ns: int, size: int) -> str:
    return file_sha256(Path(path))


def _shipped_sha(spec: ModelSpec) -> str | None:
    try:
        st = spec.weights_path.stat()
    except OSError:
        return None
    return _sha_of(str(spec.weights_path), st.st_mtime_ns, st.st_size)


def registered_name_problem(meta: dict[str, str]) -> str | None:
    """Why the registered model a file's metadata names is not the one it holds, or None: its weights hash is
    not that model's shipped weights AND its own scale contract is not that model's (a user's own weights
    exported under the name keep the contract, so they pass)."""
    name, sha = meta.get("model"), meta.get("weights_sha256")
    spec = MODELS.get(name) if isinstance(name, str) else None
    if spec is None or not sha or sha == _shipped_sha(spec):
        return None
    own = {k: meta[k] for k in CONTRACT_KEYS if k in meta}
    registered = spec.to_metadata()
    if not own or all(registered[k] == v for k, v in own.items()):
        return None
    whose = next((s.name for s in MODELS.values() if _shipped_sha(s) == sha), None)
    weights = f"{whose}'s weights" if whose else f"weights with sha256 {sha[:12]}"
    return (f"its metadata names model '{name}', but it holds {weights} and a scale contract "
            f"({', '.join(f'{k} {v}' for k, v in own.items())}) that is not {name}'s; export it again")


def folded_variants(path: Path, meta: dict[str, str] | None = None) -> dict[int, Path]:
    """Integer scale -> folded ONNX file exported beside `path` (empty when the file carries none). Each is a plain
    name in `path`'s folder (pipeline.artifacts.confine.sibling); a missing one is returned for the caller to report,
    anything else wrong is one PipelineError line."""
    meta = onnx_metadata(path) if meta is None else meta
    out = {}
    for item in filter(None, meta.get(FOLDED_KEY, "").split(",")):
        scale, _, name = item.partition(":")
        try:
            k = int(scale)
        except ValueError:
            k = 0
        if k < 2 or not name:
            raise PipelineError(f"{path}: metadata {FOLDED_KEY} entry {item!r} is not SCALE:FILE with an integer "
                                "scale >= 2; export the file again")
        out[k] = sibling(Path(path), name, "folded variant", missing_ok=True)
    return out


def folded_problem(path: Path, variants: dict[int, Path], meta: dict[str, str] | None = None) -> str | None:
    """Why a folded variant present beside `path` is not the file exported with it (its SHA-256 differs from the
    one the main file's metadata names: truncated, replaced), or None. Files from before the SHA was kept pass."""
    meta = onnx_metadata(path) if meta is None else meta
    shas = dict(item.partition(":")[::2] for item in filter(None, meta.get(FOLDED_SHA_KEY, "").split(",")))
    for k, p in sorted(variants.items()):
        if str(k) in shas and p.is_file() and file_sha256(p) != shas[str(k)]:
            return f"the folded variant {p.name} is not the file exported with {Path(path).name} (its SHA-256 differs)"
    return None


def reference_file(path: Path, meta: dict[str, str] | None = None) -> Path | None:
    """The .npz of inputs and PyTorch FP32 outputs stored at export time beside `path`, if any (a plain name in
    its folder; missing is returned for the caller to report)."""
    meta = onnx_metadata(path) if meta is None else meta
    name = meta.get(REFERENCE_KEY)
    return sibling(Path(path), name, "reference outputs", missing_ok=True) if name else None


# Largest fixed input dimension a graph may declare: beyond this no image or batch can match it (ORT itself
# indexes with 64-bit, but a 2^31 side is already 4 G pixels per row).
MAX_FIXED_DIM = 2**31 - 1


def _tensors(graph):
    """Every TensorProto of a graph: initializers and node attributes, subgraphs included."""
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield sp.values
        yield sp.indices
    for node in graph.node:
        yield from _attribute_tensors(node)


def _attribute_tensors(node):
    for a in node.attribute:
        if a.HasField("t"):
            yield a.t
        yield from a.tensors
        if a.HasField("g"):
            yield from _tensors(a.g)
        for g in a.graphs:
            yield from _tensors(g)


def _external_tensors(model):
    tensors = list(_tensors(model.graph))
    for f in model.functions:
        for node in f.node:
            tensors.extend(_attribute_tensors(node))
    return [t for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]


def external_data_files(model) -> tuple[str, ...]:
    """The external data files a (checked) model names, relative to its folder, each once."""
    names = ({e.key: e.value for e in t.external_data}.get("location", "") for t in _external_tensors(model))
    return tuple(dict.fromkeys(n for n in names if n))


def _external_data_problem(path: Path, model) -> str | None:
    """Why an initializer's external data is not a regular file inside the model's folder, or None."""
    for t in _external_tensors(model):
        info = {e.key: e.value for e in t.external_data}
        where = info.get("location", "")
        problem = "names no file" if not where else inside_problem(Path(where), path.parent)
        if problem is None:
            problem = regular_file_problem(path.parent / where)
        if problem is None:
            try:
                end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
            except ValueError:
                return f"external data of initializer '{t.name}' has a non-integer offset or length"
            if end > os.path.getsize(path.parent / where):
                problem = "is shorter than the offset and length it is read at"
        if problem:
            return f"external data of initializer '{t.name}' ({where}) {problem}"
    return None


IMAGE_INPUT = "input"  # every backend feeds the image by this name (the export's contract; docs/export.md)


def _input_problem(model) -> str | None:
    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    if IMAGE_INPUT not in names:  # refused here, not by each backend in its own way (openvino: per image)
        return (f"has no image input named '{IMAGE_INPUT}' (its inputs: {', '.join(map(repr, names)) or 'none'}); "
                f"the pipeline feeds the NCHW float RGB image as '{IMAGE_INPUT}', as `python -m pipeline export` "
                "names it")
    for inp in model.graph.input:
        dims = inp.type.tensor_type.shape.dim
        for d in dims:
            if d.HasField("dim_value") and not 0 < d.dim_value <= MAX_FIXED_DIM:
                return (f"input '{inp.name}' declares dimension {d.dim_value} (fixed dimensions must be 1 to "
                        f"{MAX_FIXED_DIM})")
    return None


def check_onnx_file(path: str | Path | OnnxFile, flag: str = "--onnx") -> OnnxFile:
    """The one check every command that takes an ONNX file runs before any work: a regular, non-empty file that
    parses, whose external data stays in its folder, whose sibling files (folded variants, reference) are plain
    names there, and which passes the ONNX checker. A bad file is one PipelineError line. Returns the file opened
    (parsed once); an already opened one is returned as it is."""
    if isinstance(path, OnnxFile):
        return path
    path = Path(path)
    problem = regular_file_problem(path)
    if problem == "does not exist":
        raise PipelineError(f"ONNX file not found: {path}")
    if problem:
        raise PipelineError(f"{flag} {path} {problem}")
    st = path.stat()
    if st.st_size == 0:
        raise PipelineError(f"{flag} {path} is empty (0 bytes); export it again with `python -m pipeline export`")
    model, meta = load_onnx(path, external_data=False)
    _check_contents(path, model, meta)
    return OnnxFile(path, model, meta)


def _check_contents(path: Path, model, meta: dict[str, str]) -> None:
    """check_onnx_file's reading part, on the parsed graph (the checker reads the file by path: external data is
    looked up beside it)."""
    problem = _external_data_problem(path, model) or _input_problem(model)
    if problem:
        raise PipelineError(f"{path}: {problem}")
    if not model.graph.node:
        raise PipelineError(f"{path} holds no graph (no nodes); is it an ONNX model file?")
    folded_variants(path, meta)
    reference_file(path, meta)
    try:
        onnx.checker.check_model(str(path))  # by path: external data is looked up beside the file
    except Exception as e:  # onnx's ValidationError and C++ checker errors
        raise PipelineError(f"{path} is not a valid ONNX model: {first_line(e)}") from None
