"""Reading a checkpoint for ``lrd inspect``: the file, and where this package's state is in it."""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_resumable_data.cli._errors import EXIT_FAILURE, CliError

__all__ = ["DataState", "find_data_state", "fit_loop_loader", "load_checkpoint"]

LOADER_KIND = "StatefulDataLoader"  # StatefulDataLoader.KIND, without importing torch
# Sharded checkpoints are directories; these files hold the trainer state in them.
_SHARDED_FILES = ("meta.pt", "checkpoint/mp_rank_00_model_states.pt")
# a checkpoint's top-level weights and optimizer states: never a loader state, often large
_SKIP_KEYS = frozenset({"state_dict", "optimizer_states", "lr_schedulers", "model", "optimizer"})


def load_checkpoint(
    path: Path, *, unsafe_unpickle: bool = False, placeholders: bool = False
) -> dict[str, Any]:
    """Load a checkpoint file (or a sharded checkpoint's metadata file) on the CPU.

    Tensors are memory-mapped where the file allows it, so a large checkpoint is not read
    into memory to look at its data state. By default the file is loaded with
    ``weights_only=True``: tensors, containers and plain values only (what Lightning writes,
    hyperparameters included, when they are plain values), so a file from elsewhere cannot
    run code. A checkpoint holding other objects is refused, naming the object; with
    ``unsafe_unpickle=True`` it is fully unpickled, as Lightning loads it, which runs
    whatever code the file names.

    With ``placeholders=True`` (for a command that reads the data state, not the weights)
    a torch zip file is read without torch (:mod:`._unpickle`: the same allowlist, each
    tensor a placeholder whose bytes are never read); torch is imported only for what that
    reader leaves to it (legacy files, ``unsafe_unpickle``, ...).

    Raises:
        CliError: The file is missing, not a checkpoint, needs modules not installed, or
            (without ``unsafe_unpickle``) holds an object only a full unpickle can build.
    """
    if path.is_dir():
        found = next((path / name for name in _SHARDED_FILES if (path / name).is_file()), None)
        if found is None:
            raise CliError(
                f"{path} is a directory, not a checkpoint file",
                hint="pass the .ckpt file; for a sharded checkpoint pass DIR/meta.pt (FSDP) "
                "or DIR/checkpoint/mp_rank_00_model_states.pt (DeepSpeed).",
            )
        path = found
    if not path.is_file():
        raise CliError(
            f"no such file: {path}",
            hint="check the path; ModelCheckpoint writes to its dirpath, by default "
            "<default_root_dir>/lightning_logs/version_N/checkpoints/.",
        )
    try:
        loaded = _load(path, unsafe_unpickle, placeholders)
    except pickle.UnpicklingError as error:
        needed = re.search(r"GLOBAL ([\w.]+)", str(error))
        if unsafe_unpickle or needed is None:
            raise _unreadable(path, error) from None
        raise CliError(
            f"{path} holds {needed.group(1)}, which only a full unpickle can build, and a "
            "full unpickle runs whatever code the file names",
            hint="if you trust the file (you or your team wrote it), pass --unsafe-unpickle.",
        ) from None
    except (ModuleNotFoundError, AttributeError) as error:
        raise CliError(
            f"cannot unpickle {path}: {error}",
            hint="the checkpoint holds objects of a module this environment lacks (e.g. "
            "hyperparameters); run lrd in the training environment.",
            code=EXIT_FAILURE,
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError, KeyError) as error:
        raise _unreadable(path, error) from None  # KeyError: torch's reading of a text file
    if not isinstance(loaded, dict):
        raise CliError(
            f"{path} is not a checkpoint: it holds a {type(loaded).__name__}, not a dict",
            hint="pass a file written by ModelCheckpoint, trainer.save_checkpoint or fabric.save.",
        )
    return loaded


def _load(path: Path, unsafe_unpickle: bool, placeholders: bool) -> Any:
    """The file's object: torch-free where :func:`._unpickle.read_torch_zip` decides, else torch."""
    if placeholders and not unsafe_unpickle:
        from lightning_resumable_data.cli._unpickle import NeedsTorch, read_torch_zip

        try:
            return read_torch_zip(path)
        except NeedsTorch:
            pass  # torch reads it (and says why not, for a file that is no checkpoint)
    import torch  # deferred: the full unpickle, legacy files, and the weights of skip

    return _torch_load(torch, path, weights_only=not unsafe_unpickle)


def _torch_load(torch: Any, path: Path, *, weights_only: bool) -> Any:
    """``torch.load`` on the CPU, memory-mapped where the file's format allows it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=True)
    except RuntimeError:  # not the zip format (legacy or not a checkpoint): no mmap
        return torch.load(path, map_location="cpu", weights_only=weights_only)


def _unreadable(path: Path, error: BaseException) -> CliError:
    text = str(error).split("WeightsUnpickler error:")[-1]  # torch's reason, not its advice
    first = text.strip().splitlines()[0] if text.strip() else ""
    return CliError(
        f"{path} is not a checkpoint torch.load can read ({type(error).__name__}: {first})",
        hint="pass a file written by ModelCheckpoint, trainer.save_checkpoint or fabric.save.",
    )


@dataclass
class DataState:
    """The data state found in a checkpoint.

    Attributes:
        where: Where it was found (a key path, e.g. ``"ResumableDataModule"``).
        loader: The training loader's state.
        module: The data module's whole state (with ``config``), if saved by one.
        callback: The ``ResumableDataCallback`` state, if any.
        others: Where other loader states were found (not shown).
    """

    where: str
    loader: dict[str, Any]
    module: dict[str, Any] | None = None
    callback: dict[str, Any] | None = None
    others: tuple[str, ...] = ()


def _is_module_state(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("config"), dict)
        and "sources" in value["config"]
    )


def _is_loader_state(value: object) -> bool:
    return isinstance(value, dict) and value.get("kind") == LOADER_KIND and "epoch" in value


def _loader_states(value: object, where: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every loader state nested in ``value`` (Fabric checkpoints put them under any key).

    The checkpoint's own weights and optimizer states (top-level keys) are not walked; a
    nested ``state_dict`` is (Lightning keeps the fit loop's loader state under one).
    """
    if _is_loader_state(value):
        yield where, value
    elif depth < 6 and isinstance(value, Mapping):
        for key, item in value.items():
            if depth > 0 or key not in _SKIP_KEYS:
                yield from _loader_states(item, f"{where}.{key}" if where else str(key), depth + 1)
    elif depth < 6 and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _loader_states(item, f"{where}[{i}]", depth + 1)


def loader_states(checkpoint: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every training-loader state in a loaded checkpoint (the data module's, the fit loop's)."""
    return [state for _, state in _loader_states(checkpoint, "")]


def find_data_state(checkpoint: Mapping[str, Any], name: str) -> DataState:
    """Find the data module's state, else a training-loader state, in a loaded checkpoint.

    Lightning stores ``datamodule.state_dict()`` under the class's ``__qualname__``
    (``"ResumableDataModule"``, or a subclass's name), the loader's state in its fit loop,
    and a Fabric checkpoint holds whatever was passed to ``fabric.save``.

    Raises:
        CliError: No state of this package is in the checkpoint.
    """
    callbacks = checkpoint.get("callbacks")
    callback = callbacks.get("ResumableDataCallback") if isinstance(callbacks, dict) else None
    callback = callback if isinstance(callback, dict) else None
    modules = [(k, v) for k, v in checkpoint.items() if _is_module_state(v)]
    modules.sort(key=lambda kv: kv[0] != "ResumableDataModule")
    for key, module in modules:
        if _is_loader_state(module.get("train_loader")):
            return DataState(key, module["train_loader"], module, callback)
    found = list(_loader_states(checkpoint, ""))
    if found:
        where, loader = found[0]
        module = modules[0][1] if modules else None
        return DataState(where, loader, module, callback, tuple(w for w, _ in found[1:]))
    if modules:
        raise CliError(
            f"{name} holds the {modules[0][0]} configuration but no training-loader position: "
            "it was saved before the training loader was built",
            hint="inspect a checkpoint written during trainer.fit.",
        )
    raise CliError(
        f"no lightning-resumable-data state in {name}: was it written with ResumableDataModule?",
        hint="train with trainer.fit(model, datamodule=ResumableDataModule(...)), or put a "
        "StatefulDataLoader in the state you pass to fabric.save.",
    )


def fit_loop_loader(checkpoint: Mapping[str, Any]) -> dict[str, Any] | None:
    """The training loader's state in Lightning's fit loop, if there is one."""
    try:
        combined = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    except (KeyError, TypeError):
        return None
    states = [s for s in combined if _is_loader_state(s)] if isinstance(combined, list) else []
    return states[0] if states else None
