"""Staged rollouts: a bundle goes to a group of devices wave by wave, each wave judged on field data (the new
version against the old one on the same devices) before the next, and rolled back automatically when it regresses.

``plan`` (which devices each wave takes), ``state`` (the SQLite record every transition is written to first),
``gate`` (the decision from field numbers), ``delivery`` (how devices are reached), ``controller`` (``step``/``run``).
"""

from __future__ import annotations

from .controller import Controller, rollout_id, start
from .delivery import Delivery, DirectDelivery
from .gate import Thresholds, Verdict, judge, wave_numbers
from .mqtt import MqttDelivery
from .plan import WaveSpec, assign, effective_waves, parse_duration, parse_fraction, parse_waves
from .state import Rollout, RolloutState

__all__ = [
    "Controller",
    "Delivery",
    "DirectDelivery",
    "MqttDelivery",
    "Rollout",
    "RolloutState",
    "Thresholds",
    "Verdict",
    "WaveSpec",
    "assign",
    "effective_waves",
    "judge",
    "parse_duration",
    "parse_fraction",
    "parse_waves",
    "rollout_id",
    "start",
    "wave_numbers",
]
