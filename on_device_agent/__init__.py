"""edgekit on-device agent.

Runs on the device's own Python (3.7 or newer), standard library only plus the
runtime that runs the model. Ships as one zipapp file, ``edgekit-agent.pyz``::

    python3 edgekit-agent.pyz serve --root ~/.cache/edgekit/device      # local HTTP API
    python3 edgekit-agent.pyz bench --bundle DIR --runs 100 --json      # one-shot, no daemon

Modules: ``store`` (verified, atomic bundle installs), ``runners`` (one per backend),
``bench`` (timing), ``server`` (the HTTP API, described in ``openapi.json``), ``daemon``
(start/stop/status of a background server).
"""

__version__ = "0.1.0"
API_VERSION = "v1"
