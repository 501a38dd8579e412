"""A Fabric training loop that resumes exactly with ``fabric.save`` and ``fabric.load``.

What it shows:

* ``fabric_dataloader(fabric, dataset, ...)``: a resumable loader whose sampler takes rank
  and world size from ``fabric`` and which Fabric neither replaces nor wraps;
* the loader in the state next to the model and the optimizer:
  ``fabric.save(path, {"model": ..., "optimizer": ..., "data": loader, ...})``;
* a run that "dies" after step ``k`` and a new process's worth of objects that
  ``fabric.load`` the last checkpoint and go on. The batches after the resume, and the
  final weights, equal those of an uninterrupted run.

Run::

    python examples/fabric_loop.py                 # 5 epochs of 313 steps
    python examples/fabric_loop.py --smoke         # a few seconds
    python examples/fabric_loop.py --devices 2     # two CPU processes (DDP, gloo)

It prints ``Verdict: IDENTICAL`` (exit status 0) or ``Verdict: DIFFERENT`` (exit status 1).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from _common import inspect_hint, quiet_lightning, run_folder
from lightning.fabric import Fabric

from lightning_resumable_data.fabric import FabricDataLoader, fabric_dataloader


class Regression(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``n`` samples of a noisy linear function of 8 inputs."""

    def __init__(self, n: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=generator)
        self.y = self.x @ torch.arange(1.0, 9.0) + 0.1 * torch.randn(n, generator=generator)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def train(
    fabric: Fabric, args: argparse.Namespace, checkpoint: Path, stop_after: int | None = None
) -> tuple[list[float], torch.nn.Module]:
    """Train for ``args.epochs`` epochs, resuming from ``checkpoint`` if it exists.

    Saves the checkpoint after every ``args.save_every`` steps; with ``stop_after`` it
    returns after that many steps, as a crashed process would (without saving more).
    """
    fabric.seed_everything(0)  # the same initial weights in every run
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    loader: FabricDataLoader = fabric_dataloader(
        fabric, Regression(args.samples), batch_size=args.batch_size, seed=1234
    )
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "data": loader, "step": 0}
    if checkpoint.exists():
        fabric.load(checkpoint, state)  # O(1) for the data: nothing is replayed
        fabric.print(f"   resumed at step {state['step']}, epoch {loader.epoch}")

    losses: list[float] = []
    while loader.epoch < args.epochs:  # the loader counts epochs, across resumes
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            state["step"] += 1
            losses.append(loss.detach().item())
            if state["step"] % args.save_every == 0:
                fabric.save(checkpoint, state)
            if stop_after is not None and state["step"] == stop_after:
                return losses, model
    return losses, model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a run of a few seconds")
    parser.add_argument("--devices", type=int, default=1, help="CPU processes (DDP if > 1)")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--save-every", type=int, default=50)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a tiny model: more threads only add overhead
    if args.smoke:
        args.samples, args.epochs, args.save_every = 640, 3, 5
    quiet_lightning()
    fabric = Fabric(accelerator="cpu", devices=args.devices)
    fabric.launch()

    directory = run_folder("fabric_loop").resolve() if fabric.global_rank == 0 else None
    directory = fabric.broadcast(directory)  # every rank writes and reads the same path
    assert directory is not None
    steps_per_epoch = -(-args.samples // (args.batch_size * fabric.world_size))
    crash = steps_per_epoch + steps_per_epoch // 2 + 2  # in epoch 1, after a save

    saved = crash - crash % args.save_every  # the last checkpoint before the crash

    fabric.print(f"1. uninterrupted run: {args.epochs} epochs of {steps_per_epoch} steps")
    reference, reference_model = train(fabric, args, directory / "reference.ckpt")
    fabric.print(f"2. a run that dies after step {crash}; its last checkpoint is of step {saved}")
    before, _ = train(fabric, args, directory / "run.ckpt", stop_after=crash)
    fabric.print("3. a fresh start that loads the run's last checkpoint")
    after, resumed_model = train(fabric, args, directory / "run.ckpt")

    same_losses = before[:saved] + after == reference
    same_weights = all(
        torch.equal(a, b)
        for a, b in zip(reference_model.parameters(), resumed_model.parameters(), strict=True)
    )
    fabric.print(
        f"   {len(reference)} steps: losses {'equal' if same_losses else 'differ'}, final "
        f"weights {'equal' if same_weights else 'differ'}"
    )
    verdict = same_losses and same_weights
    fabric.print(f"Verdict: {'IDENTICAL' if verdict else 'DIFFERENT'}")
    fabric.print(inspect_hint(directory.relative_to(Path.cwd()) / "run.ckpt"))
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())
