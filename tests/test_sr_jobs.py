"""Which files the sr stage reads and where it writes them."""
import pytest

from pipeline.errors import PipelineError
from pipeline.sr.runner.jobs import discover


def _touch(root, *rels):
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")


def test_mirrored_tree_and_ignored_files(tmp_path):
    src = tmp_path / "in"
    _touch(src, "a.png", "sub/b.JPG", "sub/deep/c.tiff", "notes.txt", "sub/.x.png.123-4.part")
    found = discover(src, tmp_path / "out")
    assert [(j.rel, j.dst.relative_to(tmp_path / "out").as_posix(), j.fmt) for j in found.jobs] == [
        ("a.png", "a.png", "png"), ("sub/b.JPG", "sub/b.JPG", "jpg"), ("sub/deep/c.tiff", "sub/deep/c.tiff", "tiff")]
    assert found.ignored == ["notes.txt"]  # our own temp files are not even mentioned


def test_format_override_renames(tmp_path):
    src = tmp_path / "in"
    _touch(src, "a.png", "b.bmp")
    found = discover(src, tmp_path / "out", "jpg")
    assert [j.dst.name for j in found.jobs] == ["a.jpg", "b.jpg"] and {j.fmt for j in found.jobs} == {"jpg"}


def test_output_inside_input_is_refused(tmp_path):
    """A later run over INPUT would read the results back as inputs (issue 67: `sr small out5` upscaled out3/)."""
    src = tmp_path / "in"
    _touch(src, "a.png", "out/a.png", "keep/b.png")
    for out in (src / "out", src / "new" / "deeper"):
        with pytest.raises(PipelineError, match=r"lies inside the INPUT folder .*; choose a folder outside it"):
            discover(src, out)


def test_outputs_never_land_on_inputs(tmp_path):
    # INPUT inside OUTPUT: out/in/x/a.png would map to out/x/a.png -- another input file here.
    out = tmp_path / "out"
    src = out / "x"
    _touch(src, "x/a.png", "a.png")
    jobs = {j.rel: j for j in discover(src, out).jobs}
    assert "is an input file" in jobs["x/a.png"].problem
    assert jobs["a.png"].problem == ""


def test_collisions_flagged(tmp_path):
    src = tmp_path / "in"
    _touch(src, "a.jpg", "a.png")
    jobs = discover(src, tmp_path / "out", "png").jobs
    # both fail (neither silently wins a.png), each naming the pair
    assert [j.problem for j in jobs] == [f"a.jpg and a.png would both write {tmp_path / 'out' / 'a.png'}; rename "
                                         "one (or use another --format)"] * 2


def test_output_with_an_image_extension_we_do_not_write_is_refused(tmp_path):
    _touch(tmp_path, "p.png", "d/q.png")
    for src in (tmp_path / "p.png", tmp_path / "d"):
        with pytest.raises(PipelineError, match=r"OUTPUT .*x\.gif names a gif image, a format sr does not write"):
            discover(src, tmp_path / "out" / "x.gif")
    assert not (tmp_path / "out").exists()
    (tmp_path / "made.gif").mkdir()  # an existing folder of that name is a folder, as asked
    assert discover(tmp_path / "p.png", tmp_path / "made.gif").jobs[0].dst == tmp_path / "made.gif" / "p.png"


def test_single_file(tmp_path):
    _touch(tmp_path, "p.png")
    f = tmp_path / "p.png"
    assert discover(f, tmp_path / "o").jobs[0].dst == tmp_path / "o" / "p.png"       # new folder
    assert discover(f, tmp_path / "r.jpg").jobs[0].dst == tmp_path / "r.jpg"         # file name
    assert discover(f, tmp_path / "r.jpg").jobs[0].fmt == "jpg"
    assert discover(f, tmp_path / "o", "webp").jobs[0].dst.name == "p.webp"
    with pytest.raises(PipelineError, match="is the input file"):
        discover(f, f)
    with pytest.raises(PipelineError, match="is the input file"):
        discover(f, tmp_path)


@pytest.mark.parametrize("case", ["missing", "same", "not-image", "out-is-file"])
def test_argument_errors(tmp_path, case):
    src = tmp_path / "in"
    _touch(src, "a.png", "t.txt")
    _touch(tmp_path, "file.png")
    args = {"missing": (tmp_path / "nope", tmp_path / "o"), "same": (src, src),
            "not-image": (src / "t.txt", tmp_path / "o"), "out-is-file": (src, tmp_path / "file.png")}[case]
    with pytest.raises(PipelineError) as e:
        discover(*args)
    assert "\n" not in str(e.value)
