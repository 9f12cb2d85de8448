"""The package tree is layered: every import between packages points down an explicit table.

Each module of src/trainbudget is parsed (ast, so imports inside functions count too, and nothing
is executed) and every `trainbudget.*` import becomes an edge between two parts of the tree. A
part is a folder (the modules directly in it and its `__init__`: core's base is errors and
units, core.parallel's the cluster and the plan), or one top-level module (validation,
uncertainty, `trainbudget/__main__.py`), so a new folder needs a row. An edge not in ALLOWED
fails, printed as `module -> imported (a may not import b)`. The Layout sections of README.md
and README.zh-CN.md state the same table; the last test checks they name every part.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "trainbudget"

CORE = frozenset({"core", "core.spec", "core.spec.model_source", "core.single", "core.parallel"})
CORE |= {"core.parallel.memory", "core.parallel.timing", "core.parallel.search"}

# part -> the other parts its modules may import (imports inside a part are free)
ALLOWED: dict[str, frozenset[str]] = {
    # the package's __init__: __version__, and trainbudget.estimate / plan loaded on first use
    "trainbudget": frozenset({"api"}),
    "core": frozenset(),  # core/__init__.py, errors.py, units.py: the base of everything
    "core.spec": frozenset({"core"}),
    # --model read into the one ModelSpec: a preset, dense:N or a config.json
    "core.spec.model_source": frozenset({"core", "core.spec"}),
    "core.single": frozenset({"core", "core.spec"}),
    "core.parallel": frozenset({"core", "core.spec", "core.single"}),  # cluster, plan, layout
    # memory per GPU reads the plan's layout
    "core.parallel.memory": frozenset({"core", "core.spec", "core.single", "core.parallel"}),
    # communication is sized by the sharded state (StageParams) and the engines' buffers
    "core.parallel.timing": frozenset({"core", "core.spec", "core.single", "core.parallel"})
    | {"core.parallel.memory"},
    # the planner ranks plans by both answers
    "core.parallel.search": frozenset({"core", "core.spec", "core.single", "core.parallel"})
    | {"core.parallel.memory", "core.parallel.timing"},
    "data": CORE,
    "model": CORE,
    "profile": CORE | {"data", "model"},
    # the trainer's rooms, lowest first. What a run is, pure (no torch): preflight reads the
    # data folder's meta
    "train.spec": CORE | {"data"},
    # a process started and stopped; of checkpointing only NARROW's (the run-folder lock looks
    # for checkpoints)
    "train.launch": CORE | {"train.spec", "train.checkpointing"},
    # the engines wrap the model for the run's strategy, over the process group
    "train.parallel": CORE | {"model", "train.spec", "train.launch"},
    # the measurements read the engines' layouts and the device's roofline
    "train.observe": CORE | {"model", "profile", "train.spec", "train.launch", "train.parallel"},
    # the loop and the run's state: every room below
    "train": CORE
    | {"data", "model", "profile", "train.checkpointing"}
    | {"train.spec", "train.launch", "train.parallel", "train.observe"},
    # of train (the loop's level): only NARROW's modules, the run's state that resume restores
    "train.checkpointing": CORE
    | {"model", "train", "train.spec", "train.launch", "train.parallel", "train.observe"},
    "published": CORE | {"published.runs", "published.nvidia"},
    # issue 23 item 6's sources, one module each; of published only the record (NARROW)
    "published.runs": CORE | {"published"},
    # NVIDIA's NeMo performance pages, one module each; of published only the record (NARROW)
    "published.nvidia": CORE | {"published"},
    # the keys validation groups runs by, apart: a plan's range reads them without validation
    "validation_keys": CORE,
    # why each run beyond the outlier limit is off: text only
    "validation_notes": frozenset(),
    "validation": CORE | {"published", "published.nvidia", "validation_keys", "validation_notes"},
    "uncertainty": CORE | {"validation", "validation_keys"},
    "report": CORE | {"train.spec"},  # of train: only its reader of run folders, see NARROW
    "emit": CORE,
    # the Python API's rooms, lowest first. A question read: its options, values and choices,
    # the model, the layout and the planner's search (the option readers the CLI imports)
    "api.inputs": CORE,
    # what estimate and plan return, how it shows itself; a result hands its plan to the emitters
    "api.returned": CORE | {"emit"},
    # the answers: the inputs read, the documents built, returned; the range of a plan's step
    # time from the model's error on published runs
    "api.answers": CORE | {"api.inputs", "api.returned", "uncertainty"},
    # estimate and plan (api/entry.py): keywords read as options, answered, returned
    "api": CORE | {"api.inputs", "api.returned", "api.answers"},
    # the planner page's server: the API's answers, the emitters' files; no torch, no cli
    "serve": CORE
    | {"api", "api.inputs", "api.returned", "emit", "published", "validation", "uncertainty"},
    # the command line's rooms. Its base: `main` (which reaches each command by its module's
    # name, not by an import), the shared option parsers (whose values the API reads) and Ctrl-C
    "cli": CORE | {"api.inputs"},
    # catalogs and one-formula answers; validate scores the published runs (and prints the
    # fits rule with the measured memory error, uncertainty), and a file of the user's own runs
    # with estimate's answer to each (api.answers)
    "cli.tools": CORE | {"cli", "api.inputs", "api.answers", "validation", "uncertainty"},
    # estimate, plan, report and serve: the API's answers printed, drawn or served; report
    # --run reads a run folder, and prints the reliability block the tools print
    "cli.plan": CORE
    | {"cli", "cli.tools", "api.inputs", "api.answers", "api.returned", "emit", "report"}
    | {"serve", "train.spec", "uncertainty"},
    # the trainer and the device: everything with torch
    "cli.run": CORE
    | {"cli", "data", "model", "profile", "report", "train", "train.checkpointing"}
    | {"train.spec", "train.launch", "train.observe"},
    "__main__": frozenset({"cli"}),
}

# (part, imported part) -> the only modules of the imported part it may use
NARROW: dict[tuple[str, str], frozenset[str]] = {
    # plain JSON, no torch: the report draws a run without torch
    ("report", "train.spec"): frozenset({"trainbudget.train.spec.run_files"}),
    # the run's state and set-up that resume and recovery restore; none imports checkpointing
    ("train.checkpointing", "train"): frozenset(
        {
            "trainbudget.train.guard",
            "trainbudget.train.rng",
            "trainbudget.train.run",
            "trainbudget.train.data",
        }
    ),
    # the run-folder lock refuses a fresh run over an earlier run's checkpoints
    ("train.launch", "train.checkpointing"): frozenset(
        {"trainbudget.train.checkpointing.manifest"}
    ),
    # a source's rows are records; published/__init__.py registers them
    ("published.runs", "published"): frozenset({"trainbudget.published.record"}),
    ("published.nvidia", "published"): frozenset({"trainbudget.published.record"}),
}


def part_of(module: str) -> str:
    """The folder a module sits in (a package is its own folder), or a top-level module itself:
    trainbudget.core.spec.hardware -> core.spec; trainbudget.core.units -> core;
    trainbudget.core.parallel.memory -> core.parallel.memory; trainbudget.report.page -> report;
    trainbudget.validation -> validation; trainbudget -> trainbudget."""
    parts = module.split(".")[1:]
    if not parts:
        return PACKAGE
    if len(parts) == 1 or (SRC / PACKAGE).joinpath(*parts).is_dir():
        return ".".join(parts)
    return ".".join(parts[:-1])


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(SRC).with_suffix("").parts)
    return name.removesuffix(".__init__")


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def imports(module: str, source: str, known: set[str], is_package: bool = False) -> set[str]:
    """The trainbudget modules `module` imports anywhere in `source` (top level or inside a
    function); `from pkg import mod` names the module `pkg.mod` where that is one."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing module's package
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}


def violations(module: str, imported: set[str]) -> list[str]:
    """Each forbidden edge as `module -> imported (a may not import b)`."""
    a = part_of(module)
    out = []
    for target in sorted(imported):
        b = part_of(target)
        if b == a:
            continue
        if b not in ALLOWED.get(a, frozenset()):
            out.append(f"{module} -> {target} ({a} may not import {b})")
        elif (a, b) in NARROW and target not in NARROW[(a, b)]:
            only = ", ".join(sorted(NARROW[(a, b)]))
            out.append(f"{module} -> {target} ({a} may not import {b}, except {only})")
    return out


def edges() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {
        m: imports(m, p.read_text(encoding="utf-8"), known, p.name == "__init__.py")
        for m, p in modules.items()
    }


def test_every_import_between_packages_is_in_the_table() -> None:
    bad = [line for m, imported in edges().items() for line in violations(m, imported)]
    assert not bad, "imports that point up or sideways:\n" + "\n".join(bad)


def test_every_package_has_a_row() -> None:
    parts = {part_of(m) for m in all_modules()}
    assert parts - ALLOWED.keys() == set(), "add a row to ALLOWED (and README's Layout)"
    assert ALLOWED.keys() - parts == set(), "a row for a package that no longer exists"


def test_the_table_is_layered() -> None:
    # apart from the narrow edges, no two parts may import each other, even through a
    # third; the narrow ones are checked module by module below
    wide = {a: {b for b in allowed if (a, b) not in NARROW} for a, allowed in ALLOWED.items()}
    try:
        order = list(TopologicalSorter(wide).static_order())
    except CycleError as err:
        raise AssertionError(f"the allowed imports form a cycle: {err.args[1]}") from None
    assert order.index("core") < order.index("train") < order.index("cli.run")
    assert order.index("train.spec") < order.index("train.launch") < order.index("train.parallel")
    assert order.index("train.parallel") < order.index("train.observe") < order.index("train")


def test_the_narrow_modules_do_not_import_back() -> None:
    # what makes the narrow edges layers too: train.spec.run_files imports nothing of report;
    # train.run, data, guard and rng nothing of train.checkpointing; its manifest nothing of
    # train.launch
    found = edges()
    for (a, _), modules in NARROW.items():
        for module in sorted(modules):
            back = sorted(t for t in found[module] if part_of(t) == a)
            assert not back, f"{module} imports {back}: it is below {a}, which imports it"


def test_report_and_api_never_import_cli_and_core_imports_only_core() -> None:
    for module, imported in edges().items():
        parts = {part_of(t) for t in imported}
        if part_of(module) == "report":
            assert "cli" not in parts, f"{module} imports the CLI: {sorted(imported)}"
        if part_of(module).split(".")[0] in ("api", "serve"):  # below the CLI, torch-free
            above = sorted(p for p in parts if p.split(".")[0] in ("cli", "profile", "train"))
            assert not above, f"{module} imports {above}: {sorted(imported)}"
        if part_of(module) in CORE:
            assert parts <= CORE, f"{module} imports outside core: {sorted(imported)}"


def test_the_check_sees_an_import_inside_a_function_and_names_the_edge() -> None:
    source = "import json\n\ndef page():\n    from trainbudget.cli.main import main\n"
    found = imports("trainbudget.report.fake", source, set())
    assert found == {"trainbudget.cli.main"}
    assert violations("trainbudget.report.fake", found) == [
        "trainbudget.report.fake -> trainbudget.cli.main (report may not import cli)"
    ]
    # `from package import module` is the module; a narrow edge names what it allows
    known = {"trainbudget.train.spec.config", "trainbudget.train.spec.run_files"}
    found = imports("trainbudget.report.fake", "from trainbudget.train.spec import config\n", known)
    assert violations("trainbudget.report.fake", found) == [
        "trainbudget.report.fake -> trainbudget.train.spec.config (report may not import "
        "train.spec, except trainbudget.train.spec.run_files)"
    ]
    relative = imports("trainbudget.core.spec.fake", "from ..single import flops\n", set())
    assert part_of("trainbudget.core.units") == "core" != part_of("trainbudget.core.spec")
    assert violations("trainbudget.core.spec.fake", relative) == [
        "trainbudget.core.spec.fake -> trainbudget.core.single (core.spec may not import "
        "core.single)"
    ]


def test_both_readmes_lay_out_every_package() -> None:
    def path(part: str) -> str:  # core.spec -> core/spec/, validation -> validation.py
        module = part in (
            "validation",
            "validation_keys",
            "validation_notes",
            "uncertainty",
            "__main__",
        )
        return part.replace(".", "/") + (".py" if module else "/")

    paths = sorted(path(part) for part in ALLOWED if part != PACKAGE)
    for readme, heading in (("README.md", "## Layout\n"), ("README.zh-CN.md", "## 代码结构\n")):
        text = (SRC.parent / readme).read_text(encoding="utf-8")
        layout = text[text.index(heading) :].split("\n## ", 1)[0]
        missing = [p for p in paths if f"`{p}`" not in layout]
        assert not missing, f"{readme}'s {heading.strip()} does not name {missing}"
