"""Signed bundles (issue 23): `failfast keygen`, `export --sign`, `sign`; `--trust PUBKEY` refuses
an unsigned, tampered or foreign-signed bundle with exit 2 naming the file that failed, and
loads a correctly signed one; the hook under --trust applies nothing of an untrusted bundle."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from monitor.errors import BundleError
from tests.bundle_helpers import claude_event, shared_bundle

pytest.importorskip("torch")
pytest.importorskip("cryptography")


def failfast(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from training.export.sign import generate_keypair

    root = tmp_path_factory.mktemp("keys")
    private, public, kid = generate_keypair(root / "signing")
    other_private, other_public, _ = generate_keypair(root / "other")
    return {"private": private, "public": public, "id": kid, "other": other_public}


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory)


@pytest.fixture
def signed(bundle, pair, tmp_path):
    from training.export.sign import sign_bundle

    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    sign_bundle(copy, pair["private"])
    return copy


def test_keygen_cli_modes_and_no_overwrite(tmp_path):
    p = failfast("keygen", str(tmp_path / "k"))
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600
    assert b"BEGIN PUBLIC KEY" in (tmp_path / "k.pub").read_bytes()
    assert "key id:" in p.stdout
    before = (tmp_path / "k").read_bytes()
    p = failfast("keygen", str(tmp_path / "k"))
    assert p.returncode == 2
    assert "refusing to overwrite" in p.stderr
    assert (tmp_path / "k").read_bytes() == before


def test_export_sign_cli_then_score_and_serve_trust_it(bundle, pair, fixtures_dir, tmp_path):
    model = bundle.parent / "model"  # the classifier folder the shared bundle was exported from
    out = tmp_path / "exported"
    p = failfast("export", "--model", str(model), "--out", str(out), "--sign", str(pair["private"]))
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"key {pair['id']}" in p.stdout
    sig = json.loads((out / "monitor.json.sig").read_text())
    assert (sig["algorithm"], sig["public_key_id"]) == ("ed25519", pair["id"])
    assert "monitor.json.sig" not in json.loads((out / "monitor.json").read_text())["files"]
    transcript = fixtures_dir / "claude_code_constructed_session.jsonl"
    from serving.scorer import Scorer

    Scorer.load(out, trust=[pair["public"]]).close()  # a correctly signed bundle loads
    # a changed threshold after signing: refused, monitor.json named
    m = json.loads((out / "monitor.json").read_text())
    m["target"] = 0.5
    (out / "monitor.json").write_text(json.dumps(m))
    trust = ["--trust", str(pair["public"])]
    for cmd in (
        ["score", "--bundle", str(out), *trust, str(transcript)],
        ["serve", "--bundle", str(out), *trust, "--port", "1"],
    ):
        p = failfast(*cmd)
        assert p.returncode == 2, (cmd, p.stderr[-2000:])
        assert f"{out / 'monitor.json'}: changed after it was signed" in p.stderr


def test_export_sign_with_an_open_key_fails_before_exporting(bundle, pair, tmp_path):
    key = tmp_path / "open.pem"
    shutil.copyfile(pair["private"], key)
    key.chmod(0o644)
    out = tmp_path / "never"
    p = failfast(
        "export", "--model", str(bundle.parent / "model"), "--out", str(out), "--sign", str(key)
    )
    assert p.returncode == 2
    assert "chmod 600" in p.stderr
    assert not out.exists()


def test_signed_bundle_loads_and_each_tamper_names_its_file(signed, pair):
    from serving.bundle import load_bundle
    from serving.manifest import Manifest, write_manifest

    trust = [pair["public"]]
    assert load_bundle(signed, trust=trust).sha256
    assert load_bundle(signed, trust=[pair["other"], pair["public"]])  # either key will do
    with pytest.raises(BundleError, match=r"monitor\.json\.sig: signed by key .* not trusted"):
        load_bundle(signed, trust=[pair["other"]])
    # a graph changed, its hash left: the file hash names the graph
    graph = signed / "model.onnx"
    original = graph.read_bytes()
    graph.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(BundleError, match=rf"{graph}: sha256 does not match"):
        load_bundle(signed, trust=trust, verify=False)  # --trust checks every hash regardless
    # ... and the hashes recomputed: monitor.json changed, the signature names it
    manifest = json.loads((signed / "monitor.json").read_text())
    write_manifest(signed, Manifest.model_validate(manifest))
    with pytest.raises(
        BundleError, match=rf"{signed / 'monitor.json'}: changed after it was signed"
    ):
        load_bundle(signed, trust=trust)
    load_bundle(signed)  # what the hashes alone would have let through
    # a signature file swapped in from another monitor.json
    sig = json.loads((signed / "monitor.json.sig").read_text())
    sig["monitor_json_sha256"] = load_bundle(signed).sha256
    (signed / "monitor.json.sig").write_text(json.dumps(sig))
    with pytest.raises(BundleError, match=r"monitor\.json: the signature in .* does not verify"):
        load_bundle(signed, trust=trust)
    (signed / "monitor.json.sig").write_text("{not json")
    with pytest.raises(BundleError, match=r"monitor\.json\.sig: malformed signature file"):
        load_bundle(signed, trust=trust)
    (signed / "monitor.json.sig").unlink()
    with pytest.raises(BundleError, match=r"monitor\.json\.sig: missing: the bundle is not signed"):
        load_bundle(signed, trust=trust)


def test_trust_key_problems_name_the_key_file(signed, pair, tmp_path):
    from serving.bundle import load_bundle

    with pytest.raises(BundleError, match=r"absent\.pub: cannot read the trusted public key"):
        load_bundle(signed, trust=[tmp_path / "absent.pub"])
    with pytest.raises(BundleError, match="this is a private key"):
        load_bundle(signed, trust=[pair["private"]])
    junk = tmp_path / "junk.pub"
    junk.write_text("hello")
    with pytest.raises(BundleError, match=r"junk\.pub: not a PEM public key"):
        load_bundle(signed, trust=[junk])


def test_sign_cli_resigns_a_recalibrated_copy(signed, pair, tmp_path):
    """A bundle rewritten after signing (e.g. `calibrate --out`) needs a new signature."""
    from serving.bundle import load_bundle
    from serving.manifest import Manifest, write_manifest

    manifest = json.loads((signed / "monitor.json").read_text())
    manifest["target"] = 0.1
    write_manifest(signed, Manifest.model_validate(manifest))
    with pytest.raises(BundleError):
        load_bundle(signed, trust=[pair["public"]])
    p = failfast("sign", str(signed), "--key", str(pair["private"]))
    assert p.returncode == 0, p.stderr
    assert load_bundle(signed, trust=[pair["public"]]).manifest.target == 0.1
    # a corrupt bundle is not signed
    (signed / "tokenizer.json").write_text("{}")
    p = failfast("sign", str(signed), "--key", str(pair["private"]))
    assert p.returncode == 2
    assert "tokenizer.json: sha256 does not match" in p.stderr


def test_hook_under_trust_applies_nothing_of_an_unsigned_bundle(
    bundle, pair, fixtures_dir, tmp_path
):
    """An unsigned copy whose monitor.json budgets stop at step 1: without --trust the budget
    stops the session; with --trust the bundle is refused (monitor_error naming the signature
    file, exit 0: Claude Code reads exit 2 as "block"), and the default policy applies."""
    copy = tmp_path / "unsigned"
    shutil.copytree(bundle, copy)
    m = json.loads((copy / "monitor.json").read_text())
    m["policy"]["budget"] = {**(m["policy"].get("budget") or {}), "max_steps": 1}
    (copy / "monitor.json").write_text(json.dumps(m))
    path = tmp_path / "session.jsonl"  # the hook writes its restart packet beside it
    shutil.copyfile(fixtures_dir / "claude_code_constructed_session.jsonl", path)
    event = json.dumps(claude_event(path))
    cli = ["hook", "claude-code", "--bundle", str(copy), "--threads", "1"]
    p = failfast(*cli, input=event)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["continue"] is False  # the unsigned budget stopped it
    p = failfast(*cli, "--trust", str(pair["public"]), input=event)
    assert p.returncode == 0
    assert "monitor_error" in p.stderr
    assert f"{copy / 'monitor.json.sig'}: missing" in p.stderr
    assert p.stdout == ""


def test_supervise_trust_refuses_an_unsigned_bundle(bundle, pair, tmp_path):
    p = failfast(
        "supervise",
        "--bundle",
        str(bundle),
        "--trust",
        str(pair["public"]),
        "--transcript",
        str(tmp_path / "run.jsonl"),
        "--",
        "true",
    )
    assert p.returncode == 2
    assert f"{bundle / 'monitor.json.sig'}: missing" in p.stderr
