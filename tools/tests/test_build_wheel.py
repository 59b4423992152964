"""tools/build_wheel.sh: bad input ends with one clear line and nothing in
the output directory; the patched wheel, installed with pip into a fresh
virtual environment beside stock torch 2.9.0, fixes the reproducer and
passes the series' tests, and stock torch_xla brings the bug back."""
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

BUILD = os.path.join(REPO_ROOT, "tools", "build_wheel.sh")


def build(*args, dist):
  return subprocess.run([BUILD, "--dist", str(dist), *args],
                        capture_output=True,
                        text=True)


def assert_fails(out, dist, message):
  assert out.returncode != 0
  assert out.stderr.strip().splitlines() == [f"build_wheel: error: {message}"]
  assert not dist.exists() or not os.listdir(dist)


def fake_wheel(tmp_path, files):
  """A torch_xla 2.9.0 wheel (made with `wheel pack`) of `files`."""
  root = tmp_path / "torch_xla-2.9.0"
  for name, text in files.items():
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)
  info = root / "torch_xla-2.9.0.dist-info"
  info.mkdir()
  (info / "METADATA").write_text(
      "Metadata-Version: 2.1\nName: torch_xla\nVersion: 2.9.0\n")
  (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: test\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n")
  subprocess.run([sys.executable, "-m", "wheel", "pack", "-d",
                  str(tmp_path), str(root)], check=True, capture_output=True)
  return tmp_path / "torch_xla-2.9.0-py3-none-any.whl"


def test_bad_input(tmp_path):
  dist = tmp_path / "dist"
  assert_fails(
      build("--python", "3.9", dist=dist), dist,
      "no torch_xla 2.9.0 wheel for Python 3.9 on the package index "
      "(2.9.0 has 3.10 to 3.13)")
  other = tmp_path / "torch_xla-2.8.0-cp311-cp311-linux_x86_64.whl"
  other.write_bytes(b"")
  assert_fails(
      build("--wheel", other, dist=dist), dist,
      f"{other.name} is not a torch_xla 2.9.0 wheel")
  wheel = fake_wheel(tmp_path,
                     {"torch_xla/_dynamo/dynamo_bridge.py": "x = 1\n"})
  out = build("--wheel", wheel, dist=dist)
  assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1
  assert out.stderr.startswith("build_wheel: error: the series does not "
                               f"apply to {wheel.name}: ")
  assert not dist.exists() or not os.listdir(dist)


def run(*args, **kwargs):
  return subprocess.run(args, capture_output=True, text=True, **kwargs)


@pytest.mark.slow
def test_wheel_installed_with_pip(tmp_path):
  dist = tmp_path / "dist"
  out = build(dist=dist)
  assert out.returncode == 0, out.stderr
  wheel = out.stdout.strip()
  assert os.path.basename(wheel).startswith("torch_xla-2.9.0+fix8832-cp")
  venv = tmp_path / "venv"
  run(sys.executable, "-m", "venv", str(venv), check=True)
  python = str(venv / "bin" / "python")
  pip = [python, "-m", "pip", "install", "-q"]
  out = run(*pip, "torch==2.9.0", wheel, "pytest", "absl-py", "expecttest")
  assert out.returncode == 0, out.stderr[-2000:]
  out = run(python, "-m", "pip", "check")
  assert out.returncode == 0, out.stdout
  env = dict(os.environ, PJRT_DEVICE="CPU")
  env.pop("PYTHONPATH", None)
  out = run(python, "-c", "import torch_xla, importlib.metadata as m; "
            "print(torch_xla.__file__); print(m.version('torch_xla'))",
            env=env)
  assert str(venv) in out.stdout and "2.9.0+fix8832" in out.stdout, out
  repro = [python, os.path.join(REPO_ROOT, "tools", "repro_8832.py")]
  out = run(*repro, env=env)
  assert out.returncode == 0, out.stdout + out.stderr
  tests = [
      os.path.join(root, name)
      for root, _, names in os.walk(os.path.join(REPO_ROOT, "test"))
      for name in sorted(names)
      if name.startswith("test_") and name.endswith(".py")
  ]
  for test in tests:
    devices = "4" if f"{os.sep}spmd{os.sep}" in test else "1"
    out = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
              os.devnull, test,
              cwd=tmp_path,
              env=dict(env, CPU_NUM_DEVICES=devices))
    assert out.returncode == 0, out.stdout[-3000:]
  out = run(*pip, "--force-reinstall", "--no-deps", "torch_xla==2.9.0")
  assert out.returncode == 0, out.stderr[-2000:]
  out = run(*repro, env=env)
  assert out.returncode == 1 and "crash" in out.stdout, out.stdout
