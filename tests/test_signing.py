"""Signed bundles: ``edgekit sign``/``verify`` with real OpenSSH keys, and a real agent that trusts signers and
refuses unsigned, tampered and foreign-signed bundles (an event each, the previous version still serving)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from harness import one_json, run_cli

from edgekit import bundle as bundle_mod
from edgekit import signing
from edgekit.deployer import deploy
from edgekit.errors import AgentError, BundleError, SigningError
from edgekit.trust import install_signers, trust

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return {"alice": signing.keygen(d / "alice", "alice@lab"), "mallory": signing.keygen(d / "mallory", "mallory")}


def variant(src, dst, tag: str):
    """A copy of bundle ``src`` at ``dst`` that is another version: one more (inert) file, the manifest re-hashed."""
    shutil.copytree(src, dst)
    (dst / signing.SIGNATURE).unlink(missing_ok=True)
    return rehash(dst, tag)


def rehash(path, tag: str):
    """Write ``tag`` into the bundle's ``variant.txt`` and rewrite its manifest to match (size, sha256, id)."""
    (path / "variant.txt").write_text(tag)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"] = [f for f in manifest["files"] if f["name"] != "variant.txt"]
    manifest["files"].append(bundle_mod.file_entry(path / "variant.txt", "variant.txt", "note"))
    manifest["id"] = bundle_mod.bundle_id(manifest)
    bundle_mod.write_json(path / "manifest.json", manifest)
    return manifest


def events(dev, kind):
    answer = dev.client.request("GET", "/v1/telemetry?limit=5000")
    cols = answer["event_columns"]
    return [dict(zip(cols, e)) for e in answer["events"] if dict(zip(cols, e))["kind"] == kind]


def serves(dev, version):
    assert {m["name"]: m["version"] for m in dev.models()}["tiny"] == version
    dev.client.infer("tiny", {"input": np.zeros((1, 3, 16, 16), np.float32)})


# -- host side ---------------------------------------------------------------------------------------------------
def test_sign_and_verify_on_the_host(keys, tiny_bundle, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(tiny_bundle, b)
    r = signing.sign(b, keys["alice"])
    assert (b / "manifest.json.sig").read_text().startswith("-----BEGIN SSH SIGNATURE-----")
    assert r["allowed_signers"].startswith('alice@lab namespaces="edgekit-bundle" ssh-ed25519 ')
    assert r["key"].startswith("SHA256:")
    signers = tmp_path / "allowed_signers"
    signers.write_text(r["allowed_signers"] + "\n")
    assert signing.verify(b, signers)["identity"] == "alice@lab"
    with pytest.raises(SigningError, match="does not verify as bob"):
        signing.verify(b, signers, identity="bob")
    bundle_mod.load(b)  # the signature beside the manifest is no part of the bundle's files

    mallory = tmp_path / "m"
    shutil.copytree(b, mallory)
    signing.sign(mallory, keys["mallory"])
    with pytest.raises(SigningError, match="does not trust"):
        signing.verify(mallory, signers)

    rehash(b, "changed after signing")  # the files and manifest agree again; the signature no longer does
    with pytest.raises(SigningError, match="does not verify"):
        signing.verify(b, signers)
    unsigned = tmp_path / "u"
    shutil.copytree(tiny_bundle, unsigned)
    with pytest.raises(SigningError, match="is not signed"):
        signing.verify(unsigned, signers)
    (unsigned / "variant.txt").write_text("x")  # a file not in the manifest changes nothing; a listed one does
    (unsigned / "model.onnx").write_bytes(b"tampered")
    with pytest.raises(BundleError, match="does not match its sha256"):
        signing.sign(unsigned, keys["alice"])
    assert not (unsigned / "manifest.json.sig").exists()


def test_key_problems_are_clear(keys, tiny_bundle, tmp_path, monkeypatch):
    b = tmp_path / "b"
    shutil.copytree(tiny_bundle, b)
    locked = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(locked)], check=True)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with pytest.raises(SigningError, match=r"passphrase-protected.*ssh-add"):
        signing.sign(b, locked)
    with pytest.raises(SigningError, match="is a public key: signing with it needs ssh-agent"):
        signing.sign(b, f"{keys['alice']}.pub")
    with pytest.raises(SigningError, match="no key file"):
        signing.sign(b, tmp_path / "nope")
    assert not (b / "manifest.json.sig").exists()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SigningError, match="ssh-keygen is not installed here.*openssh-client"):
        signing.sign(b, keys["alice"])


def test_passphrase_key_signs_through_ssh_agent(tiny_bundle, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(tiny_bundle, b)
    locked = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-C", "ci", "-f", str(locked)], check=True)
    sock = tmp_path / "agent.sock"
    agent = subprocess.run(["ssh-agent", "-a", str(sock), "-s"], capture_output=True, text=True, check=True)
    pid = int(agent.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock), SSH_ASKPASS_REQUIRE="force", DISPLAY="x")
        askpass = tmp_path / "askpass"
        askpass.write_text("#!/bin/sh\necho secret\n")
        askpass.chmod(0o700)
        env["SSH_ASKPASS"] = str(askpass)
        subprocess.run(["ssh-add", str(locked)], env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
        r = subprocess.run(
            [sys.executable, "-c", "import sys; from edgekit import signing; print(signing.sign(*sys.argv[1:])['key'])"]
            + [str(b), str(locked)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        signers = tmp_path / "signers"
        signers.write_text(signing.allowed_signers_line(locked) + "\n")
        assert signing.verify(b, signers)["identity"] == "ci"
    finally:
        os.kill(pid, 15)


def test_cli_sign_and_verify(keys, tiny_bundle, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(tiny_bundle, b)
    r = run_cli("sign", str(b), "--key", str(keys["alice"]), "--identity", "release", "--json")
    assert r.returncode == 0, r.stderr
    line = one_json(r.stdout)["allowed_signers"]
    assert line.startswith('release namespaces="edgekit-bundle" ')
    (tmp_path / "signers").write_text(line + "\n")
    r = run_cli("verify", str(b), "--signers", str(tmp_path / "signers"))
    assert r.returncode == 0 and "signed by release" in r.stdout, r.stderr
    rehash(b, "x")
    r = run_cli("verify", str(b), "--signers", str(tmp_path / "signers"))
    assert r.returncode == 1 and r.stderr.startswith("error:") and "does not verify" in r.stderr
    assert "Traceback" not in r.stderr


# -- the agent -----------------------------------------------------------------------------------------------------
def test_a_device_that_trusts_a_key_installs_only_what_it_signed(keys, tiny_bundle, tmp_path, local_device):
    dev = local_device
    signed = tmp_path / "signed"
    shutil.copytree(tiny_bundle, signed)
    signing.sign(signed, keys["alice"])
    said: list[str] = []
    deploy(signed, dev, bench=False, log=said.append)  # no trust yet: installs as before, and says so
    assert any("notice: the bundle is signed but the device trusts no keys" in line for line in said), said
    v1 = bundle_mod.load(signed)["id"]
    listed = trust(dev, "add", f"{keys['alice']}.pub")
    assert listed["added"] == "alice@lab" and listed["signers"] == 1
    assert [s["identity"] for s in trust(dev, "list")["signers"]] == ["alice@lab"]
    assert Path(dev.root, "trust", "allowed_signers").is_file()

    unsigned = tmp_path / "unsigned"
    v2 = variant(tiny_bundle, unsigned, "v2")["id"]
    with pytest.raises(AgentError, match="is not signed, and this device installs only bundles signed") as e:
        deploy(unsigned, dev, bench=False)
    assert e.value.status == 403
    serves(dev, v1)

    tampered = tmp_path / "tampered"
    variant(tiny_bundle, tampered, "v3")
    signing.sign(tampered, keys["alice"])
    v3 = rehash(tampered, "v3, changed after signing")["id"]  # every file matches the manifest; the signature not
    with pytest.raises(AgentError, match="does not match its manifest: the bundle was changed after it was signed"):
        deploy(tampered, dev, bench=False)
    serves(dev, v1)

    foreign = tmp_path / "foreign"
    v4 = variant(tiny_bundle, foreign, "v4")["id"]
    signing.sign(foreign, keys["mallory"])
    fp = signing.fingerprint(keys["mallory"])
    with pytest.raises(AgentError, match=f"is signed by key {re.escape(fp)}, which this device does not trust"):
        deploy(foreign, dev, bench=False)
    serves(dev, v1)

    refused = events(dev, "install_refused")
    assert [e["version"] for e in refused] == [v2, v3, v4]
    assert "is not signed" in json.loads(refused[0]["detail"])["reason"]
    assert not {v2, v3, v4} & set(dev.models()[0]["versions"])

    signing.sign(unsigned, keys["alice"])  # the refused upload, signed: installs (its staged files are reused)
    r = deploy(unsigned, dev, bench=False)
    assert r["installed"]["transfer"]["files_sent"] == 0 and r["installed"]["signed_by"] == "alice@lab"
    serves(dev, v2)
    installed = os.path.join(dev.root, "models", "tiny", "versions", v2)
    assert Path(installed, "manifest.json").read_bytes() == (unsigned / "manifest.json").read_bytes()
    assert os.path.isfile(os.path.join(installed, "manifest.json.sig"))


def test_trust_changes_apply_at_once_and_fail_closed(keys, tiny_bundle, tmp_path, local_device):
    dev = local_device
    deploy(tiny_bundle, dev, bench=False)
    v1 = bundle_mod.load(tiny_bundle)["id"]
    trust(dev, "add", f"{keys['alice']}.pub", identity="alice")
    assert trust(dev, "remove", identity="alice")["signers"] == 0  # trusts no one: nothing installs
    b = tmp_path / "b"
    variant(tiny_bundle, b, "v2")
    signing.sign(b, keys["alice"])
    with pytest.raises(AgentError, match="which this device does not trust"):
        deploy(b, dev, bench=False)
    serves(dev, v1)
    with pytest.raises(Exception, match="no trusted signer 'bob'"):
        trust(dev, "remove", identity="bob")
    assert trust(dev, "off")["on"] is False  # checks off: anything installs again
    deploy(b, dev, bench=False)
    serves(dev, bundle_mod.load(b)["id"])

    signers = tmp_path / "signers"
    signers.write_text(signing.allowed_signers_line(keys["mallory"]) + "\n")
    assert install_signers(dev, signers)["signers"] == 1
    with pytest.raises(AgentError, match="is not signed"):
        deploy(tiny_bundle, dev, bench=False)  # a kept version, unsigned: serving it again is an install too


def test_no_ssh_keygen_on_the_device_refuses_installs(keys, tiny_bundle, tmp_path, agent_roots):
    """Trust configured and no tool to check with: installs are refused, naming the tool (fail closed)."""
    from edgekit_agent.store import Store
    from edgekit_agent.trust import SignatureRefused

    store = Store(str(agent_roots("bare")))
    store.trust.add(signing.public_key(keys["alice"]), "alice")
    manifest = bundle_mod.load(tiny_bundle)
    store.begin("tiny", manifest["id"], manifest)
    for f in manifest["files"]:
        with open(tiny_bundle / f["name"], "rb") as data:
            store.receive("tiny", manifest["id"], f["name"], data, f["size"])
    copy = tmp_path / "signed"
    shutil.copytree(tiny_bundle, copy)
    signing.sign(copy, keys["alice"])
    signed = signing.signature_of(copy)
    env_path = os.environ["PATH"]
    os.environ["PATH"] = str(tmp_path)
    try:
        with pytest.raises(SignatureRefused, match="has no ssh-keygen to check signatures with; install OpenSSH"):
            store.commit("tiny", manifest["id"])
        broken = tmp_path / "ssh-keygen"
        broken.write_bytes(b"\x7fELF not a program")
        broken.chmod(0o755)
        with pytest.raises(SignatureRefused, match="checking its signature with ssh-keygen failed"):
            store.commit("tiny", manifest["id"], signature=signed)
    finally:
        os.environ["PATH"] = env_path
    assert store.current_version("tiny") is None


def test_signed_manifest_must_be_the_uploads(keys, tiny_bundle, tmp_path, agent_roots):
    from edgekit_agent.store import Store, StoreError

    store = Store(str(agent_roots("bare")))
    manifest = bundle_mod.load(tiny_bundle)
    store.begin("tiny", manifest["id"], manifest)
    other = dict(manifest, precision="int8")
    with pytest.raises(StoreError, match="not the manifest of this upload"):
        store.commit("tiny", manifest["id"], signature={"manifest": json.dumps(other), "signature": "x"})
    with pytest.raises(StoreError, match='"signature" must be'):
        store.commit("tiny", manifest["id"], signature="x")
    bad = dict(manifest, files=manifest["files"] + [dict(manifest["files"][0], name="manifest.json.sig")])
    with pytest.raises(StoreError, match="reserved"):
        store.begin("tiny", manifest["id"], bad)


def test_trust_over_ssh(keys, tiny_bundle, tmp_path, sshd, agent_roots):
    from test_ssh import ssh_device

    b = tmp_path / "b"
    shutil.copytree(tiny_bundle, b)
    with ssh_device(sshd, agent_roots("remote")) as dev:
        assert trust(dev, "add", f"{keys['alice']}.pub")["signers"] == 1
        with pytest.raises(AgentError, match="is not signed"):
            deploy(b, dev, bench=False)
        signing.sign(b, keys["alice"])
        deploy(b, dev, bench=False)
        serves(dev, bundle_mod.load(b)["id"])


def test_cli_device_trust_and_agent_start(keys, tmp_path, agent_roots):
    root = str(agent_roots("cli"))
    r = run_cli("device", "trust", "add", f"{keys['alice']}.pub", "--device-root", root, "--json")
    assert r.returncode == 0, r.stderr
    r = run_cli("device", "trust", "list", "--device-root", root)
    assert r.returncode == 0 and "alice@lab  ssh-ed25519 " in r.stdout, r.stderr
    r = run_cli("device", "trust", "add", "--device-root", root)
    assert r.returncode == 1 and "needs a public key file" in r.stderr
    r = run_cli("device", "trust", "frob", "--device-root", root)
    assert r.returncode == 1 and "device trust takes one of add, list, remove, off" in r.stderr
    signers = tmp_path / "signers"
    signers.write_text(signing.allowed_signers_line(keys["mallory"], "m") + "\n")
    r = run_cli("agent", "start", "--trusted-signers", str(signers), "--device-root", root)
    assert r.returncode == 0 and "trusted signers" in r.stdout, r.stderr
    r = run_cli("device", "trust", "list", "--device-root", root, "--json")
    assert [s["identity"] for s in one_json(r.stdout)["signers"]] == ["m"]
    r = run_cli("agent", "status", "--trusted-signers", str(signers), "--device-root", root)
    assert r.returncode == 1 and "given to `edgekit agent start`" in r.stderr
    r = run_cli("device", "trust", "remove", "m", "--device-root", root)
    assert r.returncode == 0 and "removed m: 0 trusted signer(s)" in r.stdout, r.stderr
    r = run_cli("device", "trust", "list", "--device-root", root)
    assert "none: every install is refused" in r.stdout
    r = run_cli("device", "trust", "off", "--device-root", root)
    assert r.returncode == 0 and "installs unsigned bundles again" in r.stdout
