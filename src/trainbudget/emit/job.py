"""What an emitter reads (a `Job`: the plan and its model, sequence, precision, optimizer) and
what it returns (an `Emitted` file and the notes it cannot carry), plus the rows of the
mapping tables (`Option`) and the one way to refuse a feature (`refuse`)."""

from __future__ import annotations

from dataclasses import dataclass

from trainbudget.core.errors import SpecError
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.model_spec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class Job:
    """A plan the planner chose, with everything it was chosen for."""

    model: ModelSpec
    plan: Plan
    seq_len: int
    """Tokens per sequence."""
    precision: str
    """A key of `core.spec.precision.PRECISIONS`."""
    optimizer: str
    """A key of `core.spec.precision.OPTIMIZERS`."""
    train_steps: int | None = None
    """Optimizer steps for the token budget (ceil(tokens / (global batch * seq_len))), or None
    when no budget was given."""


@dataclass(frozen=True, kw_only=True)
class Option:
    """One option an engine reads, what of ours it carries, and where the engine defines it."""

    name: str
    """The engine's name for it: a TOML `section.key`, a `--flag`, a JSON `path.to.key`."""
    kind: type
    """The value's type: int, float, str, bool (a Megatron store_true flag), list."""
    carries: str
    """Which field of the plan, model, precision or optimizer it holds."""
    source: str
    """The file (at a tag or commit) that defines the option."""
    choices: tuple[str, ...] = ()
    """The values the engine accepts, when it lists them."""


@dataclass(frozen=True, kw_only=True)
class Emitted:
    engine: str
    text: str
    """The file's content."""
    file_name: str
    """What the file is called when written into a folder."""
    notes: tuple[str, ...] = ()
    """What the file cannot say and the user's code must do (printed apart from the file)."""


def refuse(engine: str, feature: str, value: object, why: str) -> SpecError:
    """The one-line error for a plan feature the engine has no equivalent for."""
    return SpecError(feature, value, f"cannot be emitted for {engine}: {why}")


def table(*rows: Option) -> dict[str, Option]:
    """An engine's options by name; a name given twice is a bug in the table."""
    out: dict[str, Option] = {}
    for row in rows:
        if row.name in out:
            raise ValueError(f"option {row.name} is in the table twice")
        out[row.name] = row
    return out


def check_emitted(values: dict[str, object], options: dict[str, Option], engine: str) -> None:
    """Every emitted option is a row of the table, of the row's type and among its choices
    (a slip of an emitter, not of the user: raised as ValueError)."""
    for name, value in values.items():
        row = options.get(name)
        if row is None:
            raise ValueError(f"{engine}: {name} is not in the option table")
        ok = isinstance(value, row.kind) and not (row.kind is int and isinstance(value, bool))
        if row.kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or (row.choices and value not in row.choices):
            raise ValueError(f"{engine}: {name} = {value!r} is not a {row.kind.__name__} of it")
