"""The API's keywords read into the same option record the CLI parses (an argparse.Namespace
with the options' dest names), so that a question asked from Python and from a terminal goes
through one function and gets one answer, with one set of defaults and one set of errors.

A value may be what the CLI takes ("15T", "80GB", "$2.5") or a Python number: numbers are
turned into the text a user would type, and the CLI's own parsers read them, so `gpus=0` fails
with the same line as `--gpus 0`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from trainbudget.core.errors import SpecError
from trainbudget.core.spec.defaults import DEFAULT_GPU, DEFAULT_MEMORY_HEADROOM

SHARED_DEFAULTS: dict[str, object] = {
    "overrides": [],
    "gpu": DEFAULT_GPU,
    "tokens": None,
    "seq_len": None,
    "global_batch": None,
    "precision": "bf16-mixed",
    "optimizer": "adamw",
    "framework": None,
    "tp_comm_overlap": False,
    "compiled": False,
    "fp8_param_gather": False,
    "loss_kernel": None,
    "attention_kernel": None,
    "fp8_recipe": None,
    "causal": True,
    "count_causal": False,
    "gpus_per_node": None,
    "link_efficiency": None,
    "nic_bandwidth": None,
    "calibration": None,
    "gpu_failure_rate_per_day": None,
    "checkpoint_write_bytes_per_second": None,
    "restart_seconds": "600",
    "max_tp": None,
    "zero_stages": "0,1,2,3",
    "recompute_options": None,
    "recompute": None,
    "allow_offload": False,
    "no_cp": False,
    "no_hsdp": False,
    "flash_attention": None,
    "max_micro_batch": "16",
    "memory_headroom": DEFAULT_MEMORY_HEADROOM,
    "json": False,
}
"""Options `estimate` and `plan` share, each with the value the CLI parses when it is not given
(tests/api/inputs/test_options.py checks this table against the parsers)."""

ESTIMATE_DEFAULTS: dict[str, object] = {
    **SHARED_DEFAULTS,
    "gpus": "1",
    "epochs": None,
    "samples": None,
    "mean_length": None,
    "mfu": None,
    "price_per_gpu_hour": None,
    "grad_accum": "1",
    "flops_formula": "exact",
    "micro_batch": None,
    "dp": None,
    "tp": None,
    "pp": None,
    "pp_layers": None,
    "account_for_embedding": False,
    "account_for_loss": False,
    "vpp": None,
    "cp": None,
    "ep": None,
    "zero": None,
    "zero_shard": None,
    "sp": False,
    "recompute_every": None,
    "schedule": None,
    "offload_optimizer": "none",
    "offload_params": "none",
    "explain": False,
}
"""`trainbudget estimate`'s options as parsed when not given."""

PLAN_DEFAULTS: dict[str, object] = {
    **SHARED_DEFAULTS,
    "gpus": None,
    "framework": "generic",
    "top": "5",
    "within_days": None,
    "gpu_options": None,
    "gpu_counts": None,
    "prices": None,
    "emit": None,
    "emit_out": None,
}
"""`trainbudget plan`'s options as parsed when not given (--gpus is required)."""


TRISTATE_SWITCHES = frozenset({"flash_attention"})
"""Switches whose default, None, means "not said" (the answer then names the assumption)."""


def as_text(field: str, value: object) -> object:
    """A keyword's value as the CLI would have received it: numbers become the text a user
    types (the parsers then apply the CLI's units and rules), flags stay booleans."""
    if field == "overrides":  # --set, repeatable: one "field=value" or several
        return [value] if isinstance(value, str) else [str(v) for v in value]
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)  # zero_stages=(0, 3) -> "0,3", as typed
    raise SpecError(field, value, "must be a number or a string such as the CLI takes")


def namespace(
    defaults: Mapping[str, object], model: object, given: Mapping[str, object]
) -> argparse.Namespace:
    """The option record of one question: the defaults, then the keywords given (None means
    not given, as an option left off the command line)."""
    values = dict(defaults)
    values["overrides"] = list(values["overrides"])  # type: ignore[arg-type]
    for name, value in given.items():
        if name not in defaults:
            raise TypeError(f"unknown option {name!r}")
        if value is None:
            continue
        switch = isinstance(defaults[name], bool) or name in TRISTATE_SWITCHES
        if switch != isinstance(value, bool):
            rule = "must be True or False" if switch else "must be a number or a string"
            raise SpecError(name, value, rule)
        values[name] = as_text(name, value)
    values["model"] = model
    return argparse.Namespace(**values)
