"""Pull mode: the agent sends its new field records to the broker (devices behind NAT cannot be pulled from).

Every ``interval`` seconds the records, events, context and annotations recorded since the last batch the broker
took are published (QoS 1, not retained) to ``edgekit/FLEET/devices/ID/field``, in the shape ``GET /v1/telemetry``
answers (plus ``device``). The cursor moves only once the broker has acknowledged a batch, and is kept in
``ROOT/telemetry/field-cursor.json``: a batch is sent again rather than lost, and the host's store ignores what it
already holds (record ids are monotonic and never reused).
"""

import json
import os
import threading
from typing import Any, Callable, Dict

BATCH = 2000  # records per message


class FieldPublisher(object):
    """Publishes ``recorder``'s new rows through ``publish(topic, payload) -> bool`` (True: the broker took it)."""

    def __init__(
        self,
        recorder: Any,
        topic: str,
        publish: Callable[[str, bytes], bool],
        interval: float,
        device_info: Callable[[], Dict[str, Any]],
        log: Callable[[str], Any],
    ) -> None:
        self.recorder, self.topic, self.publish, self.interval = recorder, topic, publish, interval
        self.device_info, self.log = device_info, log
        self.path = os.path.join(recorder.dir, "field-cursor.json")
        self.cursor = self._load()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pull-field")
        self._thread.daemon = True

    def _load(self) -> Dict[str, Any]:
        try:
            with open(self.path) as f:
                saved = json.load(f)
            if saved.get("store_id") == self.recorder.store_id:
                return saved
        except (OSError, ValueError, AttributeError):
            pass
        return {"store_id": self.recorder.store_id, "after_id": 0, "after_event": 0, "after_context": 0.0,
                "after_annotation": 0}  # fmt: skip

    def _save(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.cursor, f)
        os.replace(tmp, self.path)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.send()
            except Exception as e:  # the loop must survive anything one round meets
                self.log("sending field records failed: %s: %s" % (type(e).__name__, e))

    def send(self) -> int:
        """Publish everything new, batch by batch; returns the records the broker took."""
        sent = 0
        while not self._stop.is_set():
            c = self.cursor
            batch = self.recorder.pull(
                c["after_id"], c["after_event"], c["after_context"], BATCH, c["after_annotation"]
            )
            if not (batch["records"] or batch["events"] or batch["context"] or batch["annotations"]):
                return sent
            batch["device"] = self.device_info()
            if not self.publish(self.topic, json.dumps(batch).encode()):
                self.log("the broker did not take a field batch; it is sent again in %gs" % self.interval)
                return sent
            c["after_id"] = batch["records"][-1][0] if batch["records"] else c["after_id"]
            c["after_event"] = batch["events"][-1][0] if batch["events"] else c["after_event"]
            c["after_context"] = batch["context"][-1][0] if batch["context"] else c["after_context"]
            c["after_annotation"] = batch["annotations"][-1][0] if batch["annotations"] else c["after_annotation"]
            self._save()
            sent += len(batch["records"])
            if not batch["more"]:
                return sent
        return sent
