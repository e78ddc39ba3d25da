"""`failfast keygen | sign`: Ed25519 key pairs and bundle signatures (training/export/sign.py);
`failfast serve | score | watch | hook --trust PUBKEY` checks them (serving/trust.py)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    """Add the signing subcommands to the `failfast` parser."""
    p = sub.add_parser(
        "keygen",
        help="make an Ed25519 key pair for signing bundles (PATH private, PATH.pub public)",
    )
    p.add_argument("out", metavar="PATH", help="private key file to write (mode 0600)")
    p.set_defaults(func=_keygen)

    p = sub.add_parser(
        "sign",
        help="sign a bundle's monitor.json (writes monitor.json.sig), e.g. after `calibrate --out`",
    )
    p.add_argument("bundle", help="bundle folder")
    p.add_argument("--key", required=True, metavar="KEYFILE", help="private key (failfast keygen)")
    p.set_defaults(func=_sign)


def _keygen(args: argparse.Namespace) -> int:
    from monitor.errors import BundleError
    from training.export.sign import generate_keypair

    try:
        private, public, kid = generate_keypair(args.out)
    except (BundleError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"private key: {private} (mode 0600; keep it where bundles are built)")
    print(f"public key:  {public} (pass it to --trust where bundles are served)")
    print(f"key id:      {kid}")
    return 0


def _sign(args: argparse.Namespace) -> int:
    from monitor.errors import BundleError
    from training.export.sign import sign_bundle

    try:
        path, kid = sign_bundle(args.bundle, args.key)
    except (BundleError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"signed: {path} (key {kid})")
    return 0
