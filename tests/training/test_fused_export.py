"""The optimised graphs (training.export.fused) and the int8 schemes (training.export.quant):
fused operators in the graph, onnxruntime == torch on shapes the export did not use, batched KV
rows == single rows, the transformers trace still exported for other backbones, every scheme
loads and scores, the bundle lists every file with its hash."""

from __future__ import annotations

import collections
import json
import shutil

import numpy as np
import pytest

from tests.bundle_helpers import make_run, shared_bundle

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def gqa_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny Llama with head_dim 16 and grouped KV heads (2 query heads, 1 KV head): the
    shape GroupQueryAttention's kernels accept (head_dim 4 of the tiny fixture they refuse)."""
    import torch
    import transformers

    out = tmp_path_factory.mktemp("tiny-gqa")
    for f in tiny_model_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copyfile(f, out / f.name)
    cfg = transformers.LlamaConfig.from_pretrained(tiny_model_dir)
    cfg.hidden_size, cfg.intermediate_size = 32, 48
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 2, 1, 16
    torch.manual_seed(1)
    transformers.LlamaForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    return out


@pytest.fixture(scope="module", params=["last", "last+mean"])
def gqa_bundle(request, gqa_model_dir, tmp_path_factory):
    from tests.bundle_helpers import build_tiny_bundle

    root = tmp_path_factory.mktemp("gqa-bundle")
    return build_tiny_bundle(gqa_model_dir, root, int8=True, pooling=request.param)


def op_counts(path) -> collections.Counter:
    import onnx

    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def test_fused_graphs_hold_the_fused_operators(gqa_bundle):
    m = json.loads((gqa_bundle / "monitor.json").read_text())
    assert m["export"]["graph"] == "fused"
    assert m["export"]["full_max_abs_diff"] <= 1e-4
    assert m["export"]["kv_max_abs_diff"] <= 1e-4  # single and batched KV calls
    full, kv = op_counts(gqa_bundle / "model.onnx"), op_counts(gqa_bundle / "model_kv.onnx")
    assert full["GroupQueryAttention"] == 2  # one per layer, rotary inside
    assert full["SkipSimplifiedLayerNormalization"] == 4  # 2 per layer (the last is the final norm)
    assert kv["SkipSimplifiedLayerNormalization"] == 4
    # per layer: packed qkv, o, packed gate/up, down (+ the head); attention in the KV graph
    assert full["MatMul"] == 2 * 4 + 1
    assert kv["Softmax"] == 2


def test_fused_scores_match_torch(gqa_bundle):
    """Whole runs (model.onnx) and live sessions (model_kv.onnx) against the torch classifier on
    its transformers forward."""
    from serving.scorer import Scorer
    from tests.serving.test_scorer import torch_scores

    scorer = Scorer.load(gqa_bundle, threads=1)
    traj = make_run(25, seed=3)
    want = torch_scores(gqa_bundle, traj)
    assert np.abs(np.array(scorer.score_run(traj)) - want).max() < 1e-5
    session = scorer.start(traj.task, traj.agent)
    live = [session.observe(s) for s in traj.steps]
    assert session.restarts > 0  # the window was re-rendered on the way
    assert np.abs(np.array(live) - want).max() < 1e-5


def test_transformers_trace_still_exports(tiny_model_dir, tmp_path, monkeypatch):
    """A backbone training.export.fused does not reproduce is traced through transformers."""
    import training.export.graphs as graphs
    from serving.scorer import Scorer
    from tests.bundle_helpers import build_tiny_bundle
    from tests.serving.test_scorer import torch_scores

    monkeypatch.setattr(graphs, "supports", lambda backbone: False)
    bundle = build_tiny_bundle(tiny_model_dir, tmp_path, pooling="last+mean")
    m = json.loads((bundle / "monitor.json").read_text())
    assert m["export"]["graph"] == "transformers"
    assert op_counts(bundle / "model.onnx")["SkipSimplifiedLayerNormalization"] == 0
    traj = make_run(12, seed=4)
    scorer = Scorer.load(bundle, threads=1)
    session = scorer.start(traj.task, traj.agent)
    live = [session.observe(s) for s in traj.steps]
    assert np.abs(np.array(live) - torch_scores(bundle, traj)).max() < 1e-5


@pytest.mark.parametrize("scheme", ["mixed", "blockwise", "dynamic", "per-channel"])
def test_int8_schemes_load_and_score(gqa_bundle, tmp_path, scheme):
    from serving.scorer import Scorer
    from training.export.quant import quantize_graphs

    b = tmp_path / "b"
    shutil.copytree(gqa_bundle, b)
    for f in b.glob("*.int8.onnx*"):
        f.unlink()
    written = quantize_graphs(b, scheme)
    assert {"model.int8.onnx", "model_kv.int8.onnx"} <= set(written)
    fp32 = Scorer.load(gqa_bundle, threads=1)
    q = Scorer.load(b, threads=1, int8=True, verify=False)
    traj = make_run(10, seed=5)
    a, c = np.array(fp32.score_run(traj)), np.array(q.score_run(traj))
    assert np.all((c > 0) & (c < 1))
    assert np.abs(a - c).max() < 0.1
    session = q.start(traj.task, traj.agent)
    live = np.array([session.observe(s) for s in traj.steps])
    assert np.abs(live - a).max() < 0.1


@pytest.mark.parametrize("scheme", ["mixed", "dynamic", "per-channel"])
def test_dynamic_int8_weights_fit_in_seven_bits(gqa_bundle, tmp_path, scheme):
    """A bundle may be served on x86 without VNNI, whose u8 x s8 kernel adds pairs of products
    in int16: 2 x 255 x 64 fits, 2 x 255 x 127 does not (training/export/quant.py)."""
    import onnx
    from onnx import numpy_helper

    from training.export.quant import quantize_graphs

    b = tmp_path / "b"
    shutil.copytree(gqa_bundle, b)
    quantize_graphs(b, scheme)
    for name in ("model.int8.onnx", "model_kv.int8.onnx"):
        graph = onnx.load(str(b / name)).graph
        weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        ints = [n.input[1] for n in graph.node if n.op_type == "MatMulInteger"]
        assert ints
        for w in ints:
            assert weights[w].dtype == np.int8
            assert np.abs(weights[w].astype(np.int32)).max() <= 64, (name, w)
            assert np.abs(weights[w].astype(np.int32)).max() >= 32, (name, w)  # the range is used


def test_mixed_int8_keeps_the_outlier_projections_fp32(gqa_bundle):
    m = json.loads((gqa_bundle / "monitor.json").read_text())
    assert m["export"]["config"]["int8_scheme"] == "mixed"
    ops = op_counts(gqa_bundle / "model.int8.onnx")
    assert ops["MatMulInteger"] == 2 * 2  # packed qkv and gate/up of each layer
    assert ops["MatMul"] == 2 * 2 + 1  # o and down of each layer, and the head


def test_blockwise_int8_rows_do_not_depend_on_the_batch(gqa_bundle, tmp_path):
    """Activations are quantised per row block, so a batched int8 call gives each session the
    score of its own call (dynamic int8 would not: one activation scale per call)."""
    from serving.batching import KVRequest, pack, unpack
    from serving.scorer import Scorer
    from training.export.quant import quantize_graphs

    b = tmp_path / "b"
    shutil.copytree(gqa_bundle, b)
    quantize_graphs(b, "blockwise")
    q = Scorer.load(b, threads=1, int8=True, verify=False)
    rng = np.random.default_rng(1)
    sig = rng.random(len(q.signal_index), dtype=np.float32)
    reqs = []
    for past, new in ((0, 7), (12, 3), (30, 9)):
        ids = rng.integers(1, 300, past + new).tolist()
        state = q._start_state if not past else q.run_kv(ids[:past], q._start_state, sig)[1]
        reqs.append(KVRequest(ids[past:], state, sig))
    alone = [unpack(q._kv_call(pack([r], q.past_names)), [r])[0][0] for r in reqs]
    together = [x for x, _ in unpack(q._kv_call(pack(reqs, q.past_names)), reqs)]
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_bundle_lists_every_file_with_its_hash(tiny_model_dir, tmp_path_factory):
    from serving.bundle import sha256_file

    bundle = shared_bundle(tiny_model_dir, tmp_path_factory)
    m = json.loads((bundle / "monitor.json").read_text())
    files = {
        p.relative_to(bundle).as_posix(): p
        for p in bundle.rglob("*")
        if p.is_file() and p.name != "monitor.json"
    }
    assert {"model.onnx", "model_kv.onnx", "model.int8.onnx", "model_kv.int8.onnx"} <= set(files)
    assert set(m["files"]) == set(files)
    assert all(m["files"][k] == sha256_file(p) for k, p in files.items())
    assert m["export"]["config"]["int8_scheme"] == "mixed"
    assert m["versions"]["bundle_format"] == 2
