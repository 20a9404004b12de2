"""The Java SDK (sdk_bindings/java): its own unit tests, its jar, and the README's example app against an agent."""

import os
import re
import subprocess
import zipfile

import pytest
from harness import sdk_java
from harness.sdk_java import JAVA_SDK, JVM_FLAGS

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def java_build(tmp_path_factory):
    """The SDK built with its unit tests run: (build folder, the build's completed process)."""
    out = tmp_path_factory.mktemp("java-sdk")
    return out, sdk_java.build(out, test=True)


def test_unit_tests_pass(java_build):
    _, done = java_build
    summary = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
    assert done.returncode == 0, f"{done.stdout}{done.stderr}"
    assert re.fullmatch(r"\d+ tests, 0 failed", summary[0]), summary
    assert int(summary[0].split()[0]) >= 60  # every test ran


def test_the_jar_is_java_8_and_needs_only_the_java_base_module(java_build):
    out, _ = java_build
    jar = out / "edgekit-sdk.jar"
    with zipfile.ZipFile(jar) as z:
        classes = [n for n in z.namelist() if n.endswith(".class")]
        assert {"dev/edgekit/sdk/AgentClient.class", "dev/edgekit/sdk/Tensor.class"} <= set(classes)
        for name in classes:
            major = int.from_bytes(z.read(name)[6:8], "big")
            assert major == 52, f"{name}: class file version {major}, not Java 8's 52"
    deps = subprocess.run(
        ["jdeps", "-J-XX:-UsePerfData", "-verbose:package", str(jar)], capture_output=True, text=True, timeout=120
    )
    assert deps.returncode == 0, deps.stderr
    used = set(re.findall(r"^[ \t]+dev\.edgekit\.sdk[ \t]+->[ \t]+(\S+)[ \t]+(\S+)[ \t]*$", deps.stdout, re.M))
    assert used and all(module == "java.base" for _, module in used), used
    allowed = ("java.lang", "java.io", "java.math", "java.net", "java.nio", "java.util")
    assert all(pkg.startswith(allowed) for pkg, _ in used), used


def test_the_readme_example_calls_a_deployed_model_in_under_20_lines(java_build, local_device, tiny_bundle, tmp_path):
    from edgekit.deployer import deploy

    out, _ = java_build
    readme = (JAVA_SDK / "README.md").read_text()
    example = re.search(r"```java\n(.*?)```", readme, re.S).group(1)  # type: ignore[union-attr]
    assert len(example.strip().splitlines()) < 20
    app = tmp_path / "app"
    app.mkdir()
    (app / "Classify.java").write_text(example)
    jar = str(out / "edgekit-sdk.jar")
    javac = ["javac", "-J-XX:-UsePerfData", "--release", "8", "-Xlint:all", "-Xlint:-options", "-Werror"]
    built = subprocess.run([*javac, "-cp", jar, "Classify.java"], cwd=app, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    version = deploy(tiny_bundle, local_device, bench=False)["installed"]["version"]
    env = dict(os.environ, EDGEKIT_AGENT_ROOT=str(tmp_path / "device"))
    ran = subprocess.run(
        ["java", *JVM_FLAGS, "-cp", jar + os.pathsep + str(app), "Classify"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    outputs = local_device.client.models()[0]["outputs"]
    assert len(ran.stdout.splitlines()) == len(outputs)
    for line, spec in zip(ran.stdout.splitlines(), outputs):
        assert line.startswith(f"{spec['name']}: Tensor(float32, shape=[1, "), line
        assert f" from {version} in " in line and line.endswith(" ms"), line
