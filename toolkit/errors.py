"""The exceptions edgekit raises.

Every error a user can cause or meet carries a message that says what is wrong and
what to do. The CLI turns them into one line on stderr and a non-zero exit; nothing
else in the package catches them.

    EdgekitError
    ├── ProfileError        unknown profile, or a profile file that fails the schema
    ├── ModelError          not an ONNX file, corrupt, or shapes that cannot be fixed
    ├── DataError           calibration / validation data that does not fit the model
    ├── ConversionError     a backend failed to convert or quantize
    ├── FidelityError       the built model drifted past the fidelity thresholds
    ├── BundleError         a bundle directory is missing files or fails its hashes
    │   └── SigningError    a bundle's signature cannot be made, or does not verify
    ├── BackendUnavailable  a runtime or tool is not installed here (says how to get it)
    ├── TransportError      could not reach, or lost, the device
    └── AgentError          the on-device agent refused or failed a request
"""

from typing import Any


class EdgekitError(Exception):
    """Base class of every error edgekit raises on purpose."""

    exit_code = 1


class ProfileError(EdgekitError):
    pass


class ModelError(EdgekitError):
    pass


class DataError(EdgekitError):
    pass


class ConversionError(EdgekitError):
    pass


class FidelityError(EdgekitError):
    exit_code = 3

    def __init__(self, message: str, report: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.report = report


class BundleError(EdgekitError):
    pass


class SigningError(BundleError):
    pass


class BackendUnavailable(EdgekitError):
    pass


class TransportError(EdgekitError):
    exit_code = 4


class AgentError(EdgekitError):
    exit_code = 5

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
