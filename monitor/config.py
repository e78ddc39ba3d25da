"""Config loading: YAML files + dotted overrides into pydantic models that forbid unknown keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from monitor.errors import ConfigError

T = TypeVar("T", bound=BaseModel)


class StrictModel(BaseModel):
    """Base of every config class: unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def parse_override(item: str) -> tuple[list[str], Any]:
    """`train.lr=1e-4` -> (["train", "lr"], 0.0001); the value is parsed as YAML."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.key=value")
    key, _, raw = item.partition("=")
    return key.strip().split("."), yaml.safe_load(raw) if raw.strip() else ""


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply dotted overrides to a nested dict (in place) and return it."""
    for item in overrides or []:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[path[-1]] = value
    return data


def merge_sections(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """`child` over `base`, mapping by mapping: a key the child sets wins, lists and values are
    replaced whole, nested mappings are merged the same way. Neither input is changed."""
    out = dict(base)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_sections(out[key], value)
        else:
            out[key] = value
    return out


def read_config_data(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a dict, its `extends:` resolved.

    `extends: other.yaml` (a path relative to the file that names it) takes every section of that
    file and lays this one's keys over it (`merge_sections`): a config that differs from another in
    a few keys says only those, and cannot drift from it when the other changes. Chains are
    followed; a cycle or a missing file is a ConfigError naming the files."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{p}: cannot read config: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a config file must be a mapping")
    base_name = data.pop("extends", None)
    if base_name is None:
        return data
    if not isinstance(base_name, str) or not base_name.strip():
        raise ConfigError(f"{p}: extends must name one config file, got {base_name!r}")
    base = (p.parent / base_name).resolve()
    chain = (*_chain, p.resolve())
    if base in chain:
        names = " -> ".join(str(c) for c in (*chain, base))
        raise ConfigError(f"{p}: extends forms a cycle: {names}")
    if not base.is_file():
        raise ConfigError(f"{p}: extends {base_name!r}, but {base} is not a file")
    return merge_sections(read_config_data(base, chain), data)


def load_config(
    cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None
) -> T:
    """Load `cls` from a YAML file (or defaults when `path` is None; `extends:` resolved, see
    `read_config_data`) with dotted overrides."""
    data: dict[str, Any] = {} if path is None else read_config_data(path)
    apply_overrides(data, overrides)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}{explain(e, cls)}") from e


def explain(e: ValidationError, cls: type[BaseModel]) -> str:
    """A validation error on one line a user can act on: each bad key with what is wrong, and
    for an unknown top-level key the keys there are (pydantic's own text spans lines and links
    to its docs)."""
    parts = []
    for err in e.errors():
        key = ".".join(str(x) for x in err["loc"]) or "(the config)"
        if err["type"] == "extra_forbidden":
            known = ", ".join(cls.model_fields) if len(err["loc"]) == 1 else ""
            parts.append(f"{key}: unknown option" + (f" (options: {known})" if known else ""))
        else:
            got = repr(err.get("input"))
            shown = f" (got {got})" if err["loc"] and len(got) <= 80 else ""
            parts.append(f"{key}: {err['msg']}{shown}")
    return f"{cls.__name__}: " + "; ".join(parts)
