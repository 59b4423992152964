"""tools/env.sh, sourced from a copy in a stand-in repository whose .venv
python is a wrapper around this one that logs pip commands instead of
running them."""

import os
import shutil
import subprocess
import sys

from conftest import REPO_ROOT, TOOLS


def stand_in(tmp_path, extra_pin=None):
  (tmp_path / "tools").mkdir()
  shutil.copy(os.path.join(TOOLS, "env.sh"), tmp_path / "tools")
  with open(os.path.join(REPO_ROOT, "setup.cfg")) as f:
    cfg = f.read()
  if extra_pin:
    cfg = cfg.replace("install_requires =\n",
                      f"install_requires =\n    {extra_pin}\n")
  (tmp_path / "setup.cfg").write_text(cfg)
  (tmp_path / ".venv/bin").mkdir(parents=True)
  python = tmp_path / ".venv/bin/python"
  python.write_text(f'#!/bin/sh\n[ "$1 $2" = "-m pip" ] && '
                    f'echo "$@" >>{tmp_path}/pip.log && exit 0\n'
                    f'exec {sys.executable} "$@"\n')
  python.chmod(0o755)
  return tmp_path


def source_env(repo, **env):
  """Sources REPO's env.sh with no `python` on PATH; prints $PYTHON."""
  env = {
      k: v for k, v in os.environ.items() if k != "PYTHON"
  } | {
      "PATH": "/usr/bin:/bin"
  } | env
  return subprocess.run(
      ["bash", "-c", f"source {repo}/tools/env.sh && echo $PYTHON"],
      env=env,
      capture_output=True,
      text=True)


def test_python_with_the_pins_is_used(tmp_path):
  p = source_env(stand_in(tmp_path), PYTHON=sys.executable)
  assert p.stdout.strip() == sys.executable


def test_python_without_the_pins_is_refused(tmp_path):
  p = source_env(stand_in(tmp_path), PYTHON="/usr/bin/python3")
  assert p.returncode == 1
  assert "PYTHON=/usr/bin/python3 lacks torch==2.9.0" in p.stderr


def test_active_python_needs_only_torch_and_torch_xla(tmp_path):
  repo = stand_in(tmp_path, "no-such-package==1.0")
  p = source_env(repo, PATH=f"{os.path.dirname(sys.executable)}:/usr/bin")
  assert p.stdout.strip() == sys.executable
  assert not (repo / "pip.log").exists()


def test_venv_with_the_pins_is_used(tmp_path):
  repo = stand_in(tmp_path)
  p = source_env(repo)
  assert p.stdout.strip() == sys.executable  # what the wrapper runs
  assert not (repo / "pip.log").exists()


def test_venv_lacking_a_pin_gets_all_pins(tmp_path):
  repo = stand_in(tmp_path, "no-such-package==1.0")
  p = source_env(repo)
  pip = (repo / "pip.log").read_text().split()
  assert pip[:3] == ["-m", "pip", "install"]
  assert {"no-such-package==1.0", "torch==2.9.0", "pytest==9.2.0"} <= set(pip)
  assert p.returncode == 1  # the wrapper installed nothing
