"""FSDP2's model and optimizer state as a sharded checkpoint (torch.distributed.checkpoint, DCP):
every rank writes its own shards into the checkpoint's dcp/ sub-folder, in parallel, instead
of gathering the full model into rank 0's memory; any number of processes reads them back (DCP
reshards: a 2-rank checkpoint continues under 4 ranks, or in one process into plain tensors).
The folder is written inside the atomic checkpoint of `checkpoint.py` (`writer=`) and its files
are in the manifest, so a flipped bit is caught before DCP reads anything.

What DCP itself reads with (torch/distributed/checkpoint/, torch 2.6 to 2.13), and what this
module uses instead, so that nothing is unpickled beyond weights-only:
- dcp/.metadata, the index (each key's shape and dtype, its chunks' files and offsets):
  `FileSystemReader.read_metadata` (filesystem.py) calls plain `pickle.load`, which runs any
  code a crafted file names. `_SafeReader` unpickles it with an allow-list instead -- DCP's
  metadata dataclasses, torch.Size, dtypes, layouts and pathlib paths -- refuses anything else
  by name, and checks that every chunk lies in a file of dcp/.
- tensors: `FileSystemReader.read_data` calls torch.load(weights_only=True) per chunk: kept.
- every other value (a param group's lr and betas, AdaGrad's int step):
  `DefaultLoadPlanner.load_bytes` (default_planner.py) calls torch.load with weights_only
  switched off; `_WeightsOnlyPlanner` loads them with weights_only=True. (format_utils'
  dcp_to_torch_save and torch_save_to_dcp load unsafely too: not used.)

The saved state is {"model": model.state_dict(), "optimizer": optimizer.state_dict()}; DCP
flattens it into keys such as `model.blocks.0.attn.qkv.weight` and `optimizer.state.3.exp_avg`
(dict keys become str, list positions stay int). Loading is in place, into a template of the
same keys, shapes and shardings: the model's own state dict, and for the optimizer one built
from the checkpoint's metadata -- an optimizer that has not stepped has no state to serve as
one -- each per-parameter tensor shaped and sharded like its parameter.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    StorageMeta,
    TensorStorageMetadata,
)

from trainbudget.model.optim import MasterWeightOptimizer
from trainbudget.train.checkpointing.checkpoint import CheckpointError, _reason

METADATA_FILE = ".metadata"  # DCP's name for its index, written last by the coordinator
_ROOTS = ("model", "optimizer")
_DTYPES = frozenset(name for name, value in vars(torch).items() if isinstance(value, torch.dtype))
_PATH_CLASSES = ("Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")
_ALLOWED_GLOBALS = frozenset(
    {
        *(
            ("torch.distributed.checkpoint.metadata", name)
            for name in (
                "Metadata",
                "MetadataIndex",
                "StorageMeta",
                "TensorStorageMetadata",
                "BytesStorageMetadata",
                "ChunkStorageMetadata",
                "TensorProperties",
                "_MEM_FORMAT_ENCODING",
            )
        ),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),  # a layout by name ("torch.strided")
        # StorageMeta.checkpoint_id, the folder written to (Python 3.13 moved the classes)
        *((module, name) for module in ("pathlib", "pathlib._local") for name in _PATH_CLASSES),
    }
)


def save_sharded(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write `model`'s and `optimizer`'s state into `folder` (created) with DCP. A collective
    under a process group: every rank calls it and writes its shards (`__RANK_0.distcp`), rank 0
    the index (`.metadata`) last. Each file is fsynced by the rank that wrote it."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    with _alone_is_fine():
        dcp.save(state, storage_writer=FileSystemWriter(Path(folder), sync_files=True))


def load_sharded(
    folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> None:
    """Load a `save_sharded` checkpoint into `model` and `optimizer` (None: the model only).

    A collective under a process group (every rank calls it; each reads the parts of the
    chunks its shards need, whatever the world size that wrote them); without one, DCP reads
    in this process, and plain (unsharded) tensors get the shards stitched together. Verify
    the checkpoint first (`verify_checkpoint`): this trusts the bytes it reads. A checkpoint
    that does not fit -- another model's keys or shapes, a refused value -- raises
    CheckpointError naming the file."""
    folder = Path(folder)
    reader = _SafeReader(folder)
    metadata = reader.read_metadata()
    paths = _key_paths(metadata, folder)
    model_state = model.state_dict()
    # a pipeline rank's part (train.parallel.pipeline) loads its own keys of the whole model's
    _check_model_keys(paths, getattr(model, "whole", model).state_dict(), folder)
    template: dict = {"model": model_state}
    if optimizer is not None:
        template["optimizer"] = _optimizer_template(paths, metadata, optimizer)
    _dcp_load(template, reader, folder)
    model.load_state_dict(template["model"])  # a copy onto itself where DCP loaded in place
    if optimizer is not None:
        optimizer.load_state_dict(_torch_layout(template["optimizer"]))


def read_sharded(folder: Path) -> dict:
    """A whole `save_sharded` checkpoint, {"model": ..., "optimizer": ...}, as plain CPU
    tensors and values in the single-process layout (what model.pt and optimizer.pt hold),
    read in one process that has no process group (tests, tools)."""
    folder = Path(folder)
    reader = _SafeReader(folder)
    metadata = reader.read_metadata()
    template: dict = {}
    for key, path in _key_paths(metadata, folder).items():
        _put(template, path, _leaf(metadata.state_dict_metadata[key], None))
    _dcp_load(template, reader, folder)
    if "optimizer" in template:
        template["optimizer"] = _torch_layout(template["optimizer"])
    return template


def read_optimizer_steps(folder: Path) -> dict:
    """The optimizer's 'step' entries of a `save_sharded` checkpoint, alone, in the saved
    layout ({"state": {"0": {"step": tensor}}, ...}; empty when it keeps none), read by DCP in
    this process only: no collective, so one rank may check a checkpoint while the others
    wait (train.checkpointing.consistency)."""
    folder = Path(folder)
    reader = _SafeReader(folder)
    metadata = reader.read_metadata()
    template: dict = {}
    for key, path in _key_paths(metadata, folder).items():
        if path[0] == "optimizer" and path[-1] == "step":
            _put(template, path, _leaf(metadata.state_dict_metadata[key], None))
    if template:
        _dcp_load(template, reader, folder, alone=True)
    return template


def model_dtype(folder: Path) -> torch.dtype | None:
    """The dtype of the model's first floating-point tensor in a `save_sharded` checkpoint
    (what to build the model in before loading it); None if it has none."""
    folder = Path(folder)
    metadata = _read_metadata(folder)
    for key, path in _key_paths(metadata, folder).items():
        meta = metadata.state_dict_metadata[key]
        floating = (
            isinstance(meta, TensorStorageMetadata) and meta.properties.dtype.is_floating_point
        )
        if path[0] == "model" and floating:
            return meta.properties.dtype
    return None


def saved_tensors(folder: Path) -> dict[tuple, tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of every tensor of a `save_sharded` checkpoint, by its path in the saved
    state (("model", "blocks.0.attn.qkv.weight"), ("optimizer", "state", "3", "exp_avg")),
    from the index alone: nothing else is read."""
    folder = Path(folder)
    metadata = _read_metadata(folder)
    return {
        path: (tuple(meta.size), meta.properties.dtype)
        for key, path in _key_paths(metadata, folder).items()
        if isinstance(meta := metadata.state_dict_metadata[key], TensorStorageMetadata)
    }


# ---- the template ------------------------------------------------------------------------


def _key_paths(metadata: Metadata, folder: Path) -> dict[str, tuple]:
    """Each flattened key's path in the saved nested state ("optimizer.state.0.step" ->
    ("optimizer", "state", "0", "step")): DCP's planner_data, checked."""
    file = folder / METADATA_FILE
    paths = metadata.planner_data
    if not isinstance(paths, dict) or set(paths) != set(metadata.state_dict_metadata):
        raise CheckpointError(file, "does not map its keys to paths (not written by save_sharded)")
    for key, path in paths.items():
        if (
            not isinstance(path, tuple)
            or len(path) < 2
            or path[0] not in _ROOTS
            or not all(type(part) in (str, int) for part in path)
            or (path[0] == "model" and len(path) != 2)
        ):
            raise CheckpointError(file, f"key {key!r} has the path {path!r}, not model/optimizer")
    return paths


def _check_model_keys(paths: dict[str, tuple], model_state: dict, folder: Path) -> None:
    """DCP loads the keys the template has and ignores the rest: insist on the same set."""
    saved = {path[1] for path in paths.values() if path[0] == "model"}
    missing, unexpected = sorted(set(model_state) - saved), sorted(saved - set(model_state))
    if missing or unexpected:
        raise CheckpointError(
            folder / METADATA_FILE,
            f"holds another model's state (missing {missing[:3]}, unexpected {unexpected[:3]})",
        )


def _optimizer_template(paths, metadata: Metadata, optimizer) -> dict:
    tree: dict = {}
    for key, path in paths.items():
        if path[0] == "optimizer":
            meta = metadata.state_dict_metadata[key]
            param = param_at(optimizer, path[1:])
            if param is not None and param.is_meta:
                continue  # another pipeline rank's parameter: its state is not loaded here
            _put(tree, path[1:], _leaf(meta, param))
    return tree


def _leaf(meta, param: torch.Tensor | None):
    """A tensor for DCP to load into, or None where a non-tensor value will be put."""
    if isinstance(meta, BytesStorageMetadata):
        return None
    size, dtype = tuple(meta.size), meta.properties.dtype
    if param is not None and tuple(param.shape) == size:
        return torch.zeros_like(param, dtype=dtype)  # a DTensor sharded like its parameter
    return torch.zeros(size, dtype=dtype)  # a scalar such as Adam's step: torch keeps it on CPU


def param_at(optimizer, path: tuple) -> torch.Tensor | None:
    """The parameter an optimizer-state path belongs to: ("state", "3", "exp_avg") -> the 4th
    parameter; MasterWeightOptimizer's ("masters", 3) and ("inner", "state", "3", ...) -> its
    3rd fp32 master. None for anything else (param groups, unknown paths). A pipeline rank's
    optimizer answers for every parameter of the whole model: the others' on the meta device."""
    if isinstance(optimizer, MasterWeightOptimizer):
        if path[0] == "masters" and len(path) == 2:
            return _item(optimizer.masters, path[1])
        return param_at(optimizer.inner, path[1:]) if path[0] == "inner" else None
    if path[0] == "state" and len(path) == 3 and isinstance(path[1], str) and path[1].isdigit():
        # a pipeline rank's optimizer (train.parallel.pipeline) indexes the whole model's parameters
        params = getattr(optimizer, "params_by_index", None) or [
            p for group in optimizer.param_groups for p in group["params"]
        ]
        return _item(params, int(path[1]))
    return None


def _item(values: list, index) -> torch.Tensor | None:
    return values[index] if type(index) is int and 0 <= index < len(values) else None


def _torch_layout(tree: dict) -> dict:
    """A loaded optimizer tree in torch's own layout: state keyed by the parameter's int index
    (DCP made the keys str), and present when empty (plain SGD's: DCP saved nothing for it).
    MasterWeightOptimizer's {"inner": ..., "masters": [...]}: the inner optimizer's alike."""
    if "inner" in tree and "masters" in tree:
        return {**tree, "inner": _torch_layout(tree["inner"])}
    return {**tree, "state": {int(k): v for k, v in tree.get("state", {}).items()}}


def _put(tree, path: tuple, value) -> None:
    """tree[path[0]][path[1]]... = value, creating a dict where the next key is a str and a
    list where it is an int (DCP's paths: dict keys are str, list positions int)."""
    node = tree
    for key, following in itertools.pairwise(path):
        if _get(node, key) is None:
            _set(node, key, {} if isinstance(following, str) else [])
        node = _get(node, key)
    _set(node, path[-1], value)


def _get(node, key):
    if isinstance(node, list):
        return node[key] if key < len(node) else None
    return node.get(key)


def _set(node, key, value) -> None:
    if isinstance(node, list):
        node.extend([None] * (key + 1 - len(node)))
    node[key] = value


# ---- reading safely ------------------------------------------------------------------------


class _Refused(pickle.UnpicklingError):
    pass


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's index and nothing else: a global outside the allow-list is refused
    (the "restricting globals" recipe of Python's pickle documentation)."""

    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED_GLOBALS or (module == "torch" and name in _DTYPES):
            return super().find_class(module, name)
        raise _Refused(f"it names {module}.{name}, which is not part of DCP's metadata")


def _read_metadata(folder: Path) -> Metadata:
    file = folder / METADATA_FILE
    try:
        with open(file, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    except FileNotFoundError:
        raise CheckpointError(file, "missing") from None
    except _Refused as err:
        raise CheckpointError(file, f"refused: {err} (a pickle that could run code)") from None
    except Exception as err:  # unpickling fails in many types
        raise CheckpointError(file, f"cannot be read ({type(err).__name__}: {err})") from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise CheckpointError(file, f"holds a {type(metadata).__name__}, not DCP's Metadata")
    present = {p.name for p in folder.iterdir() if p.is_file()}
    for info in metadata.storage_data.values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or name.startswith(".") or name not in present:
            raise CheckpointError(file, f"points at {name!r}, not a data file of {folder.name}/")
    return metadata


class _SafeReader(FileSystemReader):
    """DCP's file reader with the index read by `_read_metadata` (once, then reused)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.folder = folder
        self._index: Metadata | None = None

    def read_metadata(self) -> Metadata:  # no **kwargs: DCP then tries no per-rank index
        if self._index is None:
            self._index = _read_metadata(self.folder)
        if getattr(self._index, "storage_meta", None) is None:
            self._index.storage_meta = StorageMeta()
        # as FileSystemReader does (the attribute is absent in older torch)
        self._index.storage_meta.load_id = getattr(self, "load_id", None)
        return self._index


class _WeightsOnlyPlanner(DefaultLoadPlanner):
    """DCP's default load planner, non-tensor values read with torch.load(weights_only=True)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def load_bytes(self, read_item, value) -> None:
        key = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except Exception as err:
            raise CheckpointError(
                self.folder,
                f"value of {key} refused by torch.load(weights_only=True): {_reason(err)}",
            ) from err
        # the template was flattened (flatten_state_dict): mappings give each key's path
        _put(self.original_state_dict, self.mappings[key], loaded)


def _dcp_load(template: dict, reader: _SafeReader, folder: Path, *, alone: bool = False) -> None:
    """DCP's load into `template`; `alone`: in this process only, even under a process group."""
    try:
        with _alone_is_fine():
            dcp.load(
                template,
                storage_reader=reader,
                planner=_WeightsOnlyPlanner(folder),
                no_dist=alone,
            )
    except CheckpointException as err:  # DCP wraps each rank's error (a BaseException)
        failures = [failure[0] for failure in err.failures.values()]
        ours = [e for e in failures if isinstance(e, CheckpointError)]
        if ours:
            raise ours[0] from None
        first = failures[0] if failures else err
        raise CheckpointError(
            folder, f"DCP could not load it ({type(first).__name__}: {_reason(first)})"
        ) from None


@contextlib.contextmanager
def _alone_is_fine():
    """DCP warns when it runs without a process group; here that is meant (one process)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield
