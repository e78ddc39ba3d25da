"""Signed bundles: a detached Ed25519 signature over monitor.json, checked against the public
keys a deployment trusts (`--trust PUBKEY`; signing and key pairs: training/export/sign.py).

monitor.json lists the sha256 of every other file of the bundle, so a signature over its bytes
covers the whole bundle: a changed graph either fails its hash or needs a new monitor.json, which
fails the signature. The signature lies beside it as `monitor.json.sig` (JSON):

    {"signature_format": 1, "algorithm": "ed25519", "signed_file": "monitor.json",
     "monitor_json_sha256": HEX, "public_key_id": ID, "signature": BASE64}

`public_key_id` is the first 16 hex digits of the sha256 of the raw 32-byte public key; it only
names the key in messages (the signature is what is checked). Keys are PEM files (PKCS#8 private,
SubjectPublicKeyInfo public), as `failfast keygen` writes them and `openssl` reads them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monitor.errors import BundleError

SIGNATURE = "monitor.json.sig"
"""The detached signature's file name, beside monitor.json (not listed in monitor.json)."""
SIGNATURE_FORMAT = 1
MAX_PEM_BYTES = 64 * 1024


class TrustError(BundleError):
    """A bundle that is not signed by a trusted key, or a key that cannot be read; the message
    names the file that failed."""


def key_id(public: Any) -> str:
    """The short name of an Ed25519 public key (16 hex digits of the sha256 of its raw bytes)."""
    from cryptography.hazmat.primitives import serialization

    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_public_key(path: str | Path) -> Any:
    """The Ed25519 public key of a PEM file; TrustError naming the file otherwise."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    p = Path(path)
    try:
        data = p.read_bytes()[:MAX_PEM_BYTES]
    except OSError as e:
        raise TrustError(f"{p}: cannot read the trusted public key: {e.strerror or e}") from e
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as e:
        hint = " (this is a private key: pass the .pub file)" if b"PRIVATE KEY" in data else ""
        raise TrustError(f"{p}: not a PEM public key{hint}") from e
    if not isinstance(key, Ed25519PublicKey):
        raise TrustError(f"{p}: a {type(key).__name__}, not an Ed25519 public key")
    return key


def signature_record(raw_manifest: bytes, private: Any) -> dict[str, Any]:
    """The content of monitor.json.sig for monitor.json's bytes, signed with `private`."""
    return {
        "signature_format": SIGNATURE_FORMAT,
        "algorithm": "ed25519",
        "signed_file": "monitor.json",
        "monitor_json_sha256": hashlib.sha256(raw_manifest).hexdigest(),
        "public_key_id": key_id(private.public_key()),
        "signature": base64.b64encode(private.sign(raw_manifest)).decode("ascii"),
    }


def verify_manifest(root: Path, raw_manifest: bytes, trusted: Sequence[str | Path]) -> str:
    """Check that `raw_manifest` (monitor.json's bytes as read once for loading) is signed by
    one of the `trusted` public key files; returns the signer's key id.

    Raises:
        TrustError: a trusted key cannot be read, the signature file is missing or malformed,
            signed by another key, or does not verify (monitor.json changed after signing).
    """
    from cryptography.exceptions import InvalidSignature

    keys = {key_id(k): (k, p) for p in trusted for k in [load_public_key(p)]}
    names = ", ".join(f"{i} ({p})" for i, (_, p) in keys.items())
    spath, mpath = root / SIGNATURE, root / "monitor.json"
    try:
        text = spath.read_bytes()[:MAX_PEM_BYTES]
    except FileNotFoundError:
        raise TrustError(
            f"{spath}: missing: the bundle is not signed, and --trust accepts only bundles "
            f"signed by {names} (sign it: failfast sign {root} --key PRIVATE_KEY)"
        ) from None
    except OSError as e:
        raise TrustError(f"{spath}: cannot read the signature: {e.strerror or e}") from e
    try:
        rec = json.loads(text)
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        if rec.get("signature_format") != SIGNATURE_FORMAT or rec.get("algorithm") != "ed25519":
            raise ValueError(
                f"signature format {rec.get('signature_format')!r}, algorithm "
                f"{rec.get('algorithm')!r}; this monitor reads format {SIGNATURE_FORMAT}, ed25519"
            )
        signature = base64.b64decode(str(rec.get("signature")), validate=True)
    except ValueError as e:
        raise TrustError(f"{spath}: malformed signature file: {e}") from e
    signer = str(rec.get("public_key_id"))
    if signer not in keys:
        raise TrustError(
            f"{spath}: signed by key {signer}, which is not trusted (--trust: {names})"
        )
    try:
        keys[signer][0].verify(signature, raw_manifest)
    except InvalidSignature:
        actual = hashlib.sha256(raw_manifest).hexdigest()
        if rec.get("monitor_json_sha256") != actual:
            raise TrustError(
                f"{mpath}: changed after it was signed (sha256 {actual}, signed "
                f"{rec.get('monitor_json_sha256')}): the signature in {SIGNATURE} does not "
                f"verify with key {signer}"
            ) from None
        raise TrustError(
            f"{mpath}: the signature in {spath} does not verify with key {signer} (monitor.json "
            "or its signature changed after signing)"
        ) from None
    return signer
