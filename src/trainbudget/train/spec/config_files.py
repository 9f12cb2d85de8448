"""A run config from a settings file (TOML or JSON, parsed as data, never executed) and the
command line's flags: defaults < file < flags, every key and value checked, an error naming
`FILE:key`."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from trainbudget.core.errors import SpecError
from trainbudget.train.spec.config import TrainConfig, checked_value, config_fields

CONFIG_SUFFIXES = (".toml", ".json")


def load_config_file(path: str) -> dict:
    """A settings file's keys and values: TOML or JSON (by suffix), parsed as data only.

    Unknown keys and wrong types are errors naming `FILE:key`; ranges are TrainConfig's."""
    suffix = Path(path).suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise SpecError("--config", path, "must be a .toml or .json file")
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise SpecError("--config", path, f"cannot be read ({err.strerror})") from None
    doc = _parse_toml(path, raw) if suffix == ".toml" else _parse_json(path, raw)
    known = config_fields()
    values = {}
    for key, value in doc.items():
        if key not in known:
            raise SpecError(f"{path}:{key}", value, unknown_key_rule(key, list(known)))
        try:
            values[key] = checked_value(key, value)
        except SpecError as err:
            raise SpecError(f"{path}:{key}", value, err.rule) from None
    return values


def _parse_toml(path: str, raw: bytes) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise SpecError("--config", path, "TOML needs Python 3.11+ (tomllib)") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except ValueError as err:  # TOMLDecodeError and UnicodeDecodeError
        raise SpecError("--config", path, f"is not valid TOML ({err})") from None
    except RecursionError:  # tomllib recurses once per nested array or table
        raise SpecError("--config", path, "is nested too deeply (settings are flat)") from None


def _parse_json(path: str, raw: bytes) -> dict:
    def no_duplicates(pairs: list[tuple[str, object]]) -> dict:
        seen: dict = {}
        for key, value in pairs:
            if key in seen:
                raise SpecError(f"{path}:{key}", value, "is given twice")
            seen[key] = value
        return seen

    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except SpecError:
        raise
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise SpecError("--config", path, f"is not valid JSON ({err})") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise SpecError("--config", path, "is nested too deeply (settings are flat)") from None
    if not isinstance(doc, dict):
        raise SpecError(
            "--config", path, f"must hold a JSON object of settings, not a {type(doc).__name__}"
        )
    return doc


def unknown_key_rule(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key.replace("-", "_"), known, n=1)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return "unknown key; known: " + ", ".join(known)


def make_config(file_values: dict, flag_values: dict, *, source: str = "") -> TrainConfig:
    """Defaults, then the settings file's values, then command-line flags (None: not given).

    The flags' overrides (`--set`) change the file's or the default's field by field
    (`merge_overrides`); a settings file's overrides replace the default's.

    An error about a value that came from the file (`source`) names `FILE:key`."""
    flags = {k: v for k, v in flag_values.items() if v is not None}
    for name in flags:
        if name not in config_fields():
            raise SpecError(name, flags[name], unknown_key_rule(name, list(config_fields())))
    values = {**file_values, **flags}
    if "overrides" in flags:
        # --set changes fields of the model the run would otherwise train (the tiny default,
        # the file's, or --model's as it is), one by one: `--set n_layers=2` keeps the
        # default's width and its byte vocabulary
        named_alone = "model" in values and "overrides" not in file_values
        base = file_values.get("overrides", config_fields()["overrides"].default)
        values["overrides"] = merge_overrides(() if named_alone else base, flags["overrides"])
    elif "model" in values and "overrides" not in values:
        values["overrides"] = ()  # a model named alone is trained as it is, not shrunk
    try:
        return TrainConfig(**values)
    except SpecError as err:
        if source and err.field in file_values and err.field not in flags:
            raise SpecError(f"{source}:{err.field}", err.value, err.rule) from None
        raise


def merge_overrides(base: tuple[str, ...], changes: tuple[str, ...]) -> tuple[str, ...]:
    """`base` with `changes` applied field by field: a field set in both keeps its place in
    `base` and takes the value from `changes`; new fields follow in order. An item without
    "=" is kept as it is, for `resolve_model` to refuse with its own message."""
    merged: dict[str, str] = {}
    for item in (*base, *changes):
        key = item.split("=", 1)[0].strip() if "=" in item else item
        merged[key] = item
    return tuple(merged.values())
