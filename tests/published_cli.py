"""A published run stated as `trainbudget estimate` options, as the reviewer's protocol states
it: the model (a preset and `--set` for each field it differs in), the layout, batch, framework,
precision, and the kernels and network the source names; nothing about the attention mask.
tests/test_validation.py holds `estimate` to `validate` over every run with it, and
tests/cli/tools/test_validate_runs.py feeds it to `validate --runs`."""

from __future__ import annotations

from trainbudget.core.spec.model_spec import spec_fields
from trainbudget.core.spec.presets import PRESETS, get_preset
from trainbudget.validation import framework_row

_SPEC_FIELDS = tuple(f for f in spec_fields() if f != "name")


def _differing(spec, base) -> list[str]:
    return [f for f in _SPEC_FIELDS if getattr(spec, f) != getattr(base, f)]


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _model_args(spec) -> list[str]:
    """`--model` and `--set`s that state `spec` on the command line: the preset it differs
    from least, each other field set (and the run's name), as a user states a model that is
    no preset."""
    base = min((get_preset(n) for n in PRESETS), key=lambda b: len(_differing(spec, b)))
    sets = [f"{f}={_text(getattr(spec, f))}" for f in _differing(spec, base)]
    sets += [f"name={spec.name}"] if sets else []
    return ["--model", base.name, *(a for s in sets for a in ("--set", s))]


def estimate_args(run, json: bool = True) -> list[str]:
    """`estimate` flags stating the run as its source does (the reviewer's protocol): the
    model, layout, batch, framework, precision and the kernels and network the source names,
    nothing about the attention mask."""
    lay = run.layout
    argv = [*_model_args(run.model), "--gpus", str(run.n_gpus), "--gpu", run.gpu]
    argv += ["--gpus-per-node", str(run.gpus_per_node), "--seq-len", str(run.seq_len)]
    for axis in ("dp", "tp", "pp", "cp", "vpp", "zero", "zero_shard", "micro_batch"):
        argv += ["--" + axis.replace("_", "-"), str(getattr(lay, axis))]
    argv += ["--global-batch", str(lay.global_batch), "--recompute", lay.recompute]
    argv += ["--sp"] if lay.sp else []
    argv += ["--flash-attention" if lay.flash_attention else "--no-flash-attention"]
    if lay.pp_layers:
        argv += ["--pp-layers", ",".join(map(str, lay.pp_layers))]
    argv += ["--account-for-embedding"] if lay.embedding_in_pp_split else []
    argv += ["--account-for-loss"] if lay.loss_in_pp_split else []
    argv += ["--framework", framework_row(run.framework).name, "--precision", run.precision]
    argv += ["--tp-comm-overlap"] if run.tp_comm_overlap else []
    argv += ["--compiled"] if run.compiled else []
    argv += ["--loss-kernel", run.loss_kernel] if run.loss_kernel else []
    argv += ["--attention-kernel", run.attention_kernel] if run.attention_kernel else []
    if run.nic_bytes_per_second is not None:
        argv += ["--nic-bandwidth", f"{run.nic_bytes_per_second!r}B/s"]
    argv += ["--offload-optimizer", lay.offload_optimizer]
    return [*argv, "--optimizer", "adam", *(["--json"] if json else [])]
