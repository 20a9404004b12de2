"""The host's side of talking to agents: malformed bundles given to the CLI, and the user's known_hosts."""

import json
import shutil

import pytest
from harness import run_cli

from edgekit.errors import BundleError


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda m: [m], "must hold a JSON object"),
        (lambda m: {k: v for k, v in m.items() if k != "files"}, "no 'files' list"),
        (lambda m: {k: v for k, v in m.items() if k != "id"}, "no 'id'"),
        (lambda m: dict(m, files=[{"name": "x"}]), "needs a name, a size and a sha256"),
        (lambda m: dict(m, files=[dict(m["files"][0], name="../etc/passwd")]), "not a plain file name"),
        (lambda m: dict(m, schema_version=m["schema_version"] + 1), "upgrade edgekit"),
        (lambda m: dict(m, schema_version=0), "rebuild the bundle"),
    ],
)
def test_malformed_bundles_are_clear_errors(tiny_bundle, tmp_path, edit, message):
    from edgekit import bundle

    bad = tmp_path / "bad"
    shutil.copytree(tiny_bundle, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    (bad / "manifest.json").write_text(json.dumps(edit(manifest)))
    with pytest.raises(BundleError) as e:
        bundle.load(bad)
    assert message in str(e.value)


@pytest.mark.e2e
def test_cli_names_a_malformed_bundle_without_a_traceback(tiny_bundle, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_bundle, bad)
    (bad / "manifest.json").write_text("[1, 2]")
    p = run_cli("deploy", bad, "--device-root", tmp_path / "dev")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "must hold a JSON object" in p.stderr
    assert not (tmp_path / "dev").exists()


OTHER = (
    "# my hosts, kept by hand\n"
    "gitlab.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    "|1|JfKTdBh7rNbXkVAQCRp4OQoPfmI=|USECr3SWf1JUPsms5AqfD5QfxkM= ssh-ed25519 "
    "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
)


@pytest.mark.e2e
def test_accept_new_only_appends_to_known_hosts(sshd, tmp_path, monkeypatch):
    """~/.ssh/config says accept-new; the first connection adds one line and keeps every other host and comment."""
    from edgekit.transports.ssh import SSHTransport

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    known = home / ".ssh" / "known_hosts"
    known.write_text(OTHER)
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host edge-test\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  StrictHostKeyChecking accept-new\n"
    )
    monkeypatch.setenv("HOME", str(home))
    for _ in range(2):  # the second connection finds the key and adds nothing
        t = SSHTransport("edge-test", ssh_config=str(config))
        assert t.run(["true"]).ok
        t.close()
    text = known.read_text()
    assert text.startswith(OTHER)
    added = text[len(OTHER) :].splitlines()
    assert len(added) == 1 and added[0].startswith(f"[127.0.0.1]:{sshd.port} ")
