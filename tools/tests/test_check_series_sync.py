"""tools/check_series_sync.py"""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, TOOLS, git

TEST_FILE = "test/dynamo/test_synthetic.py"
TEST_BODY = "import unittest\n\n# body of the synthetic test\n"
RUN_TESTS = ('function run_xla_op_tests5 {\n'
             '  run_test "$_TEST_DIR/dynamo/test_bridge.py"\n'
             '}\n')


def check(*args):
  return subprocess.run(
      [sys.executable,
       os.path.join(TOOLS, "check_series_sync.py"), *args],
      capture_output=True,
      text=True)


def synthetic(tmp_path, register=True, body=TEST_BODY):
  """A series made in a stand-in upstream repo (with test/run_tests.sh) that
  adds TEST_FILE (and registers it), plus a tests root matching it."""
  up = tmp_path / "upstream"
  (up / "test").mkdir(parents=True)
  (up / "test/run_tests.sh").write_text(RUN_TESTS)
  git("init", "-q", cwd=str(up))
  git("add", "-A", cwd=str(up))
  git("commit", "-q", "-m", "base", cwd=str(up))
  (up / "test/dynamo").mkdir()
  (up / TEST_FILE).write_text(body)
  if register:
    (up / "test/run_tests.sh").write_text(RUN_TESTS.replace(
        "test_bridge.py\"\n", "test_bridge.py\"\n"
        '  run_test "$_TEST_DIR/dynamo/test_synthetic.py"\n'))
  git("add", "-A", cwd=str(up))
  git("commit", "-q", "-m", "Add a test", cwd=str(up))
  patches = tmp_path / "patches"
  git("format-patch", "-q", "-o", str(patches), "HEAD~1..HEAD", cwd=str(up))
  (patches / "series").write_text("# comment\n0001-Add-a-test.patch\n")
  root = tmp_path / "root"
  (root / "test/dynamo").mkdir(parents=True)
  (root / TEST_FILE).write_text(TEST_BODY)
  return str(patches), str(root)


def test_real_series_passes():
  p = check()
  assert p.returncode == 0, p.stderr
  assert "OK:" in p.stderr


def test_tampered_copy_of_real_series_fails(tmp_path):
  patches = tmp_path / "patches"
  root = tmp_path / "root"
  shutil.copytree(os.path.join(REPO_ROOT, "patches"), patches)
  if os.path.isdir(os.path.join(REPO_ROOT, "test")):  # git drops empty dirs
    shutil.copytree(os.path.join(REPO_ROOT, "test"), root / "test")
  else:
    root.mkdir()
  assert check("--patches", str(patches), "--tests-root",
               str(root)).returncode == 0
  # Tamper with every carried file, or add a stray one if there are none.
  carried = [
      os.path.join(d, n)
      for d, _, names in os.walk(root / "test")
      for n in names
      if n.endswith(".py")
  ]
  for path in carried:
    with open(path, "a") as f:
      f.write("# tampered\n")
  if not carried:
    (root / "test/dynamo").mkdir(parents=True, exist_ok=True)
    (root / "test/dynamo/test_stray.py").write_text("# not in the series\n")
  p = check("--patches", str(patches), "--tests-root", str(root))
  assert p.returncode == 1
  assert "FAILED" in p.stderr


def test_synthetic_series_in_sync(tmp_path):
  patches, root = synthetic(tmp_path)
  p = check("--patches", patches, "--tests-root", root)
  assert p.returncode == 0, p.stderr
  assert "the 1 test file(s) they carry match" in p.stderr


def test_file_differs(tmp_path):
  patches, root = synthetic(tmp_path)
  with open(os.path.join(root, TEST_FILE), "a") as f:
    f.write(" ")
  p = check("--patches", patches, "--tests-root", root)
  assert p.returncode == 1
  assert f"{TEST_FILE} differs" in p.stderr.replace(root + "/", "")


def test_file_missing_from_repo_and_stray_file(tmp_path):
  patches, root = synthetic(tmp_path)
  os.rename(os.path.join(root, TEST_FILE),
            os.path.join(root, "test/dynamo/test_other.py"))
  p = check("--patches", patches, "--tests-root", root)
  assert p.returncode == 1
  assert f"the series carries {TEST_FILE}, but" in p.stderr
  assert "test_other.py is not carried by the series" in p.stderr


def test_unregistered_test(tmp_path):
  patches, root = synthetic(tmp_path, register=False)
  p = check("--patches", patches, "--tests-root", root)
  assert p.returncode == 1
  assert "is not registered in test/run_tests.sh" in p.stderr


def test_series_listing(tmp_path):
  patches, root = synthetic(tmp_path)
  shutil.copy(os.path.join(patches, "0001-Add-a-test.patch"),
              os.path.join(patches, "0002-unlisted.patch"))
  with open(os.path.join(patches, "series"), "a") as f:
    f.write("0003-missing.patch\n")
  p = check("--patches", patches, "--tests-root", root)
  assert p.returncode == 1
  assert "0002-unlisted.patch is not listed in series" in p.stderr
  assert "series lists 0003-missing.patch, but" in p.stderr


def test_empty_series_and_empty_tests(tmp_path):
  (tmp_path / "patches").mkdir()
  (tmp_path / "patches/series").write_text("# nothing yet\n\n")
  (tmp_path / "root/test/dynamo").mkdir(parents=True)
  p = check("--patches", str(tmp_path / "patches"), "--tests-root",
            str(tmp_path / "root"))
  assert p.returncode == 0, p.stderr
