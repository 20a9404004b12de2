"""Send real requests to a model the agent on this machine serves, as an app would.

Every request an app sends through the agent's local API is recorded on the device; this gives
``edgekit field pull`` / ``edgekit field report`` traffic to show. The inputs come from a ``.npz``
made by ``examples/textlines.py`` (arrays named like the model's inputs)::

    python examples/infer.py ppocr_mobile_v2_cls --data val.npz -n 200

On a real device an app does the same with the client the agent carries (see the README).
"""

import argparse
import sys
import time

import numpy as np

from edgekit.deployer import open_device


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the bundle's name on the device (edgekit models --local)")
    ap.add_argument("--data", required=True, help=".npz with arrays named like the inputs (e.g. from textlines.py)")
    ap.add_argument("-n", type=int, default=100, help="requests to send (default 100)")
    args = ap.parse_args(argv)

    data = np.load(args.data)
    with open_device("local") as device:
        device.ensure_agent()
        client = device.client
        names = [k for k in data.files if k != "labels"]
        count = len(data[names[0]])
        t0 = time.perf_counter()
        for i in range(args.n):
            feed = {k: data[k][i % count : i % count + 1] for k in names}
            client.infer(args.model, feed)
        seconds = time.perf_counter() - t0
    print(f"sent {args.n} requests to {args.model} in {seconds:.2f} s ({args.n / seconds:.0f} req/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
