"""Each tutorial recipe runs end to end: export, ONNX Runtime, asserted against PyTorch.

The recipes assert internally; these tests also check the facts each `main` returns. The C++
extension of `my_add` is compiled on the first run (about 30 s) into build/recipes/my_add and
reused afterwards.
"""
from __future__ import annotations

import onnx
import pytest
import torch

from pipeline.recipes import RECIPES, load
from pipeline.recipes.__main__ import main as recipes_cli
from pipeline.recipes._common import BUILD_DIR, custom_symbolic, export_legacy


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Tiny models; the machine's 2 cores are shared with other workers.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_cli_lists_every_recipe_and_rejects_unknown_names(capsys):
    assert recipes_cli(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in RECIPES)
    assert recipes_cli(["no_such_recipe"]) == 2
    assert "unknown recipe no_such_recipe" in capsys.readouterr().err


def test_cli_runs_a_recipe_and_saves_its_models(tmp_path, capsys):
    assert recipes_cli(["helper_model", "--out", str(tmp_path)]) == 0
    assert "ok   helper_model" in capsys.readouterr().out
    edited = onnx.load(tmp_path / "linear_func_sub.onnx")
    onnx.checker.check_model(edited, full_check=True)
    assert [n.op_type for n in edited.graph.node] == ["Mul", "Sub"]
    assert edited.ir_version <= 13  # ONNX Runtime's limit


def test_each_recipe_module_runs_as_a_script_and_honours_out(tmp_path):
    # `python -m pipeline.recipes.NAME --out DIR` once ignored --out.
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "pipeline.recipes.helper_model", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "linear_func_sub.onnx").is_file()


def test_asinh_and_its_symbolic_is_undone_afterwards():
    facts = load("asinh").main()
    assert facts["ops"] == ["Asinh"] and facts["max_abs_err"] < 1e-5
    with pytest.raises(torch.onnx.errors.UnsupportedOperatorError):  # registration was removed
        export_legacy(load("asinh").Model(), (torch.rand(2),), opset_version=9)


def test_custom_symbolic_restores_an_earlier_registration():
    from torch.onnx._internal.torchscript_exporter.registration import registry

    def earlier(g, x):
        return g.op("Asinh", x)

    def temporary(g, x):
        return g.op("Asinh", x)

    torch.onnx.register_custom_op_symbolic("::asinh", earlier, 9)
    try:
        with custom_symbolic("::asinh", temporary, 9):
            assert registry.get_function_group("aten::asinh").get(9) is temporary
        assert registry.get_function_group("aten::asinh").get(9) is earlier
    finally:
        torch.onnx.unregister_custom_op_symbolic("::asinh", 9)


def test_deform_conv_runs_in_ort_where_the_tutorial_failed():
    facts = load("deform_conv").main()
    assert "custom::deform_conv2d" in facts["tutorial_ops"]  # the one ORT rejects
    assert "DeformConv" in facts["standard_ops"]
    assert "custom::deform_conv2d" in facts["custom_ops"]
    assert facts["max_abs_err"] < 1e-4


@pytest.mark.slow
def test_my_add_is_a_compiled_extension_op():
    facts = load("my_add").main()
    assert facts["ops"][-2:] == ["Mul", "Add"] and facts["max_abs_err"] < 1e-5
    library = facts["library"]
    assert library.endswith(".so") and library.startswith(str(BUILD_DIR / "my_add"))


def test_selu_function_is_a_model_local_function():
    facts = load("selu_function").main()
    assert facts["dynamo_ops"] == ["recipes::Selu"] == facts["legacy_ops"]
    assert facts["max_abs_err"] < 1e-5


def test_helper_model_build_and_edit():
    facts = load("helper_model").main()
    assert facts["ops"] == ["Mul", "Add"] and facts["edited_ops"] == ["Mul", "Sub"]
    assert facts["ir_version"] <= 13 and facts["max_abs_err"] < 1e-6


def test_extract_subgraph_and_debug_outputs():
    facts = load("extract").main()
    assert facts["sub_ops"] == ["Conv", "Conv"]
    assert len(facts["debug_outputs"]) == 4 and facts["max_abs_err"] < 1e-5


def test_export_only_logic_in_both_exporters():
    facts = load("export_only").main()
    assert "Clip" in facts["legacy_ops"] and "Clip" in facts["dynamo_ops"]
    assert facts["max_abs_err"] < 1e-5


def test_loop_traced_unrolls_scripted_and_while_loop_keep_the_loop():
    facts = load("loop").main()
    assert facts["traced_ops"] == ["Conv", "Conv"]
    assert "Loop" in facts["scripted_ops"] and "Loop" in facts["dynamo_ops"]
    assert facts["max_abs_err"] < 1e-5 and facts["traced_stale_err"] > 1e-3
