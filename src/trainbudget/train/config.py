"""What a training run is: one frozen dataclass, from a TOML file and/or command-line flags,
validated in one place. Defaults train a small model on the embedded corpus on a CPU in a few
minutes."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from trainbudget.core.errors import SpecError

SCHEDULES = ("cosine", "linear", "constant", "wsd")
PRECISIONS = ("fp32", "bf16-mixed", "bf16", "amp-bf16", "amp-fp16")
DEVICES = ("auto", "cpu", "cuda")
STRATEGIES = ("ddp", "fsdp")
OPTIMIZERS = ("adamw", "adam", "sgd", "momentum", "adagrad")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    model: str = "gpt2"
    """A preset, a config.json path or a preset with overrides (see `overrides`)."""
    overrides: tuple[str, ...] = (
        "n_layers=4",
        "d_model=128",
        "n_heads=4",
        "d_ff=512",
        "vocab_size=257",
        "max_seq_len=256",
    )
    """`field=value` changes to the model (the default: a 1M-parameter byte-level GPT)."""
    data: str = ""
    """A directory from `trainbudget data prepare`; empty: the embedded corpus, prepared once
    into <out>/data with the byte tokenizer."""
    out: str = "runs/default"
    steps: int = 300
    micro_batch: int = 16
    grad_accum: int = 1
    seq_len: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = -1
    """-1: a tenth of the steps."""
    schedule: str = "cosine"
    optimizer: str = "adamw"
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    precision: str = "fp32"
    device: str = "auto"
    recompute: str = "none"
    compile: bool = False
    seed: int = 1337
    log_interval: int = 10
    eval_interval: int = 100
    eval_batches: int = 8
    probes: str = ""
    """A TSV file of `prompt<TAB>target` pairs whose probability is tracked (empty: none)."""
    strategy: str = "ddp"
    """Under torchrun: 'ddp' (replicate) or 'fsdp' (FSDP2 fully_shard)."""
    resume: bool = False
    tensorboard: bool = True

    def __post_init__(self) -> None:
        if self.warmup_steps == -1 and isinstance(self.steps, int):
            object.__setattr__(self, "warmup_steps", self.steps // 10)
        positive = (
            "steps",
            "micro_batch",
            "grad_accum",
            "seq_len",
            "log_interval",
            "eval_interval",
            "eval_batches",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(name, value, "must be a positive integer")
        for name in ("lr", "grad_clip", "weight_decay", "min_lr_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SpecError(name, value, "must be a number")
            if not math.isfinite(value):
                raise SpecError(name, value, "must be a finite number")
        if self.lr <= 0:
            raise SpecError("lr", self.lr, "must be a positive number")
        if self.warmup_steps < 0 or self.warmup_steps > self.steps:
            raise SpecError(
                "warmup_steps", self.warmup_steps, f"must be between 0 and steps ({self.steps})"
            )
        if not 0 <= self.min_lr_ratio <= 1:
            raise SpecError("min_lr_ratio", self.min_lr_ratio, "must be in [0, 1]")
        if self.grad_clip < 0:
            raise SpecError("grad_clip", self.grad_clip, "must be >= 0 (0 turns clipping off)")
        if self.weight_decay < 0:
            raise SpecError("weight_decay", self.weight_decay, "must not be negative")
        if not isinstance(self.overrides, tuple) or not all(
            isinstance(o, str) for o in self.overrides
        ):
            raise SpecError("overrides", self.overrides, 'must be a list of "field=value" strings')
        for name, allowed in (
            ("optimizer", OPTIMIZERS),
            ("schedule", SCHEDULES),
            ("precision", PRECISIONS),
            ("device", DEVICES),
            ("strategy", STRATEGIES),
            ("recompute", ("none", "full")),
        ):
            if getattr(self, name) not in allowed:
                raise SpecError(name, getattr(self, name), "must be one of " + ", ".join(allowed))

    @property
    def run_dir(self) -> Path:
        return Path(self.out)


def config_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(TrainConfig)}


def load_toml(path: str) -> dict:
    """A TOML file's keys, checked against the config's fields (an unknown key is an error)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise SpecError("--config", path, "TOML needs Python 3.11+ (tomllib)") from None
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as err:
        raise SpecError("--config", path, f"cannot be read ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError("--config", path, f"is not valid TOML ({err})") from None
    known = config_fields()
    for key in doc:
        if key not in known:
            raise SpecError(f"{path}:{key}", doc[key], "unknown key; known: " + ", ".join(known))
    if "overrides" in doc:
        if not isinstance(doc["overrides"], list):
            raise SpecError(
                f"{path}:overrides", doc["overrides"], 'must be a list of "field=value" strings'
            )
        doc["overrides"] = tuple(doc["overrides"])
    return doc


def make_config(file_values: dict, flag_values: dict) -> TrainConfig:
    """Defaults, then the TOML file, then command-line flags; types checked per field."""
    values = {**file_values, **{k: v for k, v in flag_values.items() if v is not None}}
    for name, value in values.items():
        default = config_fields()[name].default
        if isinstance(default, bool) != isinstance(value, bool):
            rule = (
                "must be true or false"
                if isinstance(default, bool)
                else f"must be a {type(default).__name__}, not true/false"
            )
            raise SpecError(name, value, rule)
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            values[name] = float(value)
        elif (
            isinstance(default, (int, float, str))
            and not isinstance(default, bool)
            and not isinstance(values[name], type(default))
        ):
            raise SpecError(name, value, f"must be a {type(default).__name__}")
    return TrainConfig(**values)
