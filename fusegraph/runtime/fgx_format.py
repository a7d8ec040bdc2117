"""The .fgx container: a fixed header, 64-byte-aligned parts, and a JSON manifest listing the parts.

    0      header, 128 bytes (HEADER below; bytes 0-31 keep their meaning in every format version)
    128    parts (IR text, weight blobs, target artifacts), each at a multiple of 64, zeros between
    ...    manifest: UTF-8 JSON, the last bytes of the file

Every byte is covered by a check: the header by its CRC-32, the manifest by the SHA-256 in the header,
each part by the SHA-256 in the manifest, the padding by being zero. Reading checks every offset and
length against the file size before it touches the bytes they name, so a damaged or hostile file gives
CompiledFileError, never a crash, a hang or an allocation larger than the file. See docs/fgx-format.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import re
import struct
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from .. import files
from ..errors import CompiledFileError
from . import signing

MAGIC = b"\x89FGX\r\n\x1a\n"  # PNG-style: a high byte and CR/LF/^Z catch text-mode and 7-bit damage
FORMAT_VERSION = 1
HEADER_SIZE = 128
ALIGNMENT = 64
FLAG_SIGNED = 1
KNOWN_FLAGS = FLAG_SIGNED
MAX_MANIFEST_BYTES = 64 << 20
MAX_PARTS = 1 << 20
PART_KINDS = ("ir", "weights", "artifact", "meta")
_PART_NAME = re.compile(r"[\w./-]{1,200}")
_SHA256 = re.compile(r"[0-9a-f]{64}")

# magic, version, header size, writer (fusegraph version), file length, manifest offset and length,
# flags, CRC-32 of the header (with this field zero), SHA-256 of the manifest, HMAC-SHA256 (or zeros)
HEADER = struct.Struct("<8sII16sQQQII32s32s")
assert HEADER.size == HEADER_SIZE
_CRC_AT, _SIG_AT = 60, 96


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    kind: str
    offset: int
    length: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _pad(n: int) -> int:
    return -n % ALIGNMENT


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


class ContainerWriter:
    """Streams parts to a seekable binary file, then the manifest, then goes back for the header."""

    def __init__(self, out: BinaryIO, writer_version: str):
        self._out = out
        self._writer = writer_version.encode("ascii")[:16]
        self._pos = HEADER_SIZE
        self.parts: list[Part] = []
        self._names: set[str] = set()
        out.write(bytes(HEADER_SIZE))

    def add(self, name: str, kind: str, data: bytes | memoryview, sha256: str | None = None) -> Part:
        if not _PART_NAME.fullmatch(name) or name in self._names or kind not in PART_KINDS:
            raise CompiledFileError(f"bad or duplicate part {name!r} of kind {kind!r}")
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        pad = _pad(self._pos)
        self._out.write(bytes(pad))
        part = Part(name, kind, self._pos + pad, len(view), sha256 or hashlib.sha256(view).hexdigest())
        self._out.write(view)
        self._pos = part.offset + part.length
        self.parts.append(part)
        self._names.add(name)
        return part

    def finish(self, manifest: dict[str, Any], sign_key: bytes | None) -> int:
        """Write the manifest (with the parts list) and the header; return the file size."""
        body = _json_bytes({**manifest, "format_version": FORMAT_VERSION, "parts": [p.to_json() for p in self.parts]})
        self._out.write(body)
        size = self._pos + len(body)
        flags = FLAG_SIGNED if sign_key else 0
        fields = [MAGIC, FORMAT_VERSION, HEADER_SIZE, self._writer, size, self._pos, len(body), flags, 0,
                  hashlib.sha256(body).digest(), bytes(signing.SIGNATURE_BYTES)]
        if sign_key:
            fields[-1] = signing.sign(sign_key, [HEADER.pack(*fields), body])
        header = bytearray(HEADER.pack(*fields))
        struct.pack_into("<I", header, _CRC_AT, zlib.crc32(header))
        self._out.seek(0)
        self._out.write(header)
        return size


class Container:
    """A validated .fgx file held as a read-only buffer (an mmap for files); parts are zero-copy views."""

    def __init__(self, data: memoryview, source: str):
        self.source = source
        self.data = data
        (_, self.version, _, writer, _, self._manifest_at, manifest_len, flags, _,
         self._manifest_sha, self.signature) = _read_header(data, source)
        self.writer = writer.rstrip(b"\0").decode("ascii", "replace")
        self.signed = bool(flags & FLAG_SIGNED)
        self.manifest_bytes = data[self._manifest_at:self._manifest_at + manifest_len]
        if hashlib.sha256(self.manifest_bytes).digest() != self._manifest_sha:
            raise self.error("its manifest is damaged (SHA-256 mismatch)")
        self.manifest = self._parse_manifest()
        self.parts = self._check_parts(self.manifest.get("parts"))

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike) -> Container:
        try:
            with open(files.open_regular(path, "compiled program"), "rb") as f:  # a FIFO: refused, not waited on
                if os.fstat(f.fileno()).st_size == 0:
                    raise CompiledFileError(f"{path}: the file is empty (not a compiled program)")
                # the map outlives the file object: arrays made from it keep it alive
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise CompiledFileError(f"cannot read compiled program {path}: {e.strerror or e}") from None
        return cls(memoryview(mapped), os.fspath(path))

    @classmethod
    def from_buffer(cls, data: bytes | bytearray | memoryview) -> Container:
        return cls(memoryview(data).cast("B").toreadonly(), "<buffer>")

    def error(self, message: str) -> CompiledFileError:
        return CompiledFileError(f"{self.source}: {message}")

    # -- parts ------------------------------------------------------------------------------------
    def part(self, name: str) -> memoryview:
        p = self.parts.get(name)
        if p is None:
            raise self.error(f"it has no part {name!r}")
        return self.data[p.offset:p.offset + p.length]

    def verify(self, names: list[str], threads: int | None = None) -> None:
        """Check the SHA-256 of these parts; hash large ones on several threads (hashlib drops the GIL)."""
        names = sorted(names, key=lambda n: -self.parts[n].length)
        big = sum(self.parts[n].length for n in names) > (16 << 20)
        workers = min(8, os.cpu_count() or 1) if threads is None else threads

        def digest(name: str) -> str:
            return hashlib.sha256(self.part(name)).hexdigest()

        if big and workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                digests = list(pool.map(digest, names))
        else:
            digests = [digest(n) for n in names]
        for name, got in zip(names, digests):
            if got != self.parts[name].sha256:
                raise self.error(f"part {name!r} is damaged (SHA-256 mismatch)")

    def check_signature(self, key: bytes) -> None:
        """Refuse an unsigned file or one whose header or manifest changed since it was signed. The
        parts are vouched for through their checksums in the manifest: verify them too."""
        if not self.signed:
            raise self.error("it is not signed, and a verify key was given")
        header = bytearray(self.data[:HEADER_SIZE])
        header[_CRC_AT:_CRC_AT + 4] = bytes(4)
        header[_SIG_AT:_SIG_AT + signing.SIGNATURE_BYTES] = bytes(signing.SIGNATURE_BYTES)
        if not signing.verify(key, [bytes(header), self.manifest_bytes], self.signature):
            raise self.error("its signature does not match (tampered with, or signed with another key)")

    # -- validation -------------------------------------------------------------------------------
    def _parse_manifest(self) -> dict[str, Any]:
        try:
            manifest = json.loads(bytes(self.manifest_bytes).decode("utf-8"), parse_constant=_no_constant)
        except (ValueError, RecursionError) as e:
            raise self.error(f"its manifest is not valid JSON: {e}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != "fgx":
            raise self.error("its manifest is not an fgx manifest")
        if manifest.get("format_version") != self.version:
            raise self.error(f"manifest format version {manifest.get('format_version')!r} differs from "
                             f"the header's {self.version}")
        return manifest

    def _check_parts(self, records: Any) -> dict[str, Part]:
        if not isinstance(records, list) or len(records) > MAX_PARTS:
            raise self.error("its manifest has no valid parts list")
        parts: dict[str, Part] = {}
        end = HEADER_SIZE
        for k, r in enumerate(records):
            if not isinstance(r, dict) or set(r) != {f.name for f in dataclasses.fields(Part)}:
                raise self.error(f"manifest part {k} is malformed")
            name, kind, offset, length, sha = r["name"], r["kind"], r["offset"], r["length"], r["sha256"]
            if (not isinstance(name, str) or not _PART_NAME.fullmatch(name) or name in parts
                    or kind not in PART_KINDS or not isinstance(sha, str) or not _SHA256.fullmatch(sha)):
                raise self.error(f"manifest part {k} is malformed")
            if (type(offset) is not int or type(length) is not int or length < 0 or offset % ALIGNMENT
                    or not end <= offset < end + ALIGNMENT or offset + length > self._manifest_at):
                raise self.error(f"part {name!r} lies outside the file or out of order "
                                 f"(offset {offset!r}, length {length!r})")
            self._check_zeros(end, offset)
            parts[name] = Part(name, kind, offset, length, sha)
            end = offset + length
        if self._manifest_at - end >= ALIGNMENT:
            raise self.error(f"{self._manifest_at - end} bytes before the manifest belong to no part")
        self._check_zeros(end, self._manifest_at)
        return parts

    def _check_zeros(self, start: int, stop: int) -> None:
        if bytes(self.data[start:stop]).strip(b"\0"):
            raise self.error(f"the padding at bytes {start}..{stop} is not zero (the file is damaged)")


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _read_header(data: memoryview, source: str) -> tuple:
    n = len(data)

    def error(message: str) -> CompiledFileError:
        return CompiledFileError(f"{source}: {message}")

    head = bytes(data[:min(n, HEADER_SIZE)])
    if head[:len(MAGIC)] != MAGIC[:min(n, len(MAGIC))]:
        hint = " (it looks like an ONNX model: parse it with fusegraph.parse_onnx)" if head[:1] == b"\x08" else ""
        raise error(f"not a fusegraph compiled program: it does not start with the fgx magic bytes{hint}")
    if n < 12:
        raise error(f"the file is truncated ({n} bytes)")
    (version,) = struct.unpack_from("<I", head, 8)
    if version > FORMAT_VERSION:
        writer = head[16:32].rstrip(b"\0").decode("ascii", "replace") if n >= 32 else "?"
        from .. import __version__

        raise error(f"it needs fgx format version {version} (it was written by fusegraph {writer}); this "
                    f"fusegraph {__version__} reads format versions up to {FORMAT_VERSION}: upgrade fusegraph")
    if version == 0:
        raise error("format version 0 is not a valid version (the file is damaged)")
    if n < HEADER_SIZE:
        raise error(f"the file is truncated ({n} bytes, the header alone is {HEADER_SIZE})")
    fields = HEADER.unpack(head)
    header = bytearray(head)
    header[_CRC_AT:_CRC_AT + 4] = bytes(4)
    if zlib.crc32(header) != fields[8]:
        raise error("its header is damaged (CRC mismatch)")
    _, _, header_size, _, length, m_at, m_len, flags, _, _, sig = fields
    if header_size != HEADER_SIZE or flags & ~KNOWN_FLAGS:
        raise error(f"its header is malformed (size {header_size}, flags {flags:#x})")
    if length != n:
        what = "truncated" if n < length else f"followed by {n - length} unexpected bytes"
        raise error(f"the file is {what}: its header says {length} bytes, it has {n}")
    if not HEADER_SIZE <= m_at or m_at + m_len != n or m_len > MAX_MANIFEST_BYTES:
        raise error(f"its manifest lies outside the file (offset {m_at}, length {m_len}, file {n})")
    if bool(flags & FLAG_SIGNED) != any(sig):
        raise error("its signature field disagrees with its signed flag")
    if sys.byteorder != "little":
        raise error("fgx files hold little-endian data; this machine is big-endian")
    return fields
