"""The members of an uncompressed tar file, from its headers alone, grouped as WebDataset does.

:func:`scan_members` walks the 512-byte headers (ustar, GNU long names, PAX records) and
seeks over every member's data, so listing a shard of 10^4 images reads ~10^4 blocks, not
the images. It is stricter than :mod:`tarfile`, which ends the listing silently at the first
unreadable header: a header whose checksum is wrong, a member cut short by the end of the
file, or an archive without its end-of-archive block is an error that names the shard and
the sample next to the damage. :func:`group_members` applies WebDataset's rules
(``webdataset.tariterators``): the key is the member path up to the first dot of its
basename, the field is the rest (lower case); consecutive members with one key form a
sample; names without a dot and ``__meta__`` files are skipped.

Example:
    >>> import io, tarfile, tempfile
    >>> path = tempfile.mkdtemp() + "/s.tar"
    >>> with tarfile.open(path, "w") as tar:
    ...     for name, data in [("0.txt", b"a"), ("0.cls", b"1"), ("1.txt", b"bc")]:
    ...         info = tarfile.TarInfo(name)
    ...         info.size = len(data)
    ...         tar.addfile(info, io.BytesIO(data))
    >>> members, end = scan_members(path)
    >>> [(m.name, m.size) for m in members]
    [('0.txt', 1), ('0.cls', 1), ('1.txt', 2)]
    >>> [(key, fields) for key, fields, _ in group_members(path, members)]
    [('0', ['txt', 'cls']), ('1', ['txt'])]
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from typing import Final, NamedTuple

__all__ = ["Member", "group_members", "scan_members", "split_name"]

BLOCK: Final = 512
_REGULAR: Final = (b"0", b"\0", b"7")  # tarfile.REGULAR_TYPES, less sparse files
_COMPRESSED: Final = {
    b"\x1f\x8b": ("gzip", "gunzip"),
    b"BZh": ("bzip2", "bunzip2"),
    b"\xfd7zXZ\x00": ("xz", "unxz"),
    b"\x28\xb5\x2f\xfd": ("zstd", "unzstd"),
}
_KEY_FIELD: Final = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_SKIP_META: Final = re.compile(r"__[^/]*__($|/)")  # webdataset's tar_file_iterator skip_meta


class Member(NamedTuple):
    """A regular file of the tar: its path, where its data starts, and its size in bytes."""

    name: str
    offset: int
    size: int


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, field)`` of a member path as WebDataset splits it, or ``None`` if it is skipped.

    Example:
        >>> split_name("a/b/0001.seg.NPY"), split_name("README"), split_name("__meta__")
        (('a/b/0001', 'seg.npy'), None, None)
    """
    if "/" not in name and name.startswith("__") and name.endswith("__"):
        return None
    if _SKIP_META.match(name):
        return None
    match = _KEY_FIELD.match(name)
    if match is None:
        return None
    return match.group(1), match.group(2).lower()


def _number(field: bytes) -> int:
    """A numeric header field: NUL/space-terminated octal, or GNU base-256."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[0] == 0xFF else value
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax(data: bytes) -> dict[str, str]:
    """The ``key=value`` records of a PAX extended header (``"<length> <key>=<value>"``)."""
    records: dict[str, str] = {}
    position = 0
    while position < len(data) and data[position] != 0:
        length = int(data[position : data.index(b" ", position)])
        record = data[data.index(b" ", position) + 1 : position + length - 1]
        key, _, value = record.partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        position += length
    return records


class _Scan:
    """The state of one walk over the headers, and how to describe a place in it."""

    def __init__(self, path: str, file: io.FileIO, size: int) -> None:
        self.path, self.file, self.size = path, file, size
        self.members: list[Member] = []

    def where(self, name: str | None) -> str:
        """Which sample (index and key) the damage is in, or after, for an error message."""
        keys = [found[0] for member in self.members if (found := split_name(member.name))]
        samples = sum(1 for before, key in zip([None, *keys], keys, strict=False) if key != before)
        found = None if name is None else split_name(name)
        if found is not None:
            number = samples - 1 if keys and keys[-1] == found[0] else samples
            return f"in sample {number} (key {found[0]!r}, member {name!r})"
        if not keys:
            return "before its first sample"
        return f"after sample {samples - 1} (key {keys[-1]!r}, member {self.members[-1].name!r})"

    def fail(self, offset: int, problem: str, name: str | None = None) -> ValueError:
        return ValueError(
            f"WebDataset shard {self.path!r} is corrupt: {problem} at byte {offset}, "
            f"{self.where(name)}. The file is damaged or was cut short while it was written; "
            "restore it or write it again (webdataset.ShardWriter / TarWriter)."
        )

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.file.fileno(), size, offset)


def _check_sum(scan: _Scan, offset: int, header: bytes) -> None:
    try:
        stored = _number(header[148:156])
    except ValueError:
        problem = f"the header's checksum field {header[148:156]!r} is not octal"
        raise scan.fail(offset, problem) from None
    unsigned = sum(header) - sum(header[148:156]) + 8 * 32  # the field counts as spaces
    if stored == unsigned:
        return
    signed = unsigned - 256 * sum(b > 127 for b in header[:148] + header[156:])
    if stored != signed:
        raise scan.fail(
            offset, f"bad header checksum (stored {stored}, computed {unsigned}; not a tar header)"
        )


def scan_members(
    path: str | os.PathLike[str], shown: str | None = None
) -> tuple[list[Member], int]:
    """The regular members of the tar at ``path`` and the offset of its end-of-archive block.

    Only headers are read (and PAX/GNU long-name records, which are part of the next
    header); every member's data is skipped with a seek. Errors name the shard ``shown``
    (its URL, for a cached copy), else ``path``.

    Raises:
        ValueError: A compressed file, a bad header checksum, a member that runs past the
            end of the file, a sparse member, or no end-of-archive block; the message names
            the file, the byte offset and the sample (index and key) at or before the damage.
    """
    location = os.fspath(path)
    with open(location, "rb", buffering=0) as file:
        location = location if shown is None else shown
        scan = _Scan(location, file, os.fstat(file.fileno()).st_size)
        first = scan.read(0, 6)
        for magic, (compression, tool) in _COMPRESSED.items():
            if first.startswith(magic):
                raise ValueError(
                    f"WebDataset shard {location!r} is {compression}-compressed: random access "
                    f"needs an uncompressed tar. Decompress it once ({tool}) and open the .tar."
                )
        offset = 0
        long_name: str | None = None
        pax: dict[str, str] = {}
        while True:
            header = scan.read(offset, BLOCK)
            if len(header) < BLOCK:
                problem = "the end-of-archive block is missing" if not header else "a cut header"
                raise scan.fail(offset, f"{problem} (the file ends at byte {scan.size})")
            if header == bytes(BLOCK):
                return scan.members, offset
            _check_sum(scan, offset, header)
            kind = header[156:157]
            try:
                size = int(pax["size"]) if "size" in pax else _number(header[124:136])
            except ValueError:
                raise scan.fail(
                    offset, f"the size field {header[124:136]!r} is not a number"
                ) from None
            data = offset + BLOCK
            end = data + size
            name = pax.get("path", long_name)
            if name is None:
                name = _text(header[:100])
                prefix = _text(header[345:500]) if header[257:262] == b"ustar" else ""
                if prefix and header[257:265] != b"ustar  \0":  # POSIX prefix, not GNU
                    name = f"{prefix}/{name}"
            if size < 0 or end > scan.size:
                problem = f"the member needs bytes [{data}, {end}) but the file ends at byte"
                raise scan.fail(offset, f"{problem} {scan.size} (truncated)", name)
            if kind in (b"x", b"L"):  # the next member's PAX records, or GNU long name
                record = scan.read(data, size)
                if kind == b"x":
                    try:
                        pax = _pax(record)
                    except ValueError:
                        raise scan.fail(offset, "a malformed PAX extended header") from None
                else:
                    long_name = _text(record)
            elif kind in (b"g", b"K"):  # PAX globals, GNU long link name: no sample data
                pass
            else:
                if kind == b"S":
                    raise scan.fail(offset, "a sparse member (unsupported)", name)
                if kind in _REGULAR and not (kind == b"\0" and name.endswith("/")):
                    scan.members.append(Member(name, data, size))
                long_name, pax = None, {}
            offset = data + -(-size // BLOCK) * BLOCK


def group_members(
    path: str, members: list[Member]
) -> Iterator[tuple[str, list[str], list[Member]]]:
    """``(key, fields, members)`` of each sample, in file order, as WebDataset groups them.

    Raises:
        ValueError: A field appears twice in one sample (WebDataset refuses it too); the
            message names the file, the sample and the members.
    """
    key: str | None = None
    fields: list[str] = []
    group: list[Member] = []
    count = 0
    for member in members:
        found = split_name(member.name)
        if found is None:
            continue
        if found[0] != key:
            if key is not None:
                yield key, fields, group
                count += 1
            key, fields, group = found[0], [], []
        if found[1] in fields:
            raise ValueError(
                f"WebDataset shard {path!r}: sample {count} (key {key!r}) has field "
                f"{found[1]!r} twice (member {member.name!r} at byte {member.offset}); "
                "WebDataset refuses such a shard as well. Give each file of a sample its own "
                "extension, or distinct keys to distinct samples."
            )
        fields.append(found[1])
        group.append(member)
    if key is not None:
        yield key, fields, group
