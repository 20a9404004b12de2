"""A backend that is not part of edgekit, registered by the test suite: "copy-ort".

Its "conversion" copies the reference ONNX model; its runtime is ONNX Runtime, through a runner of its
own. One host module, one runner, one table row: what the "add a backend" recipe asks for.
"""

import shutil

from edgekit.converters import Backend, BuildResult, Row
from edgekit_agent.runners.ort import OrtRunner

NAME = "copy-ort"


class CopyRunner(OrtRunner):
    backend = NAME


class CopyBackend(Backend):
    name = NAME
    install_hint = "pip install onnxruntime"

    def availability(self):
        try:
            import onnxruntime
        except ImportError as e:
            return False, f"onnxruntime is not installed ({e})"
        return True, f"onnxruntime {onnxruntime.__version__} (copies the model)"

    def runtime_version(self):
        import onnxruntime

        return onnxruntime.__version__

    def default_precision(self, profile, have_calib):
        return "fp32"

    def host_settings(self, arch, isa):
        return {"precisions": ["fp32"]}

    def build(self, ctx):
        from edgekit.model import operator_set

        model = ctx.workdir / "model.copy.onnx"
        shutil.copyfile(ctx.reference_path, model)
        ctx.check("copied", model)
        return BuildResult(
            model_file=model,
            runtime="onnxruntime",
            runtime_version=self.runtime_version(),
            format="onnx",
            ops=operator_set(ctx.source.proto),
            runner_options={"providers": ["CPUExecutionProvider"]},
        )


ROW = Row(NAME, __name__, __name__, ("fp32", "fp16"), refused={"fp16": "copy-ort only copies"}, runtime="onnxruntime")
BACKEND = CopyBackend()
RUNNER = CopyRunner
