"""Row-scaled int8 MatMuls (training.export.rowwise_int8): each token row is quantised on its own
scale, so a row with huge values costs the other rows nothing, and the result matches a numpy
reference of the same arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from training.export.rowwise_int8 import rowwise_graph, rowwise_matmuls  # noqa: E402


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


def _reference(x, w):
    s = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-12) / 127
    q = np.clip(np.rint(x / s), -128, 127)
    ws = np.abs(w).max(axis=0) / 127
    wq = np.clip(np.rint(w / ws), -127, 127)
    return (q @ wq) * s * ws


def test_rows_are_quantised_on_their_own_scale(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(96, 40)).astype(np.float32)
    _matmul_graph(tmp_path / "fp32.onnx", w)
    assert rowwise_graph(tmp_path / "fp32.onnx", tmp_path / "row.onnx") == 1
    assert (tmp_path / "row.onnx.data").is_file()
    ops = {n.op_type for n in onnx.load(str(tmp_path / "row.onnx")).graph.node}
    assert "MatMulInteger" in ops
    assert "MatMul" not in ops

    x = rng.normal(size=(1, 9, 96)).astype(np.float32)
    want = x @ w
    got = _run(tmp_path / "row.onnx", x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, _reference(x, w), rtol=1e-4, atol=1e-4)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.02

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
