"""How apply_and_test.sh runs tests and counts them, on a stand-in for a real
pytorch/xla checkout: the wheel checkout plus a test/run_tests.sh and small
stdlib test files under the names of upstream's regression files and of the
series' own, tagged v2.9.0.  The files look for markers that the synthetic
series writes into torch_xla/_dynamo/config.py, so that they pass or fail
with and without the series as each case needs.
"""

import glob
import os

import pytest

from apply_and_test import REGRESSION_FILES
from conftest import CONFIG, REPO_ROOT, append_line, git, make_series

# Also checks the environment: test/run_tests.sh's, from the checkout root,
# and sys.argv[0] as `python FILE` sets it.
PASSING = """
import os
import sys
import unittest


class EnvTest(unittest.TestCase):

  def test_env(self):
    self.assertEqual(os.environ["PJRT_DEVICE"], "CPU")
    self.assertEqual(os.environ["CPU_NUM_DEVICES"],
                     "4" if "/test/spmd/" in __file__ and
                     not __file__.endswith("/test_dynamo_spmd.py") else "1")
    self.assertEqual(os.environ["PYTHONPATH"],
                     f"{os.getcwd()}:{os.getcwd()}/test")
    self.assertEqual(sys.argv[0], __file__)
"""

# Passes in unittest's order (by class name), not in the order of definition.
IN_UNITTEST_ORDER = """
import unittest

RAN = []


class ZTest(unittest.TestCase):

  def test_z(self):
    RAN.append("z")


class ATest(unittest.TestCase):

  def test_a(self):
    self.assertEqual(RAN, [])
"""

# Fails the same way with and without the series.
PRE_EXISTING = """
import unittest


class DynamoTest(unittest.TestCase):

  def test_ok(self):
    pass

  def test_needs_a_missing_package(self):
    import no_such_module  # noqa: F401

  def test_subtests(self):
    for i in range(2):
      with self.subTest(i=i):
        self.fail("fails with and without the series")
"""

# Fails with the "# regression" series only.
REGRESSES = f"""
import unittest


class BridgeTest(unittest.TestCase):

  def test_bridge(self):
    with open("{CONFIG}") as f:
      self.assertNotIn("# regression", f.read())
"""

# Fails with the "# regression" series, passes with the "# harmless" one, and
# kills its process without the series.
CRASHES_WITHOUT_SERIES = f"""
import os
import signal
import unittest


class ConfigTest(unittest.TestCase):

  def test_config(self):
    with open("{CONFIG}") as f:
      text = f.read()
    if "# regression" in text:
      self.fail("regression")
    if "# harmless" not in text:
      os.kill(os.getpid(), signal.SIGKILL)
"""

SERIES_FILES = sorted(
    glob.glob("test/**/test_*.py", root_dir=REPO_ROOT, recursive=True))


@pytest.fixture
def real_like(checkout):
  files = {rel: PASSING for rel in REGRESSION_FILES}
  files.update({
      "test/run_tests.sh": "# stand-in\n",
      # test/spmd is a package upstream: a file there imports its
      # neighbours as python test/spmd/x.py would (test_xla_sharding_base).
      "test/__init__.py": "",
      "test/spmd/__init__.py": "",
      "test/spmd/neighbour.py": "",
      "test/spmd/test_dynamo_spmd.py": "import neighbour\n" + PASSING,
      "test/dynamo/test_dynamo.py": PRE_EXISTING,
      "test/dynamo/test_bridge.py": REGRESSES,
      "test/dynamo/test_dynamo_config.py": CRASHES_WITHOUT_SERIES,
      "test/dynamo/test_none_remover.py": IN_UNITTEST_ORDER,
  })
  for rel, text in files.items():
    os.makedirs(os.path.dirname(os.path.join(checkout, rel)), exist_ok=True)
    with open(os.path.join(checkout, rel), "w") as f:
      f.write(text)
  git("add", "-A", cwd=checkout)
  git("commit", "-q", "-m", "stand-in for upstream", cwd=checkout)
  git("tag", "-f", "v2.9.0", cwd=checkout)
  return checkout


def series(checkout, patch_dir, marker, own_test_fails=False):
  """Writes MARKER into the config; carries the series' test files."""
  changes = {CONFIG: append_line(marker)}
  changes.update({rel: PASSING for rel in SERIES_FILES})
  if own_test_fails:
    changes[SERIES_FILES[0]] = PRE_EXISTING
  make_series(checkout, patch_dir, [("Change the config", changes)])
  return patch_dir


def table(stdout):
  """{file: its row's cells after the name} of the summary."""
  return {l.split()[0]: l.split()[1:] for l in stdout.splitlines() if l}


def test_regressions_are_told_from_pre_existing_failures(
    tools, real_like, tmp_path):
  patches = series(real_like, str(tmp_path / "p1"), "# regression", True)
  p = tools.run("apply_and_test.sh",
                "--checkout",
                real_like,
                "--patches",
                patches,
                check=1)
  rows = table(p.stdout)
  assert rows["file"] == [
      "tests", "passed", "failed", "pre-existing", "skipped", "result"
  ]
  # The series' own failures count, even the ones upstream has too.
  assert rows[SERIES_FILES[0]] == ["3", "1", "2", "0", "0", "FAILED"]
  assert rows["test/dynamo/test_dynamo.py"] == ["3", "1", "0", "2", "0", "ok"]
  assert rows["test/dynamo/test_bridge.py"] == [
      "1", "0", "1", "0", "0", "FAILED"
  ]
  assert rows["test/dynamo/test_dynamo_config.py"][:2] == ["1", "0"]
  assert rows["test/spmd/test_dynamo_spmd.py"][:3] == ["1", "1", "0"]
  lines = p.stdout.splitlines()
  dynamo = "test/dynamo/test_dynamo.py: test.dynamo.test_dynamo.DynamoTest::"
  assert f"pre-existing: {dynamo}test_needs_a_missing_package" in lines
  assert f"pre-existing: {dynamo}test_subtests" in lines
  assert ("regression: test/dynamo/test_bridge.py: "
          "test.dynamo.test_bridge.BridgeTest::test_bridge") in lines
  assert ("test/dynamo/test_dynamo_config.py: no report without the series; "
          "all counted") in lines
  # The tests of the files that always pass: one each, test_none_remover.py
  # two.
  passing = len(SERIES_FILES) - 1 + len(REGRESSION_FILES) - 3 + 1
  assert lines[-1] == f"{1 + passing + 1} passed, {2 + 1 + 1} failed"
  # Only the failing upstream files ran again, in a worktree at the base.
  assert ("rerunning without the series: test/dynamo/test_bridge.py "
          "test/dynamo/test_dynamo_config.py test/dynamo/test_dynamo.py"
         ) in p.stderr
  assert sorted(os.listdir(f"{tools.cache}/logs/without-series")) == [
      "test_dynamo_test_bridge.py.xml", "test_dynamo_test_dynamo.py.xml"
  ]
  assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=real_like) == \
      "fix-8832\n"

  # A series that regresses nothing: the pre-existing failures are left.
  patches = series(real_like, str(tmp_path / "p2"), "# harmless")
  p = tools.run("apply_and_test.sh",
                "--checkout",
                real_like,
                "--patches",
                patches,
                check=0)
  assert p.stdout.splitlines()[-1] == f"{passing + 4} passed, 0 failed"

  # Without the series: nothing is compared; a crash counts as a failure.
  p = tools.run("apply_and_test.sh",
                "--checkout",
                real_like,
                "--patches",
                patches,
                "--unpatched",
                "--only",
                "test_dynamo_config.py",
                check=1)
  assert table(p.stdout)["test/dynamo/test_dynamo_config.py"] == [
      "?", "0", "1", "0", "0", "FAILED", "(killed", "by", "SIGKILL,", "no",
      "report)"
  ]
  assert p.stdout.splitlines()[-1] == "0 passed, 1 failed"
  assert "rerunning" not in p.stderr
