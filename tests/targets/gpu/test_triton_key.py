"""The quick hash of Triton's installation (triton_key.py): what it reads, when it changes, and that a
process's compiles key on it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from fusegraph.targets.gpu.triton_key import elf_build_id, quick_key


def elf(build_id: bytes | None, *, other_notes: int = 1, body: bytes = b"code") -> bytes:
    """A minimal 64-bit little-endian ELF file: one PT_NOTE segment holding `other_notes` notes of
    another kind, then the GNU build ID note (when given)."""
    notes = b""
    for _ in range(other_notes):
        notes += struct.pack("<III", 4, 4, 1) + b"GNU\0" + b"abcd"
    if build_id is not None:
        notes += struct.pack("<III", 4, len(build_id), 3) + b"GNU\0" + build_id + b"\0" * (-len(build_id) % 4)
    phoff, phentsize = 64, 56
    note_at = phoff + phentsize
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x20, phoff)
    struct.pack_into("<HH", head, 0x36, phentsize, 1)
    phdr = struct.pack("<IIQQQQQQ", 4, 4, note_at, 0, 0, len(notes), len(notes), 4)
    return bytes(head) + phdr + notes + body


def installation(root: Path, build_id: bytes | None = b"\x11" * 20) -> Path:
    """A folder laid out as Triton's package is, as far as its key reads it."""
    for rel, text in {"runtime/cache.py": "cache", "compiler/compiler.py": "compile", "backends/nvidia/compiler.py": "nv",
                      "language/core.py": "core", "language/README.md": "not a source"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "_C").mkdir(exist_ok=True)
    (root / "_C" / "libtriton.so").write_bytes(elf(build_id))
    return root


def test_the_build_id_is_read_from_the_notes(tmp_path):
    path = tmp_path / "lib.so"
    path.write_bytes(elf(b"\x01\x02" * 10, other_notes=2))
    assert elf_build_id(path) == b"\x01\x02" * 10
    path.write_bytes(elf(None))
    assert elf_build_id(path) is None
    for damaged in (b"", b"\x7fELF\x01\x01" + b"\0" * 100, b"not an elf file at all" * 4, elf(b"\x05" * 20)[:130]):
        path.write_bytes(damaged)
        assert elf_build_id(path) is None


def test_the_key_changes_with_what_triton_hashes_and_nothing_else(tmp_path):
    root = installation(tmp_path / "triton")
    key = quick_key(root, "3.6.0")
    assert key == quick_key(installation(tmp_path / "copy"), "3.6.0")  # the same files elsewhere: the same key
    assert quick_key(root, "3.6.1") != key
    (root / "language" / "README.md").write_text("edited")  # not a source Triton hashes
    (root / "_C" / "libtriton.so").write_bytes(elf(b"\x11" * 20))  # rewritten unchanged (a new mtime)
    assert quick_key(root, "3.6.0") == key
    for rel in ("runtime/cache.py", "compiler/compiler.py", "backends/nvidia/compiler.py", "language/core.py"):
        changed = installation(tmp_path / rel.replace("/", "_"))
        (changed / rel).write_text("edited")
        assert quick_key(changed, "3.6.0") != key, rel
    added = installation(tmp_path / "added")
    (added / "compiler" / "extra.py").write_text("")
    assert quick_key(added, "3.6.0") != key
    assert quick_key(installation(tmp_path / "rebuilt", b"\x12" * 20), "3.6.0") != key
    grown = installation(tmp_path / "grown")
    (grown / "_C" / "libtriton.so").write_bytes(elf(b"\x11" * 20, body=b"more code"))
    assert quick_key(grown, "3.6.0") != key
    assert quick_key(installation(tmp_path / "stripped", None), "3.6.0") is None  # Triton's own hash then


def test_fusegraph_compiles_key_on_it_and_other_users_on_tritons_own():
    triton = pytest.importorskip("triton")
    import concurrent.futures

    import triton.runtime.cache as cache

    from fusegraph.targets.gpu import kernels
    from fusegraph.targets.gpu.device import triton as load
    from fusegraph.targets.gpu.triton_key import fusegraph_key, mark_thread, ours

    assert load() is triton
    expected = quick_key(Path(triton.__file__).parent, triton.__version__)
    if expected is None:
        pytest.skip("this Triton's library has no build ID")
    assert fusegraph_key() == expected
    with ours():
        assert cache.triton_key() == expected
    with kernels.compile_all():  # the compile scopes, on this thread
        assert cache.triton_key() == expected
    with concurrent.futures.ThreadPoolExecutor(1, initializer=mark_thread) as pool:  # and in their pools'
        assert pool.submit(cache.triton_key).result() == expected
    assert cache.triton_key() != expected  # anywhere else, Triton's own hash of its files
