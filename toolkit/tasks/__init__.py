"""Task-aware fidelity: what a model is for, how to decode its outputs, and how to judge a build by its answers.

- :func:`parse_task` reads ``--task`` specs (``detection:yolov8,conf=0.25,iou=0.45``); :func:`infer_task` guesses
  the task from the model with the reason; :func:`resolve_task` is the one call a build makes (given, else inferred);
- :func:`evaluate` decodes the reference's and a candidate's outputs and measures their agreement (box F1 and
  mAP@0.5, mask IoU and PSNR, mIoU/Dice, CER, cosine and nearest neighbours, top-1/top-5);
- :func:`judge` applies the default gates per task and precision (:data:`GATES`);
- :func:`load_metric` loads a user's ``module:function`` metric.

Decoders live in :mod:`.boxes`, :mod:`.regions` and :mod:`.sequence`.
"""

from .custom import UserMetric, load_metric
from .evaluate import PRIMARY, evaluate
from .gates import GATES, gates_for, judge
from .infer import Inference, infer_task, resolve_task
from .spec import FORMS, TaskError, TaskSpec, parse_task

__all__ = [
    "FORMS",
    "GATES",
    "PRIMARY",
    "Inference",
    "TaskError",
    "TaskSpec",
    "UserMetric",
    "evaluate",
    "gates_for",
    "infer_task",
    "judge",
    "load_metric",
    "parse_task",
    "resolve_task",
]
