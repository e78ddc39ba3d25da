"""Attention in query chunks (training.export.chunked_attention): the rewritten feature graph
gives the exported graph's bits on one window of any length, falls back to the whole node for a
padded batch or a short window, and is written once beside the graph."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
transformers = pytest.importorskip("transformers")

from training.export.chunked_attention import chunk_attention, chunked_graph  # noqa: E402
from training.export.features_graph import (  # noqa: E402
    GRAPH,
    OrtFeatures,
    _feed,
    _session,
    export_feature_graph,
)
from training.model.classifier import PrefixClassifier  # noqa: E402


@pytest.fixture(scope="module")
def gqa_model():
    """A random Llama whose head size (16) lets the fused graph use GroupQueryAttention (the
    shared tiny model's head size 4 does not): 2 layers, 4 query heads on 2 key/value heads."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    backbone = transformers.LlamaModel(cfg).eval()
    return PrefixClassifier(backbone, [], "asinh", "last+mean").eval()


@pytest.fixture(scope="module")
def graphs(gqa_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gqa") / "int8"
    path = export_feature_graph(gqa_model, folder, "ort-int8")
    return path, chunked_graph(path, chunks=4, min_tokens=16)


def test_the_rewrite_chunks_every_attention(graphs):
    path, chunked = graphs
    assert chunked != path
    assert chunked.parent == path.parent
    model = onnx.load(str(chunked), load_external_data=False)
    ifs = [n for n in model.graph.node if n.op_type == "If"]
    assert len(ifs) == 2  # one per layer
    assert not [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    then = next(a.g for a in ifs[0].attribute if a.name == "then_branch")
    assert sum(n.op_type == "GroupQueryAttention" for n in then.node) == 4


@pytest.mark.parametrize("tokens", [1, 15, 16, 17, 50, 101, 256])
def test_chunked_features_are_the_same_bits(graphs, tokens):
    path, chunked = graphs
    ids = np.random.default_rng(tokens).integers(1, 300, (1, tokens))
    want = _session(path, 1).run(None, _feed(ids))[0]
    got = _session(chunked, 1).run(None, _feed(ids))[0]
    assert got.shape == want.shape == (1, tokens, 128)
    np.testing.assert_array_equal(got, want)


def test_a_padded_batch_takes_the_whole_node(graphs):
    path, chunked = graphs
    ids = np.random.default_rng(0).integers(1, 300, (2, 40))
    mask = np.ones_like(ids)
    mask[1, 25:] = 0
    want = _session(path, 1).run(None, _feed(ids, mask))[0]
    got = _session(chunked, 1).run(None, _feed(ids, mask))[0]
    np.testing.assert_array_equal(got, want)


def test_the_engine_reads_the_chunked_graph_written_once(gqa_model, tmp_path):
    one = OrtFeatures(gqa_model, tmp_path / "g", "ort-int8", threads=2)
    written = sorted(p.name for p in (tmp_path / "g").iterdir())
    assert any(name.endswith(".chunked.onnx") for name in written)
    plain = OrtFeatures(gqa_model, tmp_path / "g", "ort-int8", threads=2, chunks=1)
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == written  # nothing rewritten
    windows = [np.arange(1, n) % 299 + 1 for n in (300, 40, 257, 500)]
    for a, b in zip(one.window_features(windows), plain.window_features(windows), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_graph_without_attention_nodes_is_left_alone(tiny_model_dir, tmp_path):
    from training.model.classifier import build_classifier

    tiny = build_classifier(str(tiny_model_dir), None, []).eval()  # head size 4: no GQA node
    path = export_feature_graph(tiny, tmp_path / "g", "ort-fp32")
    assert path.name == GRAPH
    assert chunked_graph(path) == path
    assert chunk_attention(onnx.load(str(path))) == 0
