"""Python client for the edgekit on-device agent's local API.

Standard library only (numpy when tensors are used), Python 3.7+, so apps on the
device can use it too: it ships inside the agent's zipapp (``sys.path.insert(0,
"edgekit-agent.pyz")``) and with the host package::

    from edgekit_sdk import AgentClient
    agent = AgentClient.local()  # this machine's agent: port and token from its root (~/.cache/edgekit/device)
    agent.load("ppocr_mobile_v2_cls")  # changes state: needs the token, even on loopback
    outputs = agent.infer("ppocr_mobile_v2_cls", {"x": batch})
"""

from .client import AgentClient, AgentHTTPError
from .stream import Stream
from .wire import CONTENT_TYPE, decode_tensors, encode_tensors

__all__ = ["AgentClient", "AgentHTTPError", "CONTENT_TYPE", "Stream", "decode_tensors", "encode_tensors"]
