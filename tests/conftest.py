"""Shared fixtures: the real data folder and a tiny randomly initialised Llama-style model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the repository (CI lays shared/ next to the clone); FAILFAST_DATA overrides.
DATA = Path(os.environ.get("FAILFAST_DATA", ROOT.parent / "shared" / "data"))
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real labelled trajectories (../shared/data); tests using it skip when it is absent."""
    if not DATA.is_dir():
        pytest.skip(f"real data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (hidden 16, 2 layers, 4 heads) with a small byte-level BPE tokenizer,
    saved as a local Hugging Face folder, so `model.base=<dir>` works like a real checkpoint."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = tmp_path_factory.mktemp("tiny-llama")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [
        "Task: fix the bug in django/db/models.py. $ python -m pytest tests -x",
        "Traceback (most recent call last): Error: ModuleNotFoundError no module named",
        "ACTION bash: grep -rn 'def separability_matrix' astropy/ ; OBS exit=1",
        "edit file str_replace_editor create view submit diff --git a/b",
    ] * 20
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    fast.save_pretrained(out)
    cfg = transformers.LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        pad_token_id=0,
        eos_token_id=0,
        bos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    return out
