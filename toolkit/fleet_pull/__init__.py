"""Pull delivery: bundles published to a content-addressed store, desired state over MQTT (docs/FLEET.md)."""

from .publish import publish
from .stores import DirStore, ObjectStore, S3Store, open_store

__all__ = ["DirStore", "ObjectStore", "S3Store", "open_store", "publish"]
