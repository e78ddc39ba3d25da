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


def load_config(
    cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None
) -> T:
    """Load `cls` from a YAML file (or defaults when `path` is None) with dotted overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{p}: cannot read config: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: a config file must be a mapping")
    apply_overrides(data, overrides)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}{e}") from e
