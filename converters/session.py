"""Per-build state of a backend: what one build made and remembers, never shared with another build.

Backends are stateless singletons (``BACKEND = MyBackend()``); ``--auto`` runs builds in threads.
Whatever a build learns on the way (the models it made and how the agent's runner loads them,
the runtime's fp32 build of a reference for timing, a converter's result that the mixed-precision
search reuses, who ran the reference) lives in the build's :class:`BuildSession` (``ctx.session``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _key(path: str | Path) -> str:
    return str(Path(path).resolve())


@dataclass
class BuildSession:
    inputs: list = field(default_factory=list)  # the model's inputs as the manifest lists them
    outputs: list = field(default_factory=list)  # the model's outputs as the manifest lists them
    models: dict = field(default_factory=dict)  # built model path -> {"inputs", "outputs", "runner"}
    fp32_of: dict = field(default_factory=dict)  # reference .onnx -> the runtime's fp32 build of it (host timing)
    memo: dict = field(default_factory=dict)  # backend-specific: a converter's result, op names, a chosen plan
    notes: dict = field(default_factory=dict)  # facts for the report (e.g. who ran the reference)

    @classmethod
    def for_source(cls, source: Any) -> BuildSession:
        """A session for a build of ``source`` (an edgekit.model.SourceModel)."""
        return cls([s.to_dict() for s in source.inputs], [s.to_dict() for s in source.outputs])

    def register(
        self, model_path: str | Path, runner: dict, inputs: list | None = None, outputs: list | None = None
    ) -> None:
        """How the agent's runner loads ``model_path`` (its runner options; inputs/outputs: the source's)."""
        self.models[_key(model_path)] = {
            "inputs": self.inputs if inputs is None else inputs,
            "outputs": self.outputs if outputs is None else outputs,
            "runner": runner,
        }

    def manifest_for(self, model_path: str | Path) -> dict | None:
        """What was registered for ``model_path``, or None."""
        return self.models.get(_key(model_path))

    def default_manifest(self) -> dict:
        """The source's inputs and outputs, no runner options (a model this build made but did not register)."""
        return {"inputs": self.inputs, "outputs": self.outputs, "runner": {}}

    def register_fp32(self, reference_path: str | Path, model_path: str | Path) -> None:
        self.fp32_of[_key(reference_path)] = Path(model_path)

    def fp32_for(self, reference_path: str | Path) -> Path | None:
        return self.fp32_of.get(_key(reference_path))

    def remember(self, key: Any, factory: Any) -> Any:
        """``memo[key]``, made by ``factory()`` on first use."""
        if key not in self.memo:
            self.memo[key] = factory()
        return self.memo[key]
