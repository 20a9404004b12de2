"""Pull delivery's shared vocabulary: the content-addressed store's layout, the MQTT topics and the payloads.

Stdlib only, Python 3.7: the agent reads it to fetch and subscribe, the host (``edgekit.fleet_pull``) to publish.

    STORE/blobs/sha256/HEX        every file of every bundle, named by the sha256 of its content
    STORE/manifests/sha256/HEX    a bundle's manifest.json as built; HEX (its sha256) is the bundle's digest
    STORE/bundles/ID.json         index: bundle id -> {"digest", "name", "backend", "precision", "profile", ...}

    edgekit/FLEET/devices/ID/desired     retained: what device ID runs (overrides its groups' entries)
    edgekit/FLEET/groups/GROUP/desired   retained: what every device of GROUP runs
    edgekit/FLEET/devices/ID/state       retained, by the agent: what it runs now
    edgekit/FLEET/devices/ID/events      by the agent: one message per install attempt (ok or the error)
    edgekit/FLEET/devices/ID/field       by the agent: its new field records (the /v1/telemetry batch shape)

A desired payload: ``{"models": {"NAME": {"digest": "sha256:HEX", "store": "https://host/prefix"}}}``; an entry
``{"remove": true}`` instead tells the device to stop serving NAME and delete its versions (a device's entry
overrides its groups', so it can remove for one device what a group runs).
"""

import json
import re
from typing import Any, Dict, Optional, Tuple

TOPIC_ROOT = "edgekit"
SEGMENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
DIGEST_RE = re.compile(r"(?:sha256:)?([0-9a-f]{64})\Z")
MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


class PayloadError(ValueError):
    """A desired-state payload or a name that cannot be used (the message says what is wrong)."""


def check_segment(kind: str, value: Any) -> str:
    """A fleet, device or group name: one topic level, no MQTT wildcards."""
    if not isinstance(value, str) or not SEGMENT_RE.match(value) or ".." in value:
        raise PayloadError("invalid %s %r: use letters, digits, '.', '_' and '-' (no '/', '+' or '#')" % (kind, value))
    return value


def digest_hex(digest: Any) -> str:
    """``sha256:HEX`` (or bare HEX) -> HEX."""
    m = DIGEST_RE.match(digest) if isinstance(digest, str) else None
    if not m:
        raise PayloadError(
            "invalid bundle digest %r: expected sha256:<64 hex digits> (edgekit publish prints it)" % (digest,)
        )
    return m.group(1)


def blob_path(sha256: str) -> str:
    return "blobs/sha256/%s" % digest_hex(sha256)


def manifest_path(digest: str) -> str:
    return "manifests/sha256/%s" % digest_hex(digest)


def signature_path(digest: str) -> str:
    """Where ``edgekit publish`` puts a signed bundle's signature: beside its manifest (it signs those bytes)."""
    return manifest_path(digest) + ".sig"


def index_path(bundle_id: str) -> str:
    return "bundles/%s.json" % bundle_id


def join_url(base: str, path: str) -> str:
    return base.rstrip("/") + "/" + path


def device_topic(fleet: str, device: str, leaf: str) -> str:
    """``edgekit/FLEET/devices/ID/LEAF`` (LEAF: desired, state, events)."""
    return "%s/%s/devices/%s/%s" % (TOPIC_ROOT, check_segment("fleet", fleet), check_segment("device id", device), leaf)


def group_topic(fleet: str, group: str) -> str:
    return "%s/%s/groups/%s/desired" % (TOPIC_ROOT, check_segment("fleet", fleet), check_segment("group", group))


def parse_topic(topic: str) -> Optional[Tuple[str, str, str]]:
    """``(kind, name, leaf)`` of an edgekit topic: ("devices", ID, "state"), ("groups", G, "desired"); else None."""
    parts = topic.split("/")
    if len(parts) != 5 or parts[0] != TOPIC_ROOT or parts[2] not in ("devices", "groups"):
        return None
    return parts[2], parts[3], parts[4]


def parse_desired(payload: bytes) -> Dict[str, Dict[str, Any]]:
    """``{model: {"digest": "sha256:HEX", "store": URL}}`` (or ``{model: {"remove": True}}``) from a desired
    payload; an empty payload (a cleared retained message) desires nothing. PayloadError says what is wrong with
    any other."""
    if not payload:
        return {}
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise PayloadError("desired state is not JSON (%s)" % e) from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise PayloadError(
            'desired state must be an object {"models": {NAME: {"digest", "store"} or {"remove": true}}}'
        )
    out = {}  # type: Dict[str, Dict[str, Any]]
    for name, want in data["models"].items():
        if not MODEL_RE.match(name) or ".." in name:
            raise PayloadError("desired state names an invalid model %r" % name)
        if isinstance(want, dict) and "remove" in want:
            if want != {"remove": True}:
                raise PayloadError('desired model %r: a removal is {"remove": true} and nothing else' % name)
            out[name] = {"remove": True}
            continue
        if not isinstance(want, dict) or not isinstance(want.get("store"), str):
            raise PayloadError("desired model %r needs a digest and a store URL" % name)
        if not want["store"].startswith(("http://", "https://")):
            raise PayloadError("desired model %r: store %r is not an http(s) URL" % (name, want["store"]))
        out[name] = {"digest": "sha256:" + digest_hex(want.get("digest")), "store": want["store"]}
    return out


def desired_payload(models: Dict[str, Dict[str, Any]]) -> bytes:
    """The payload for ``{model: {"digest", "store"} or {"remove": True}}`` (checked the way the agent checks it)."""
    body = json.dumps({"models": models}, sort_keys=True).encode("utf-8")
    parse_desired(body)
    return body
