"""The cache directory on disk: per-file locks, byte accounting, reservations, eviction.

Layout of a cache directory shared by the processes of a node::

    <key>                      a complete, verified file (renamed into place)
    .<key>.<size>.<pid>.<tid>.tmp   a download in flight: counts at its full <size>
    .lock                      held (exclusive) while a process decides what to evict
    .locks/<key>               per-file lock: exclusive while downloading, shared while read

A reservation left by a process that died is removed by the next scan. Eviction never
deletes a file whose lock is held, so a file being read or downloaded stays.

Example:
    >>> import tempfile
    >>> directory = CacheDirectory(Path(tempfile.mkdtemp()), max_bytes=10)
    >>> for key in ("a", "b"):
    ...     temporary = directory.reserve(directory.path(key), 6, rank=None, priority={})
    ...     _ = temporary.write_bytes(b"x" * 6)
    ...     directory.commit(temporary, directory.path(key))
    >>> sorted(path.name for path, _, _ in directory.entries()), directory.cached_bytes()
    (['b'], 6)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

__all__ = ["CacheDirectory", "CacheLockTimeoutError"]

_TMP: Final = re.compile(r"^\.(?P<key>.+)\.(?P<size>\d+)\.(?P<pid>\d+)\.\d+\.tmp$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process
        return True
    return True


class CacheLockTimeoutError(TimeoutError):
    """Another process held a cache lock too long without progress (the message says which)."""


class CacheDirectory:
    """Files of one cache directory, bounded by ``max_bytes`` (``None``: unbounded).

    ``patience_s`` bounds every wait for a lock: a wait gives up with
    :class:`CacheLockTimeoutError` once the holder made no progress (its download did not
    grow) for that long. ``None`` waits as long as it takes.
    """

    def __init__(self, root: Path, max_bytes: int | None, patience_s: float | None = None) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.patience_s = patience_s

    def path(self, key: str) -> Path:
        """Where the file ``key`` is (or will be)."""
        return self.root / key

    def _lock_file(self, path: Path) -> int:
        locks = self.root / ".locks"
        for _ in range(2):  # the cache folder may be deleted between the mkdir and the open
            locks.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                return os.open(locks / path.name, os.O_RDWR | os.O_CREAT, 0o644)
        locks.mkdir(parents=True, exist_ok=True)
        return os.open(locks / path.name, os.O_RDWR | os.O_CREAT, 0o644)

    @contextlib.contextmanager
    def locked(self, path: Path, mode: int) -> Iterator[None]:
        """Hold ``path``'s lock (``fcntl.LOCK_EX`` or ``LOCK_SH``) while the block runs."""
        self.root.mkdir(parents=True, exist_ok=True)
        descriptor = self._lock_file(path)
        try:
            if self.patience_s is None:
                fcntl.flock(descriptor, mode)
            else:
                self._wait(descriptor, mode, path, self.patience_s)
            yield
        finally:
            os.close(descriptor)  # closing releases the lock

    def _wait(self, descriptor: int, mode: int, path: Path, patience_s: float) -> None:
        """Take the lock, polling; give up after ``patience_s`` without progress."""
        seen, deadline = self._progress(path), time.monotonic() + patience_s
        pause = 0.001
        while True:
            try:
                fcntl.flock(descriptor, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            now = self._progress(path)
            if now != seen:  # the holder's download grew: it is alive
                seen, deadline = now, time.monotonic() + patience_s
            elif time.monotonic() > deadline:
                raise CacheLockTimeoutError(
                    f"waited {patience_s:g} s for the lock of {path.name!r} in "
                    f"{str(self.root)!r} while its holder made no progress: another process "
                    "of this node is downloading or reading it and is stopped or stuck. Find "
                    "it (lsof on the file under .locks/), or raise RetryPolicy(timeout_s=...), "
                    "which sets this patience."
                )
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    def _progress(self, path: Path) -> tuple[int, ...]:
        """Sizes of the downloads of ``path`` in flight: they grow while it downloads."""
        prefix = f".{path.name}."
        sizes = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                    with contextlib.suppress(FileNotFoundError):
                        sizes.append(entry.stat().st_size)
        return tuple(sorted(sizes))

    def entries(self) -> list[tuple[Path, int, float]]:
        """(path, bytes counted, last use) of every file and live reservation."""
        out = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                if not entry.is_file() or entry.name == ".lock":
                    continue
                with contextlib.suppress(FileNotFoundError):
                    stat = entry.stat()
                    reserved = _TMP.match(entry.name)
                    if reserved and not _alive(int(reserved["pid"])):
                        os.unlink(entry.path)  # left by a process that died
                        continue
                    size = int(reserved["size"]) if reserved else stat.st_size
                    out.append((Path(entry.path), size, stat.st_mtime))
        return out

    def cached_bytes(self) -> int:
        """Bytes of the files plus the downloads in flight (all processes).

        Read under the directory's lock, so no eviction or reservation happens mid-count.
        """
        with self.locked(self.root / ".lock", fcntl.LOCK_SH):
            return sum(size for _, size, _ in self.entries())

    def reserve(
        self, target: Path, size: int, rank: int | None, priority: Mapping[str, int]
    ) -> Path | None:
        """Make room for ``size`` bytes and create the temporary file that counts them.

        ``priority`` maps file names to their place in the order ahead (0: read now).
        ``rank=None`` may evict any file not in use; a prefetch's ``rank`` only files
        needed after it. Returns ``None`` when there is no room.
        """
        name = f".{target.name}.{size}.{os.getpid()}.{threading.get_ident()}.tmp"
        temporary = target.with_name(name)
        with self.locked(self.root / ".lock", fcntl.LOCK_EX):
            if self.max_bytes is not None and not self._make_room(size, rank, priority):
                return None
            temporary.touch()
        return temporary

    def commit(self, temporary: Path, target: Path) -> None:
        """Rename a finished download into place, under the directory's lock.

        A scan that decides what to evict then never sees the file half-renamed (neither
        or both of its names), so it never counts it as free room.
        """
        with self.locked(self.root / ".lock", fcntl.LOCK_EX):
            os.replace(temporary, target)

    def _make_room(self, size: int, rank: int | None, priority: Mapping[str, int]) -> bool:
        assert self.max_bytes is not None  # only called with a bound
        entries = self.entries()
        total = sum(counted for _, counted, _ in entries) + size
        far = len(priority) + 1  # outside the order ahead: evicted first, oldest first
        victims = sorted(
            (entry for entry in entries if not _TMP.match(entry[0].name)),
            key=lambda entry: (-priority.get(entry[0].name, far), entry[2]),
        )
        for path, counted, _ in victims:
            if total <= self.max_bytes:
                break
            if rank is not None and priority.get(path.name, far) <= rank:
                break  # needed no later than the prefetch that asks for room
            descriptor = self._lock_file(path)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being downloaded or read
            else:
                path.unlink(missing_ok=True)
                total -= counted
            finally:
                os.close(descriptor)
        return total <= self.max_bytes
