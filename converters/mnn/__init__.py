"""The MNN backend: :mod:`.backend` (the Backend: conversion, host runs), :mod:`.quantize` (full int8,
--budget), :mod:`.tools` (MNN's compiled converter and quantizer in child processes), :mod:`.placement`
(GPU backends' op tables; the op list for MNN's reduced build)."""

from .backend import BACKEND, MNNBackend

__all__ = ["BACKEND", "MNNBackend"]
