"""The CLI's model argument, parsed: a preset, a config.json, or `dense:N`; plus `--set` overrides.

Pure (it reads a config file when given a path, nothing else); every bad input is a SpecError.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from trainbudget.core.errors import SpecError, folded_key, unknown_key
from trainbudget.core.spec.model_spec import BareModel, ModelSpec, spec_fields
from trainbudget.core.spec.presets import PRESETS
from trainbudget.core.units import parse_count

DENSE_PREFIX = "dense:"
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")
_PLAIN_INT = re.compile(r"^[0-9][0-9_]*$")


def resolve_model(arg: str, overrides: Sequence[str] = ()) -> ModelSpec | BareModel:
    """'gpt2', 'path/to/config.json' or 'dense:70B', with `field=value` overrides applied.

    A preset name wins over a file of the same name, and a file over a preset whose name
    differs only in case (a downloaded ./Llama-3-8B folder); a path is anything ending in
    .json, an existing file, or a directory (read as its config.json).
    """
    if isinstance(overrides, str):  # a lone "a=b" would otherwise be iterated per character
        overrides = (overrides,)
    text = str(arg).strip()
    if text.lower().startswith(DENSE_PREFIX):
        model: ModelSpec | BareModel = _dense(text)
    elif text in PRESETS:
        model = PRESETS[text]
    elif _is_path(text):
        # only for a file: start-up
        from trainbudget.core.spec.model_source.hf_config import load_hf_config

        _require_regular_file(text)
        model = load_hf_config(text)
    elif folded_key(text, PRESETS) is not None:  # 'Llama-3-8B': a preset, case ignored
        model = PRESETS[folded_key(text, PRESETS)]
    else:
        known = unknown_key("model", text, list(PRESETS))
        raise SpecError(
            "model", text, known.rule + "; or a path to a config.json, or dense:N such as dense:70B"
        )
    if not overrides:
        return model
    if isinstance(model, BareModel):
        raise SpecError(
            "--set",
            overrides[0],
            f"'{text}' is a bare parameter count with no architecture to override; "
            "use a preset or a config.json",
        )
    return apply_overrides(model, overrides)


def _is_path(text: str) -> bool:
    return text.lower().endswith(".json") or os.path.exists(text)


def _require_regular_file(text: str) -> None:
    """A config path (or a folder's config.json) that exists must be a regular file: reading a
    named pipe waits for a writer forever, and a device or socket is no config either."""
    path = os.path.join(text, "config.json") if os.path.isdir(text) else text
    if os.path.exists(path) and not os.path.isfile(path):
        raise SpecError(
            "model",
            text,
            f"{path} is not a regular file (a named pipe, device or socket); give a config.json",
        )


def _dense(text: str) -> BareModel:
    """'dense:70e9' / 'dense:70B' / 'dense:15T' -> BareModel(n_params=...)."""
    count = text[len(DENSE_PREFIX) :].strip()
    rule = "must be a positive whole number of parameters, e.g. dense:70B or dense:7e9"
    if not count:
        raise SpecError("model", text, rule)
    try:
        n = _whole(count, "model")
    except SpecError:
        raise SpecError("model", text, rule) from None
    if n <= 0:
        raise SpecError("model", text, rule)
    return BareModel(n_params=n, name=text)


def _whole(text: str, field: str) -> int:
    """A whole count: '48', '4k', '32e3', '1_000'; '1.5' and '-3' are errors."""
    s = text.strip()
    if _PLAIN_INT.match(s):
        return int(s.replace("_", ""))
    value = parse_count(s, field)
    if not value.is_integer():
        raise SpecError(field, text, "must be a whole number")
    return int(value)


def _parse_value(field: str, kind: type, raw: str) -> object:
    value = raw.strip()
    if not value:
        raise SpecError(field, raw, f"is empty: --set {field}=VALUE needs a value after '='")
    if kind is bool:
        low = value.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise SpecError(field, raw, "must be true or false (also yes/no, 1/0)")
    if kind is int:
        try:
            return _whole(value, field)
        except SpecError:
            raise SpecError(
                field, raw, "must be a non-negative whole number such as 48, 4k or 32e3"
            ) from None
    if kind is float:
        try:
            return float(value)
        except ValueError:
            raise SpecError(field, raw, "must be a number such as 1.25") from None
    return value


def parse_overrides(overrides: Sequence[str]) -> dict[str, object]:
    """['n_layers=48', 'bias=false'] -> {'n_layers': 48, 'bias': False}; the last one wins."""
    fields = spec_fields()
    changes: dict[str, object] = {}
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise SpecError("--set", item, "expected field=value, e.g. n_layers=48")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key not in fields:
            import difflib  # only on an error: keeps every command's start-up light

            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SpecError(
                "--set", key, f"unknown field; {hint}known: " + ", ".join(sorted(fields))
            )
        changes[key] = _parse_value(key, fields[key], raw)
    return changes


def apply_overrides(spec: ModelSpec, overrides: Sequence[str]) -> ModelSpec:
    """`spec` with `field=value` overrides, validated together as one change.

    Derived defaults follow their source: a multi-head spec stays multi-head when n_heads
    changes (n_kv_heads is reset), and an MoE spec whose experts had width d_ff keeps them
    at the new d_ff, unless the override sets n_kv_heads / d_ff_expert itself.
    """
    changes = parse_overrides(overrides)
    if "n_heads" in changes and "n_kv_heads" not in changes and spec.n_kv_heads == spec.n_heads:
        changes["n_kv_heads"] = 0
    if (
        "d_ff" in changes
        and "d_ff_expert" not in changes
        and spec.is_moe
        and spec.d_ff_expert == spec.d_ff
    ):
        changes["d_ff_expert"] = 0
    if changes.get("n_experts") == 0 and "d_ff_expert" not in changes:
        changes["d_ff_expert"] = 0  # a dense model has no expert width
    if "name" not in changes:
        # say what was changed wherever the model is printed: "gpt2[bias=false]"
        changes["name"] = f"{spec.name}[{','.join(o.strip() for o in overrides)}]"
    return spec.replace(**changes)
