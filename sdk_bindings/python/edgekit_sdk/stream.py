"""Streaming a stateful model through the agent: one session, its state kept on the device.

    with agent.stream("silero_vad") as vad:
        for frame in frames:
            prob = vad.step({"input": frame, "sr": sr})["output"]

Each :meth:`Stream.step` sends only the data inputs; the agent feeds the state this session's last step output
(zeros at the first) and answers the other outputs. Leaving the ``with`` block (or :meth:`close`) ends the session
on the agent; :meth:`reset` starts it again from the initial state.
"""

import uuid
from typing import Any, Dict, Iterable, List, Optional

from .client import AgentHTTPError


class Stream(object):
    def __init__(self, client: Any, model: str, session: Optional[str] = None) -> None:
        self.client, self.model = client, model
        self.session = session or uuid.uuid4().hex
        self.steps = 0
        self.last_meta = None  # type: Any

    def step(self, inputs: Dict[str, Any]) -> Dict[str, Any]:
        """One step: ``{input: ndarray}`` without the state inputs -> ``{output: ndarray}`` without the state."""
        outputs, meta = self.client.infer(self.model, inputs, with_meta=True, session=self.session)
        self.last_meta = meta
        self.steps += 1
        return outputs

    def run(self, steps: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """Every step of ``steps`` (an iterable of input dicts) in order; the list of their outputs."""
        return [self.step(inputs) for inputs in steps]

    def reset(self) -> None:
        """Forget the state on the agent: the next step starts from the initial state."""
        try:
            self.client.end_session(self.model, self.session)
        except AgentHTTPError as e:
            if e.status != 404:  # nothing kept yet (or expired): already reset
                raise
        self.steps = 0

    def close(self) -> None:
        self.reset()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
