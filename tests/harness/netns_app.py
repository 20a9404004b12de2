"""The app on an emulated device: run in the device's network namespace (``device.exec_prefix``), it talks to the
agent on that namespace's loopback through the Python SDK.

    python netns_app.py ROOT traffic   # requests to the tiny model in a loop, until killed
    python netns_app.py ROOT serving   # prints {model: version} of what the agent serves
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable

import numpy as np

from edgekit_sdk import AgentClient

X = np.zeros((1, 3, 16, 16), np.float32)


def traffic(root: str, stop: Any = None, sent: Callable[[], None] | None = None) -> None:
    """Requests to the agent at ``root`` in a loop until ``stop`` (a threading.Event; None: forever) is set;
    ``sent`` is called after each answered one."""
    client = None
    while stop is None or not stop.is_set():
        try:
            client = client or AgentClient.local(root, timeout=10)
            client.infer("tiny", {"input": X})
            if sent is not None:
                sent()
        except Exception:  # an install or a restart under the app: it tries again
            if client is not None:
                client.close()
            client = None
            time.sleep(0.05)
        time.sleep(0.01)
    if client is not None:
        client.close()


def serving(root: str) -> dict[str, str]:
    with AgentClient.local(root, timeout=10) as c:
        return {m["name"]: m["version"] for m in c.models()}


if __name__ == "__main__":
    if sys.argv[2] == "traffic":
        traffic(sys.argv[1])
    else:
        print(json.dumps(serving(sys.argv[1])))
