#!/usr/bin/env bash
# The main job end to end: set up, build the PP-OCR text-direction classifier for a Raspberry
# Pi 5 and for this machine (calibrated on rendered text lines, each build checked against the
# original), deploy this machine's build to its agent and print the timing report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
EK=.venv/bin/edgekit
OUT=examples/out
mkdir -p "$OUT"

echo "== calibration and validation data: rendered text lines (examples/textlines.py)"
.venv/bin/python examples/textlines.py -n 200 --seed 1 -o "$OUT/calib.npz"
.venv/bin/python examples/textlines.py -n 400 --seed 0 -o "$OUT/val.npz"

# raspberrypi5: INT8 (the Pi's A76 cores have dot-product instructions), built and checked here for the Pi;
# host: auto, which times INT8 against FP32 on this machine and keeps whichever really runs faster here.
for profile in raspberrypi5 host; do
    precision=int8; [[ $profile == host ]] && precision=auto
    echo
    echo "== edgekit build for $profile (--precision $precision)"
    $EK build examples/ppocr_mobile_v2_cls.onnx --profile "$profile" --precision "$precision" \
        --calib "$OUT/calib.npz" --val "$OUT/val.npz" --input-shape x=1,3,48,192 -o "$OUT/ppocr-$profile" -q
done
echo
echo "== edgekit deploy --local (this machine is the device: the host bundle)"
$EK deploy "$OUT/ppocr-host" --local --runs 200 --warmup 20
echo
echo "The Raspberry Pi 5 bundle is in $OUT/ppocr-raspberrypi5: edgekit deploy $OUT/ppocr-raspberrypi5 --ssh pi@raspberrypi.local"
echo "The agent keeps serving on this machine: .venv/bin/edgekit agent status --local  (stop: agent stop --local)"
