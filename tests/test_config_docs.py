"""config/README.md documents every key the workflow's schema accepts."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _keys(node: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, spec in (node.get("properties") or {}).items():
        keys.append(prefix + key)
        if isinstance(spec, dict) and spec.get("properties") and key not in ("profiles",):
            keys += _keys(spec, f"{prefix}{key}.")
    return keys


def test_every_schema_key_is_in_config_readme():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    sweep = schema["$defs"]["sweep"]
    text = (ROOT / "config" / "README.md").read_text()
    missing = [key for key in _keys(schema) if f"`{key}`" not in text]
    # The sweep keys (bench's, and each kind's overrides) are documented once, unprefixed.
    missing += [key for key in _keys(sweep) if f"`{key}`" not in text]
    assert not missing, missing
