"""A Lightning checkpoint's loop counters, read and mended against its data position.

Pure functions on the checkpoint dict Lightning loaded, used by
:class:`~lightning_resumable_data.ResumableDataCallback` in ``on_load_checkpoint``, before
Lightning restores its loops from it: :func:`data_position` reads where the training data
stands, :func:`match_epoch_counters` rewrites epoch counters that disagree with it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["data_position", "match_epoch_counters"]

_COUNTS = ("ready", "started", "processed", "completed")


def match_epoch_counters(checkpoint: dict[str, Any], epoch: int, consumed: int) -> bool:
    """Rewrite a checkpoint's epoch counters where they disagree with its data position.

    Called with the checkpoint before Lightning restores its loops
    (``Callback.on_load_checkpoint``); writes the counters Lightning itself writes at that
    point of training. Two cases, both found in real runs:

    * **A stopped epoch counted as done.** A fit stopped mid-epoch (``max_steps``,
      ``max_time``, ``should_stop``) runs its epoch-end hooks, so a checkpoint written by
      them, or after the fit, counts the epoch as done. Lightning would start the next epoch
      (for a stop in the last one: see ``max_epochs`` reached and train nothing), and one
      written by the hooks is even counted twice when Lightning continues it. The data
      (``consumed > 0``) is in the middle of ``epoch``: the counters become "started, not
      processed".
    * **An epoch never counted as started.** After a resume from the checkpoint of an
      epoch's last batch, Lightning moves to the next epoch without counting it as started,
      so the checkpoint of that epoch's last batch looks like the time between two epochs
      and the resume would read the epoch again. The data is at the start of ``epoch``
      (``consumed == 0``) and Lightning counts no epoch ``epoch - 1`` as started: it is.
    * **A finished epoch with its batch count.** A checkpoint written in the epoch-end
      hooks of ``epoch - 1``, or after them (``last.ckpt`` at the fit's end), keeps that
      epoch's batch count; with ``max_steps`` set Lightning always resumes as a restart, and
      trains one batch more in the finished epoch, or none of the next. The data is at the
      start of ``epoch``: the counters become "between two epochs", no batch of ``epoch``
      trained.

    Otherwise the batch counters are left as they are: they count the batches of that
    epoch.

    Args:
        checkpoint: The checkpoint dict Lightning loaded; changed in place.
        epoch: The data's epoch in the checkpoint.
        consumed: Global samples of that epoch trained.

    Returns:
        Whether the counters were rewritten.

    Example:
        >>> ckpt = {"loops": {"fit_loop": {"epoch_progress": {
        ...     "current": {"ready": 2, "started": 2, "processed": 2, "completed": 1},
        ...     "total": {"ready": 2, "started": 2, "processed": 2, "completed": 1}}}}}
        >>> match_epoch_counters(ckpt, epoch=1, consumed=32)
        True
        >>> ckpt["loops"]["fit_loop"]["epoch_progress"]["current"]
        {'ready': 2, 'started': 2, 'processed': 1, 'completed': 1}
    """
    loops = checkpoint.get("loops")
    fit = loops.get("fit_loop") if isinstance(loops, dict) else None
    if not isinstance(fit, dict):
        return False
    progress, batches = fit.get("epoch_progress"), fit.get("epoch_loop.batch_progress")
    if not isinstance(progress, dict):
        return False
    current, total = progress.get("current"), progress.get("total")
    if not all(isinstance(c, dict) and all(k in c for k in _COUNTS) for c in (current, total)):
        return False
    assert isinstance(current, dict)
    counts = (current["ready"], current["started"], current["processed"], current["completed"])
    if consumed > 0:
        in_epoch = counts[3] == epoch or counts[2] == epoch + 1  # its end counted, or after
        if not in_epoch or counts[2:] == (epoch, epoch):
            return False  # not the epoch that just ended, or already in its middle
        _set_epochs(progress, started=epoch + 1, done=epoch)  # in the middle of `epoch`
        return True
    trained: Any = batches.get("current") if isinstance(batches, dict) else None
    if epoch == 0 or not isinstance(trained, dict) or not trained.get("processed"):
        return False
    if counts == (epoch - 1,) * 4:  # never counted as started: after its last batch
        _set_epochs(progress, started=epoch, done=epoch - 1)
        return True
    if counts in ((epoch, epoch, epoch, epoch - 1), (epoch,) * 4):
        # In the epoch-end hooks of `epoch - 1`, or after them, with its batch count still
        # there: between two epochs, where nothing of `epoch` was trained.
        _set_epochs(progress, started=epoch, done=epoch)
        for name in _COUNTS:
            trained[name] = 0
        assert isinstance(batches, dict)
        batches["is_last_batch"] = False
        return True
    return False


def _set_epochs(progress: dict[str, Any], *, started: int, done: int) -> None:
    """Epoch counters: ``started`` epochs ready and started, ``done`` processed and completed."""
    counters = {"ready": started, "started": started, "processed": done, "completed": done}
    progress["current"], progress["total"] = dict(counters), dict(counters)


def data_position(checkpoint: dict[str, Any], datamodule_key: str | None) -> tuple[int, int] | None:
    """``(epoch, consumed)`` of the training loader a checkpoint holds, if there is one.

    Read from the DataModule's state (``datamodule_key``), else from the fit loop's loader
    states (a loader of this package passed to ``fit`` directly); ``None`` when there is no
    position, or more than one.
    """
    if datamodule_key is not None:
        state = checkpoint.get(datamodule_key)
        loader = state.get("train_loader") if isinstance(state, dict) else None
        if isinstance(loader, dict) and "consumed" in loader:
            return int(loader["epoch"]), int(loader["consumed"])
    loops = checkpoint.get("loops")
    fit = loops.get("fit_loop") if isinstance(loops, dict) else None
    inner = fit.get("state_dict") if isinstance(fit, dict) else None
    loaders = inner.get("combined_loader") if isinstance(inner, dict) else None
    found = [
        (int(x["epoch"]), int(x["consumed"]))
        for x in (loaders if isinstance(loaders, list) else [])
        if isinstance(x, dict) and x.get("kind") == "StatefulDataLoader" and "consumed" in x
    ]
    return found[0] if len(found) == 1 else None
