"""Where the project's files are, seen from the tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
PPOCR = EXAMPLES / "ppocr_mobile_v2_cls.onnx"
PPOCR_SHA256 = "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"  # README: Sources and licences
