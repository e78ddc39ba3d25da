"""The onnxruntime feature pass (training.export.features_graph): fp32 features equal torch's, int8
ones stay close and never depend on the batch, and the cache keys keep numeric schemes apart."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from training.config import load_pipeline_config  # noqa: E402
from training.export.features_graph import GRAPH, OrtFeatures  # noqa: E402
from training.model.backbone import backbone_key, feature_scheme  # noqa: E402
from training.model.classifier import build_classifier  # noqa: E402
from training.model.features import encode_windows, extract_features  # noqa: E402


@pytest.fixture(scope="module", params=["last", "last+mean"])
def tiny(request, tiny_model_dir):
    torch.manual_seed(0)
    return build_classifier(str(tiny_model_dir), None, [], pooling=request.param).eval()


def _windows(featuriser, runs):
    return [w for r in runs[:6] for w in featuriser.windows(r)]


def test_fp32_graph_gives_torch_features(tiny, featuriser, runs, tmp_path):
    ort = OrtFeatures(tiny, tmp_path / "g", "ort-fp32", threads=1)
    assert (tmp_path / "g" / GRAPH).is_file()
    want = extract_features(tiny, featuriser, runs[:6], progress=False)
    got = extract_features(ort, featuriser, runs[:6], progress=False)
    for a, b in zip(got, want, strict=True):
        assert a.hidden.shape == b.hidden.shape
        assert a.encoded_tokens == b.encoded_tokens
        np.testing.assert_allclose(a.hidden, b.hidden, atol=1e-4)
    # a second engine on the same folder reads the graph written by the first
    again = OrtFeatures(tiny, tmp_path / "g", "ort-fp32", threads=1)
    np.testing.assert_array_equal(
        extract_features(again, featuriser, runs[:2], progress=False)[0].hidden, got[0].hidden
    )


def test_int8_features_are_close_and_independent_of_the_batch(tiny, featuriser, runs, tmp_path):
    ort = OrtFeatures(tiny, tmp_path / "g8", "ort-int8", threads=1)
    windows = _windows(featuriser, runs)
    ref = np.concatenate(encode_windows(tiny, windows))
    batched = encode_windows(ort, windows, batch_tokens=4096)
    single = [encode_windows(ort, [w], batch_tokens=64)[0] for w in windows]
    for a, b in zip(batched, single, strict=True):
        np.testing.assert_array_equal(a, b)  # each window is its own call: no batch effects
    got = np.concatenate(batched)
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert 0 < rel < 0.2, rel  # int8 moves the features, a little


def test_a_window_per_thread_gives_the_same_bits(tiny, featuriser, runs, tmp_path):
    """Two windows at once, each on one thread, equal one window on two threads, in the caller's
    order."""
    pool = OrtFeatures(tiny, tmp_path / "g8", "ort-int8", threads=2)
    split = OrtFeatures(tiny, tmp_path / "g8", "ort-int8", threads=2, split_windows=True)
    assert (pool.threads, split.threads) == (2, 1)
    windows = _windows(featuriser, runs)
    assert len({len(w.ids) for w in windows}) > 2  # lengths differ: the pool reorders its calls
    a = encode_windows(pool, windows)
    b = encode_windows(split, windows)
    for x, y, w in zip(a, b, windows, strict=True):
        assert x.shape == (len(w.boundaries), x.shape[1])
        np.testing.assert_array_equal(x, y)


def test_the_all_int8_engine_quantises_the_down_projection(tiny, tmp_path):
    import onnx

    def fp32_matmuls(engine):
        OrtFeatures(tiny, tmp_path / engine, engine, threads=1)
        graph = onnx.load(str(tmp_path / engine / GRAPH), load_external_data=False).graph
        return [n.name for n in graph.node if n.op_type == "MatMul"]

    assert any("down_proj" in n for n in fp32_matmuls("ort-int8"))
    assert not any("down_proj" in n for n in fp32_matmuls("ort-int8-all"))
    assert not any("down_proj" in n for n in fp32_matmuls("ort-int8-row"))


def test_the_row_scaled_engine_stays_close_to_fp32(tiny, featuriser, runs, tmp_path):
    windows = _windows(featuriser, runs)
    ref = np.concatenate(encode_windows(tiny, windows))
    got = np.concatenate(
        encode_windows(OrtFeatures(tiny, tmp_path / "r", "ort-int8-row", 1), windows)
    )
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert 0 < rel < 0.2, rel


def test_cache_keys_name_the_numeric_scheme(tiny_model_dir):
    base = str(tiny_model_dir)
    assert feature_scheme("torch", "float32") == ""  # fp32 caches written before stay valid
    keys = {
        backbone_key(base, 2, feature_scheme(e, d))
        for e, d in [("torch", "float32"), ("torch", "bfloat16"), ("ort-fp32", "float32"),
                     ("ort-int8", "float32"), ("ort-int8-all", "float32"),
                     ("ort-int8-row", "float32")]
    }  # fmt: skip
    assert len(keys) == 6
    assert backbone_key(base, 2) == backbone_key(base, 2, "")


def test_encoder_uses_the_configured_engine(tiny_model_dir, tmp_path):
    from training.pipeline.encode import load_encoder

    cfg = load_pipeline_config(
        None,
        [
            f"model.base={tiny_model_dir}",
            "model.n_layers=2",
            "model.feature_engine=ort-int8",
            f"train.cache_dir={tmp_path}",
        ],
    )
    enc = load_encoder(cfg)
    assert isinstance(enc.features, OrtFeatures)
    assert "-ort-int8-" in str(enc.cache.dir)
    torch_enc = load_encoder(cfg.model_copy(update={"model": cfg.model.model_copy(
        update={"feature_engine": "torch"})}))  # fmt: skip
    assert torch_enc.features is torch_enc.model
    assert torch_enc.cache.dir != enc.cache.dir
