"""The model of a question: what `--model` names (a preset, a config.json path, dense:N), or,
from Python, a mapping holding a Hugging Face config.json's contents (a config pasted into a
page). Resolved by the core's readers, so an error is the core's one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.model_source.model_arg import apply_overrides, resolve_model
from trainbudget.core.spec.model_spec import BareModel, ModelSpec

CONFIG_NAME = "config"
"""The name a pasted config gets when it names no model (`_name_or_path`)."""


def model_input(model: object) -> str | ModelSpec:
    """A name or path stays text (resolved with the options' overrides, as the CLI does); a
    mapping becomes its ModelSpec now."""
    if isinstance(model, ModelSpec | str):
        return model
    if isinstance(model, Mapping):
        from trainbudget.core.spec.model_source.hf_config import spec_from_hf_config

        name = str(model.get("_name_or_path") or CONFIG_NAME).rstrip("/").rsplit("/", 1)[-1]
        return spec_from_hf_config(model, name or CONFIG_NAME, origin="config")
    raise SpecError(
        "model",
        type(model).__name__,
        "must be a preset name, a path to a config.json, dense:N, or a config.json's contents "
        "as a mapping",
    )


def resolve(model: str | ModelSpec, overrides: Sequence[str]) -> ModelSpec | BareModel:
    """The question's model with its `--set` overrides applied."""
    if isinstance(model, ModelSpec):
        return apply_overrides(model, overrides) if overrides else model
    return resolve_model(model, overrides)
