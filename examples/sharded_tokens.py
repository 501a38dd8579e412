"""Token shards on disk: write them, train over them, crash, resume exactly, change world size.

What it shows:

* ``write_token_shards``: a stream of tokenised documents cut into fixed-length samples and
  written as flat ``.bin`` shards with an ``index.json`` (the common LM-pretraining layout);
* ``open_token_shards`` + ``ShardedDataLoader``: one shard (or two) resident at a time,
  the next shard loaded in the background, batches prefetched, in a plain PyTorch loop;
* the data position saved next to the model with ``torch.save``: a few plain numbers;
* a run that dies mid-shard, resumed from its last checkpoint: the batches after the
  resume equal the uninterrupted run's (no replay of a partly read shard);
* the same checkpoint resumed on two data-parallel ranks (simulated here in one process):
  the rest of the epoch is split between them and every sample is read exactly once.

Run::

    python examples/sharded_tokens.py            # 32 shards, about a minute
    python examples/sharded_tokens.py --smoke    # a few seconds
    python examples/sharded_tokens.py --url s3://bucket/shards  # shards in object storage

With ``--url`` the shards are read from object storage (any fsspec URL, with the
``[remote]`` extra; credentials and ``AWS_ENDPOINT_URL`` from the environment) through a
local cache bounded by ``--cache-mib``, instead of being written locally.
The URL must hold shards written by ``write_token_shards`` with ``seq_len=33``, ``uint16``.

It prints the verdicts and exits with status 0 if both hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import run_folder

from lightning_resumable_data import ShardedDataLoader, open_token_shards, write_token_shards
from lightning_resumable_data.remote import ShardCache

CACHE: ShardCache | None = None  # set by --url: where remote shards are downloaded

VOCAB, EOS, SEQ_LEN = 512, 0, 32  # a sample holds SEQ_LEN + 1 tokens (inputs and targets)


def documents(count: int, seed: int) -> Iterator[np.ndarray[Any, Any]]:
    """Pseudo-tokenised documents of random length, each ending with EOS."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        body = rng.integers(1, VOCAB, size=int(rng.integers(20, 400)))
        yield np.append(body, EOS)


def collate_tokens(samples: list[np.ndarray[Any, Any]]) -> torch.Tensor:
    """Stack ``uint16`` samples into an ``int64`` batch (module level: workers pickle it)."""
    return torch.from_numpy(np.stack(samples).astype(np.int64))


def make_loader(directory: Path | str, batch_size: int, rank: int = 0, world: int = 1) -> Any:
    """A sharded loader over the shards of ``directory`` (or a URL) for ``rank`` of ``world``."""
    return ShardedDataLoader(
        open_token_shards(directory, cache=CACHE),  # reads index.json; loads no shard
        batch_size=batch_size,
        seed=2024,
        dp_rank=rank,
        num_replicas=world,
        num_shard_prefetches=1,  # the next shard is loaded while this one is read
        num_microbatch_prefetches=2,  # two batches kept ready by a background thread
        collate_fn=collate_tokens,
    )


class TinyLM(torch.nn.Module):
    """Embedding and linear head: predicts the next token."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 32)
        self.head = torch.nn.Linear(32, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))  # type: ignore[no-any-return]


def train(
    directory: Path | str,
    args: argparse.Namespace,
    checkpoint: Path,
    stop_after: int | None = None,
) -> list[int]:
    """Train for ``args.epochs`` epochs; return a fingerprint of every batch it read.

    Resumes from ``checkpoint`` if it exists and saves it every ``args.save_every`` steps;
    with ``stop_after`` it returns after that many steps, as a crashed process would.
    """
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = make_loader(directory, args.batch_size)
    step = 0
    if checkpoint.exists():
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["data"])  # O(1): no shard is read to skip samples
        step = saved["step"]
        print(f"   resumed at step {step}: data state {json.dumps(saved['data'])}")
    seen: list[int] = []
    try:
        while loader.epoch < args.epochs:
            for batch in loader:
                seen.append(hash(batch.numpy().tobytes()))
                logits = model(batch[:, :-1])
                loss = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), batch[:, 1:].flatten()
                )
                optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                step += 1
                if step % args.save_every == 0:
                    state = {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "data": loader.state_dict(),
                        "step": step,
                    }
                    torch.save(state, checkpoint)
                if step == stop_after:
                    return seen
    finally:
        loader.close()  # stops the prefetch threads and the worker process
    return seen


def elastic_check(
    directory: Path | str, args: argparse.Namespace, data_state: dict[str, Any]
) -> bool:
    """Resume a data state on two ranks; is every sample of that epoch read exactly once?"""
    epoch, consumed = data_state["epoch"], data_state["consumed"]
    # What one rank read of that epoch before the checkpoint: the first `consumed` samples.
    single = make_loader(directory, args.batch_size)
    single.load_state_dict({**data_state, "consumed": 0})
    before = [row.tobytes() for batch in single for row in batch.numpy()][:consumed]
    single.close()
    # The rest of the epoch, on two ranks that both load the same state.
    ranks = [make_loader(directory, args.batch_size, rank, world=2) for rank in range(2)]
    after: list[bytes] = []
    for loader in ranks:
        loader.load_state_dict(data_state)
        after += [row.tobytes() for batch in loader for row in batch.numpy()]
        loader.close()
    every = Counter(before + after)
    total = sum(len(reader) for reader in open_token_shards(directory, cache=CACHE))
    duplicates = sum(every.values()) - len(every)  # wrap-around padding of the last row
    ok = len(every) == total and duplicates < 2
    print(
        f"   epoch {epoch}: {len(before)} samples on 1 rank, then {len(after)} on 2 ranks; "
        f"{len(every)} of {total} distinct samples read, {duplicates} padded: "
        f"{'exactly once' if ok else 'NOT exactly once'}"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a run of a few seconds")
    parser.add_argument("--documents", type=int, default=5_000)
    parser.add_argument("--tokens-per-shard", type=int, default=1 << 15)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--save-every", type=int, default=25)
    parser.add_argument("--url", help="read the shards from this URL (s3://, https://, ...)")
    parser.add_argument("--cache-mib", type=float, default=64.0, help="cache bound with --url")
    args = parser.parse_args(argv)
    global CACHE
    torch.set_num_threads(1)  # a tiny model: more threads only add overhead
    if args.smoke:
        args.documents, args.tokens_per_shard, args.save_every = 200, 4096, 5

    root = run_folder("sharded_tokens")  # kept: shards and checkpoints, for a look after
    directory: Path | str = root / "shards"
    if args.url:  # shards in object storage, downloaded into a bounded local cache
        directory = args.url
        CACHE = ShardCache(root / "cache", max_bytes=int(args.cache_mib * (1 << 20)))
        total_samples = sum(len(reader) for reader in open_token_shards(args.url, cache=CACHE))
        print(f"reading {total_samples} samples from {args.url}")
    else:
        index = write_token_shards(
            directory,
            documents(args.documents, seed=0),
            seq_len=SEQ_LEN + 1,
            dtype=np.uint16,
            tokens_per_shard=args.tokens_per_shard,
        )
        total_samples = index.total_samples
        print(
            f"wrote {len(index.files)} shards, {index.total_samples} samples of "
            f"{index.seq_len} tokens ({index.dropped_tokens} trailing tokens dropped)"
        )
    steps_per_epoch = -(-total_samples // args.batch_size)
    crash = steps_per_epoch + steps_per_epoch // 2 + 3  # mid-shard in epoch 1

    print(f"1. uninterrupted run: {args.epochs} epochs of {steps_per_epoch} steps")
    reference = train(directory, args, root / "reference.pt")
    print(f"2. a run that dies after step {crash}, then resumes from its last checkpoint")
    checkpoint = root / "run.pt"
    before = train(directory, args, checkpoint, stop_after=crash)
    saved = torch.load(checkpoint)
    after = train(directory, args, checkpoint)
    identical = before[: saved["step"]] + after == reference
    print(f"   {len(reference)} batches: {'IDENTICAL' if identical else 'DIFFERENT'}")
    print("3. the same checkpoint resumed on 2 ranks")
    elastic = elastic_check(directory, args, saved["data"])
    if CACHE is not None:
        print(f"   cache: {CACHE.cached_bytes()} bytes kept (bound {CACHE.max_bytes})")
        CACHE.close()
        CACHE = None

    verdict = identical and elastic
    print(f"Verdict: {'PASS' if verdict else 'FAIL'}")
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())
