"""``edgekit sign BUNDLE --key KEY`` and ``edgekit verify BUNDLE --signers FILE``: OpenSSH signatures on bundles."""

from __future__ import annotations

import argparse
from typing import Any

from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("sign", help="sign a bundle's manifest with your OpenSSH key (writes manifest.json.sig)")
    s.add_argument("bundle", help="bundle directory (edgekit build ... -o DIR)")
    s.add_argument(
        "--key",
        required=True,
        help="OpenSSH private key (e.g. ~/.ssh/id_ed25519); a passphrase-protected one is used through ssh-agent "
        "(ssh-add KEY, with KEY.pub beside it)",
    )
    s.add_argument(
        "--identity",
        help="the name devices trust this key as, for the printed allowed_signers line (default: the key's comment)",
    )
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_sign)

    s = sub.add_parser("verify", help="check a bundle's files and signature as a device that trusts FILE's keys")
    s.add_argument("bundle", help="bundle directory")
    s.add_argument(
        "--signers", required=True, help='OpenSSH allowed_signers file (IDENTITY namespaces="edgekit-bundle" KEY)'
    )
    s.add_argument("--identity", help="require this signer (default: whichever trusted key signed it)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run_verify)


def _signed_text(r: dict[str, Any]) -> str:
    return (
        f"signed {r['name']} {r['bundle_id']} with {r['key']}: {r['signature']}\n"
        f"a device trusts it with `edgekit device trust add KEY.pub`, or this allowed_signers line:\n"
        f"  {r['allowed_signers']}\n"
    )


def run_sign(args: argparse.Namespace) -> int:
    from ..signing import sign

    emit(args, sign(args.bundle, args.key, args.identity), _signed_text)
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from ..signing import verify

    result = verify(args.bundle, args.signers, args.identity)
    emit(args, result, lambda r: f"{r['name']} {r['bundle_id']}: files intact, signed by {r['identity']}\n")
    return 0
