"""Row-scaled int8 MatMuls (training.export.rowwise_int8): each token row is quantised on its own
scale, so a row with huge values costs the other rows nothing, and the result matches a numpy
reference of the same arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from training.export.rowwise_int8 import rowwise_graph, rowwise_matmuls  # noqa: E402
from training.model.backbone import feature_scheme, u8s8_saturates  # noqa: E402


def _matmul_graph(path, w):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="/layers.0/mlp/down_proj/MatMul")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, None, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, w.shape[1]])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _run(path, x):
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _reference(x, w, levels=127):
    s = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-12) / 127
    q = np.clip(np.rint(x / s), -128, 127)
    ws = np.abs(w).max(axis=0) / levels
    wq = np.clip(np.rint(w / ws), -levels, levels)
    return (q @ wq) * s * ws


LEVELS = [
    pytest.param(63, id="7-bit weights"),
    pytest.param(
        127,
        id="8-bit weights",
        marks=pytest.mark.skipif(
            u8s8_saturates(), reason="this CPU's u8 x s8 kernel saturates (no VNNI)"
        ),
    ),
]


@pytest.mark.parametrize("levels", LEVELS)
def test_rows_are_quantised_on_their_own_scale(tmp_path, levels):
    """The integer result is exact (the numpy reference of the same arithmetic): with 7-bit
    weights on every CPU, with 8-bit ones where the kernel cannot saturate."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(96, 40)).astype(np.float32)
    _matmul_graph(tmp_path / "fp32.onnx", w)
    assert rowwise_graph(tmp_path / "fp32.onnx", tmp_path / "row.onnx", levels=levels) == 1
    assert (tmp_path / "row.onnx.data").is_file()
    ops = {n.op_type for n in onnx.load(str(tmp_path / "row.onnx")).graph.node}
    assert "MatMulInteger" in ops
    assert "MatMul" not in ops

    x = rng.normal(size=(1, 9, 96)).astype(np.float32)
    want = x @ w
    got = _run(tmp_path / "row.onnx", x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, _reference(x, w, levels), rtol=1e-4, atol=1e-4)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < (0.02 if levels == 127 else 0.03)

    # a row 1,000x larger than the rest: the other rows' results do not move
    loud = x.copy()
    loud[0, 4] *= 1000
    again = _run(tmp_path / "row.onnx", loud)
    keep = [i for i in range(9) if i != 4]
    np.testing.assert_array_equal(again[0, keep], got[0, keep])


def test_only_the_named_matmuls_are_rewritten(tmp_path):
    w = np.ones((8, 4), np.float32)
    _matmul_graph(tmp_path / "fp32.onnx", w)
    model = onnx.load(str(tmp_path / "fp32.onnx"))
    assert rowwise_matmuls(model, ("o_proj",)) == 0
    assert [n.op_type for n in model.graph.node] == ["MatMul"]


def test_which_cpus_saturate_and_their_feature_scheme(monkeypatch):
    """x86 without VNNI saturates (AVX2 or AVX-512F alone); VNNI, AMX or a non-x86 CPU does not;
    a saturating CPU's row engine is another feature scheme (another cache and graph)."""
    avx2 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\n"
    assert u8s8_saturates(avx2)
    assert u8s8_saturates(avx2.replace("avx2", "avx2 avx512f avx512bw"))
    assert not u8s8_saturates(avx2.replace("avx2", "avx2 avx512f avx512_vnni"))
    assert not u8s8_saturates(avx2.replace("avx2", "avx2 avx_vnni"))
    assert not u8s8_saturates("processor\t: 0\nFeatures\t: fp asimd asimddp\n")
    assert not u8s8_saturates("")

    import training.model.backbone as backbone

    monkeypatch.setattr(backbone, "u8s8_saturates", lambda: True)
    assert backbone.row_weight_levels() == 63
    assert feature_scheme("ort-int8-row", "float32") == "ort-int8-row7"
    assert feature_scheme("ort-int8", "float32") == "ort-int8-fp32down"
    monkeypatch.setattr(backbone, "u8s8_saturates", lambda: False)
    assert backbone.row_weight_levels() == 127
    assert feature_scheme("ort-int8-row", "float32") == "ort-int8-row"
