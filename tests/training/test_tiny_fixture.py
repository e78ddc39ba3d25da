"""The tiny model fixture loads like a real local checkpoint."""

from __future__ import annotations


def test_tiny_model_loads(tiny_model_dir):
    transformers = __import__("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tok("$ python -m pytest -x")["input_ids"]
    assert len(ids) > 0
    assert model.config.hidden_size == 16
    assert model.config.num_hidden_layers == 2
