"""``lrd inspect`` reads checkpoints without torch, and as safely as ``weights_only=True``.

``cli._unpickle.read_torch_zip`` must return what ``torch.load(weights_only=True)`` returns,
every tensor a placeholder whose bytes are never read; refuse what it refuses, naming the
same global, before anything in the file runs; and leave to torch every file it does not
decide on (legacy format, other protocols, torch globals it does not know), so that
``load_checkpoint`` still reads those as before.
"""

from __future__ import annotations

import os
import pickle
import re
import warnings
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_resumable_data.cli import main
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._reading import load_checkpoint
from lightning_resumable_data.cli._unpickle import NeedsTorch, Placeholder, Refused, read_torch_zip


def _lightning_like() -> dict[str, Any]:
    """What a Lightning checkpoint holds: weights, optimizer states, loops, plain hparams."""
    weights: OrderedDict[str, Any] = OrderedDict(
        [("layer.weight", torch.randn(3, 2)), ("layer.bias", torch.zeros(3, dtype=torch.bfloat16))]
    )
    weights._metadata = OrderedDict([("", {"version": 1})])  # type: ignore[attr-defined]
    tied = torch.arange(12, dtype=torch.int64)
    return {
        "epoch": 1,
        "global_step": 7,
        "pytorch-lightning_version": "2.6.6",
        "state_dict": weights,
        "optimizer_states": [
            {
                "state": {0: {"step": torch.tensor(7.0), "exp_avg": torch.ones(3, 2)}},
                "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1]}],
            }
        ],
        "views": [tied, tied[2:5], tied.view(3, 4)],  # one storage, several views
        "param": torch.nn.Parameter(torch.ones(2)),
        "loops": {"fit_loop": {"state_dict": {"combined_loader": [{"kind": "x", "epoch": 0}]}}},
        "hyper_parameters": {
            "lr": 0.1,
            "layers": [2, 3],
            "name": "run",
            "tied": None,
            "flags": {True, False},
            "blob": b"\x00\xffbytes",
            "z": complex(1, -2),
            "buffer": bytearray(b"ab"),
            "counts": Counter("aab"),
            "shape": torch.Size([2, 3]),
            "nan": float("nan"),
            "big": 2**70,
        },
    }


def _same(read: Any, loaded: Any, where: str = "") -> None:
    """``read`` is ``loaded`` with each tensor a placeholder (and ``torch.Size`` a tuple)."""
    if isinstance(loaded, torch.Tensor):
        assert isinstance(read, Placeholder), where
        assert read.name.startswith("torch._utils._rebuild_"), where
        return
    if isinstance(loaded, torch.Size):
        assert tuple(read) == tuple(loaded), where
        return
    assert type(read) is type(loaded), (where, type(read), type(loaded))
    if isinstance(loaded, dict):
        assert list(read) == list(loaded), where
        assert vars(read) == vars(loaded) if isinstance(loaded, OrderedDict) else True
        for key, value in loaded.items():
            _same(read[key], value, f"{where}.{key}")
    elif isinstance(loaded, list | tuple):
        assert len(read) == len(loaded), where
        for i, (a, b) in enumerate(zip(read, loaded, strict=True)):
            _same(a, b, f"{where}[{i}]")
    elif loaded == loaded:  # not NaN
        assert read == loaded, where


def _save(obj: object, path: Path, **kwargs: Any) -> Path:
    torch.save(obj, path, **kwargs)
    return path


def test_reads_what_weights_only_reads_with_placeholders(tmp_path: Path) -> None:
    path = _save(_lightning_like(), tmp_path / "model.ckpt")
    _same(read_torch_zip(path), torch.load(path, weights_only=True))
    assert load_checkpoint(path, placeholders=True)["hyper_parameters"]["big"] == 2**70


def test_never_reads_a_tensor_byte(tmp_path: Path) -> None:
    """The tensor records can be gone: only ``data.pkl`` is read."""
    path = _save(_lightning_like(), tmp_path / "model.ckpt")
    stripped = tmp_path / "stripped.ckpt"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(stripped, "w") as target:
        for name in source.namelist():
            if "/data/" not in name:
                target.writestr(name, source.read(name))
    assert read_torch_zip(stripped)["global_step"] == 7
    with pytest.raises(RuntimeError):
        torch.load(stripped, weights_only=True)  # torch does read them


class _System:
    """A hostile ``__reduce__``: unpickling it runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


class _Eval:
    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, ("__import__('os').getpid()",))


class _Touch:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


class _Popen:
    def __reduce__(self) -> tuple[Any, ...]:
        import subprocess

        return (subprocess.Popen, (["true"],))


_HOSTILE: dict[str, Callable[[Path], object]] = {
    "system": _System,
    "touch": _Touch,
    "eval": lambda marker: _Eval(),
    "popen": lambda marker: _Popen(),
}


@pytest.mark.parametrize("kind", ["system", "eval", "touch", "popen"])
def test_a_hostile_payload_never_runs_and_is_refused_as_torch_refuses_it(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    checkpoint = _lightning_like()
    checkpoint["hyper_parameters"]["config"] = _HOSTILE[kind](marker)
    path = _save(checkpoint, tmp_path / "downloaded.ckpt")
    with pytest.raises(Refused) as refused:
        read_torch_zip(path)
    with pytest.raises(pickle.UnpicklingError) as by_torch:
        torch.load(path, weights_only=True)
    named = re.search(r"GLOBAL ([\w.]+)", str(refused.value))
    assert named is not None
    assert named.group(1) == re.search(r"GLOBAL ([\w.]+)", str(by_torch.value)).group(1)  # type: ignore[union-attr]
    with pytest.raises(CliError, match=rf"holds {re.escape(named.group(1))}, which only a full"):
        load_checkpoint(path, placeholders=True)
    assert main(["inspect", str(path)]) == 2
    assert "--unsafe-unpickle" in capsys.readouterr().err
    assert not marker.exists()


def test_a_hostile_payload_in_another_protocol_goes_to_torch_and_never_runs(
    tmp_path: Path,
) -> None:
    """A hand-made archive with a protocol-4 pickle: torch's ``weights_only`` decides."""
    marker = tmp_path / "ran"
    path = tmp_path / "crafted.ckpt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"x": _System(marker)}, protocol=4))
        archive.writestr("archive/byteorder", "little")
    with pytest.raises(NeedsTorch):
        read_torch_zip(path)
    with pytest.raises(CliError):
        load_checkpoint(path, placeholders=True)
    assert not marker.exists()


def test_a_protocol_2_pickle_refused_with_no_tensor_at_all(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "crafted.ckpt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps([_System(marker)], protocol=2))
    with pytest.raises(Refused, match=r"GLOBAL posix\.system|GLOBAL nt\.system"):
        read_torch_zip(path)
    assert not marker.exists()


def _outcome(path: Path, placeholders: bool) -> object:
    try:
        loaded = load_checkpoint(path, placeholders=placeholders)
    except CliError as error:
        return str(error)
    return (loaded["global_step"], type(loaded["w"]))


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(
            lambda obj, path: torch.save(obj, path, _use_new_zipfile_serialization=False),
            id="legacy-format",
        ),
        pytest.param(lambda obj, path: torch.save(obj, path, pickle_protocol=4), id="protocol-4"),
        pytest.param(
            lambda obj, path: torch.save({**obj, "sparse": torch.ones(2).to_sparse()}, path),
            id="a-torch-global-it-does-not-know",
        ),
    ],
)
def test_what_it_does_not_decide_on_torch_reads_as_before(write: Any, tmp_path: Path) -> None:
    path = tmp_path / "other.ckpt"
    write({"global_step": 3, "w": torch.ones(2)}, path)
    with pytest.raises(NeedsTorch):
        read_torch_zip(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's about protocol 4 (which it then refuses)
        assert _outcome(path, placeholders=True) == _outcome(path, placeholders=False)


def test_not_a_checkpoint_is_left_to_torch_for_its_message(tmp_path: Path) -> None:
    text = tmp_path / "notes.ckpt"
    text.write_text("just some text\n")
    with pytest.raises(NeedsTorch):
        read_torch_zip(text)
    with pytest.raises(CliError, match=r"is not a checkpoint torch\.load can read"):
        load_checkpoint(text, placeholders=True)
    zipped = tmp_path / "files.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("a.txt", "a")
        archive.writestr("b/c.txt", "c")
    with pytest.raises(NeedsTorch):
        read_torch_zip(zipped)


def test_a_placeholder_records_the_tensor_view_and_its_storage(tmp_path: Path) -> None:
    path = _save({"w": torch.ones(4, dtype=torch.float16)[1:]}, tmp_path / "view.ckpt")
    tensor = read_torch_zip(path)["w"]
    assert tensor.name == "torch._utils._rebuild_tensor_v2"
    storage, offset, size, stride = tensor.args[:4]
    assert (offset, tuple(size), tuple(stride)) == (1, (3,), (1,))
    assert storage.name == "storage"
    storage_type, key, location, numel = storage.args
    assert (storage_type.name, key, location, numel) == ("torch.HalfStorage", "0", "cpu", 4)
    assert repr(storage) == "<storage not loaded>"
