"""The Java SDK for the SDK contract suite: built with the JDK alone (``sdk_bindings/java/build.sh``)."""

import os
import shutil
import subprocess
from pathlib import Path
from typing import List

from harness.paths import ROOT

JAVA_SDK = ROOT / "sdk_bindings" / "java"
#: The JVM would otherwise write /tmp/hsperfdata_USER.
JVM_FLAGS = ["-XX:-UsePerfData"]


def build(build_dir: Path, test: bool = False) -> subprocess.CompletedProcess:
    """Build the SDK jar and the contract runner's jar into ``build_dir`` (and run the unit tests with ``test``);
    raises RuntimeError naming the missing tool, or with the build's output when it fails."""
    for tool in ("javac", "jar", "java"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: the Java SDK needs a JDK (Debian: openjdk-17-jdk-headless)")
    argv = ["bash", str(JAVA_SDK / "build.sh"), "--out", str(build_dir)] + (["test"] if test else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 and not test:
        raise RuntimeError(f"the Java SDK did not build ({' '.join(argv)}):\n{done.stdout}{done.stderr}")
    return done


def command(build_dir: Path) -> List[str]:
    """Builds the Java SDK and its contract runner into ``build_dir``; the argv prefix that runs the runner."""
    build(build_dir)
    classpath = os.pathsep.join(str(build_dir / jar) for jar in ("edgekit-sdk.jar", "edgekit-sdk-contract.jar"))
    return ["java", *JVM_FLAGS, "-cp", classpath, "dev.edgekit.sdk.contract.ContractRunner"]
