"""HMAC-SHA256 signatures of compiled files: proof that a holder of the key wrote the file.

The signature covers the file header (which holds the manifest's SHA-256) and the manifest (which holds
every part's SHA-256), so it vouches for every byte once those checksums are verified. The key comes from
the caller, or else from `FUSEGRAPH_SIGN_KEY`; this module is the only one that reads that variable.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from .. import debug
from ..errors import CompiledFileError

SIGNATURE_BYTES = 32

Key = bytes | bytearray | str


def resolve_key(key: Key | None) -> bytes | None:
    """The key to sign or verify with: `key`, else the environment's, else None (no signing)."""
    if key is None:
        key = debug.sign_key()
        if key is None:
            return None
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)):
        raise CompiledFileError(f"a signing key is bytes or str, not {type(key).__name__}")
    if not key:
        raise CompiledFileError("the signing key is empty")
    return bytes(key)


def sign(key: bytes, message: Iterable[bytes | memoryview]) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for chunk in message:
        mac.update(chunk)
    return mac.digest()


def verify(key: bytes, message: Iterable[bytes | memoryview], signature: bytes) -> bool:
    # compare_digest: the time taken says nothing about how much of the signature matched
    return hmac.compare_digest(sign(key, message), signature)
