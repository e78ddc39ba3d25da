"""Signing bundles: Ed25519 key pairs (`failfast keygen`) and the detached signature over a
bundle's monitor.json (`failfast export --sign KEY`, `failfast sign BUNDLE --key KEY`). What the
signature covers and how serving checks it: serving/trust.py.

The private key is an unencrypted PKCS#8 PEM that only its owner may read (mode 0600, refused
otherwise); keep it where bundles are built, never beside a served bundle.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from monitor.errors import BundleError
from serving.keys import KeyFileError, read_private
from serving.trust import SIGNATURE, key_id, signature_record


def load_private_key(path: str | Path) -> Any:
    """The Ed25519 private key of a PEM file only its owner may read; BundleError otherwise."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        data = read_private(path, "signing key", max_bytes=64 * 1024)
    except KeyFileError as e:
        raise BundleError(str(e)) from e
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:  # TypeError: an encrypted key
        raise BundleError(f"{path}: not an unencrypted PEM private key ({e})") from e
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(f"{path}: a {type(key).__name__}, not an Ed25519 private key")
    return key


def generate_keypair(out: str | Path) -> tuple[Path, Path, str]:
    """Write a new Ed25519 pair: `out` (private, mode 0600) and `out`.pub; never overwrites.

    Returns:
        (private path, public path, key id).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private_path, public_path = Path(out), Path(f"{out}.pub")
    for p in (private_path, public_path):
        if p.exists():
            raise BundleError(f"{p}: exists; refusing to overwrite a key")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public_path.write_bytes(pub)
    return private_path, public_path, key_id(key.public_key())


def sign_bundle(bundle: str | Path, key: Any) -> tuple[Path, str]:
    """Write `bundle`/monitor.json.sig: the signature of monitor.json's bytes by `key` (a key
    object, or a path for `load_private_key`), once the bundle loads with every hash checked.
    Written beside and renamed into place.

    Returns:
        (the signature file, the signer's key id).
    """
    import hashlib

    from serving.bundle import MANIFEST, load_bundle

    if isinstance(key, (str, Path)):
        key = load_private_key(key)
    root = Path(bundle)
    checked = load_bundle(root)  # sign only what verifies: every listed file, every field
    try:
        raw = (root / MANIFEST).read_bytes()
    except OSError as e:
        raise BundleError(f"{root / MANIFEST}: cannot read: {e.strerror or e}") from e
    if hashlib.sha256(raw).hexdigest() != checked.sha256:
        raise BundleError(f"{root / MANIFEST}: changed while it was being signed; sign again")
    rec = signature_record(raw, key)
    out = root / SIGNATURE
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    os.replace(tmp, out)
    return out, rec["public_key_id"]
