"""A bundle with one static model per declared shape (``manifest["variants"]``, docs/SHAPES.md): a request runs on
the model built for its input shapes.

The typical shape's model is ``manifest["model"]`` and loads first, as in any bundle; the others load on their first
request and stay loaded (all at once where the files are decrypted for the load only). A request whose shapes match
no model gets HTTP 400 naming the shapes the bundle has models for.
"""

import threading
from typing import Any, Callable, Dict, List, Optional

from .runners.base import Runner, RunnerError


def variant_manifest(manifest: Dict[str, Any], variant: Dict[str, Any]) -> Dict[str, Any]:
    """The manifest a runner gets for one variant: its model file, fixed inputs and runner options."""
    runner = dict(variant.get("runner") or manifest.get("runner") or {})
    if (manifest.get("runner") or {}).get("model_cache") is False:
        runner["model_cache"] = False  # decrypted files: no compiled-model cache
    return dict(manifest, model=variant["model"], inputs=variant.get("inputs") or manifest["inputs"], runner=runner)


def shapes_text(shapes: Dict[str, List[int]]) -> str:
    return " ".join("%s=%s" % (name, list(dims)) for name, dims in sorted(shapes.items()))


def _loose(spec: Dict[str, Any]) -> Dict[str, Any]:
    allowed = spec.get("allowed")
    if not allowed or len(allowed) != len(spec["shape"]):
        return spec
    shape = [d if isinstance(a, int) else None for d, a in zip(spec["shape"], allowed)]
    return dict(spec, shape=shape)


class VariantRunner(Runner):
    """One runner per variant, behind the runner interface; everything but ``run`` is the typical model's."""

    def __init__(self, make: Callable[[Dict[str, Any]], Runner], bundle_dir: str, manifest: Dict[str, Any]) -> None:
        Runner.__init__(self, bundle_dir, manifest)
        self._make = make
        self.variants: List[Dict[str, Any]] = list(manifest["variants"])
        self.typical = make(manifest)
        self.backend = self.typical.backend
        self.runtime = self.typical.runtime
        self._runners: Dict[int, Runner] = {}
        self._lock = threading.Lock()
        # the manifest's inputs with the sizes that differ between variants left open (the allowed sizes hold them)
        self._loose = Runner(bundle_dir, dict(manifest, inputs=[_loose(s) for s in manifest["inputs"]]))

    def load(self) -> None:
        self.typical.load()
        self.load_ms = self.typical.load_ms
        for k, v in enumerate(self.variants):
            if v["model"] == self.manifest["model"]:
                self._runners[k] = self.typical

    def load_all(self) -> None:
        """Load every variant now (for files that are only readable during the load)."""
        for k in range(len(self.variants)):
            self._runner(k)

    def _runner(self, k: int) -> Runner:
        with self._lock:
            runner = self._runners.get(k)
            if runner is None:
                runner = self._make(variant_manifest(self.manifest, self.variants[k]))
                runner.load()
                self._runners[k] = runner
            return runner

    def pick(self, feeds: Dict[str, Any]) -> int:
        """The index of the variant built for ``feeds``' shapes; RunnerError (400) when there is none."""
        got = dict((name, list(getattr(a, "shape", ()))) for name, a in feeds.items())
        for k, v in enumerate(self.variants):
            if all(got.get(name) == list(dims) for name, dims in v["shapes"].items()):
                return k
        raise RunnerError(
            "input shapes %s match none of the bundle's models; it has models for: %s"
            % (shapes_text(got), "; ".join(shapes_text(v["shapes"]) for v in self.variants))
        )

    def check_feeds(self, feeds: Dict[str, Any]) -> None:
        """Names, dtypes and allowed sizes as for any bundle, then a model built for these shapes."""
        self._loose.check_feeds(feeds)
        self.pick(feeds)

    def run(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        return self._runner(self.pick(feeds)).run(feeds)

    def describe(self) -> Dict[str, Any]:
        info = dict(self.typical.describe())
        with self._lock:
            loaded = sorted(self._runners)
        info["variants"] = [
            {"shapes": v["shapes"], "model": v["model"], "loaded": k in loaded} for k, v in enumerate(self.variants)
        ]
        return info

    def placement(self, feeds: Dict[str, Any]) -> Optional[Dict[str, int]]:
        return self.typical.placement(feeds)

    def close(self) -> None:
        with self._lock:
            runners, self._runners = list(self._runners.values()), {}
        for runner in runners:
            if runner is not self.typical:
                runner.close()
        self.typical.close()


def make_runner(
    runner_cls: Any,
    bundle_dir: str,
    manifest: Dict[str, Any],
    threads: Optional[int] = None,
    providers: Optional[List[str]] = None,
) -> Runner:
    """The bundle's runner: ``runner_cls``'s own, or a :class:`VariantRunner` when the bundle has variants."""
    if not manifest.get("variants"):
        return runner_cls(bundle_dir, manifest, threads=threads, providers=providers)

    def make(m: Dict[str, Any]) -> Runner:
        return runner_cls(bundle_dir, m, threads=threads, providers=providers)

    return VariantRunner(make, bundle_dir, manifest)
