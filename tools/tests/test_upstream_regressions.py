"""apply_and_test.sh on a stand-in for a real pytorch/xla checkout: upstream's
test/dynamo files that fail are rerun without the series, and only their new
failures count.

The stand-in is the wheel checkout plus a test/run_tests.sh (which makes it a
"real" checkout for the script) and small stdlib-only test files under the
names of upstream's regression tests and of the series' own tests, with the
v2.9.0 tag moved onto that commit.  The test files look for markers that the
synthetic series writes into torch_xla/_dynamo/config.py, so they pass or
fail with or without the series as each test needs.  No torch in the tests
themselves; the script only imports torch_xla to check where it loads from.
"""

import glob
import os
import re
import textwrap

import pytest

from conftest import REPO_ROOT, append_line, git, make_series

CONFIG = "torch_xla/_dynamo/config.py"

MAIN = """
if __name__ == "__main__":
  test = unittest.main(exit=False)
  sys.exit(0 if test.result.wasSuccessful() else 1)
"""

PASSING = """
import sys
import unittest


class PassingTest(unittest.TestCase):

  def test_pass(self):
    pass
""" + MAIN

# Fails the same way with and without the series: a missing package (like
# upstream's torchax/jax tests) and a subtest whose description holds an
# object's address, which differs from run to run.
PRE_EXISTING = """
import sys
import unittest


class DynamoTest(unittest.TestCase):

  def test_ok(self):
    pass

  def test_needs_a_missing_package(self):
    import no_such_module_for_this_test  # noqa: F401

  def test_subtests(self):
    for fn in (object(),):
      with self.subTest(fn=fn):
        self.fail("fails with and without the series")
""" + MAIN

# Fails only with the "# regression" series.
REGRESSES = f"""
import sys
import unittest


class BridgeTest(unittest.TestCase):

  def test_bridge(self):
    with open("{CONFIG}") as f:
      self.assertNotIn("# regression", f.read())
""" + MAIN

# Fails with the "# regression" series, passes with the "# harmless" one and
# dies without the series: its failure cannot be compared.
CRASHES_WITHOUT_SERIES = f"""
import os
import signal
import sys
import unittest


class ConfigTest(unittest.TestCase):

  def test_config(self):
    with open("{CONFIG}") as f:
      text = f.read()
    if "# regression" in text:
      import no_such_module_for_this_test  # noqa: F401
    elif "# harmless" not in text:
      os.kill(os.getpid(), signal.SIGKILL)
""" + MAIN


def regression_tests():
  with open(os.path.join(REPO_ROOT, "tools/apply_and_test.sh")) as f:
    m = re.search(r"^REGRESSION_TESTS=\((.*?)\)", f.read(), re.M | re.S)
  return [f"test/dynamo/{name}.py" for name in m.group(1).split()]


def series_tests():
  return sorted(
      os.path.relpath(p, REPO_ROOT) for p in glob.glob(
          os.path.join(REPO_ROOT, "test/**/test_*.py"), recursive=True))


@pytest.fixture
def real_like(checkout):
  """The checkout, made to look like a real one at the v2.9.0 tag."""
  files = {"test/run_tests.sh": "#!/bin/bash\n# stand-in\n"}
  for rel in regression_tests():
    files[rel] = PASSING
  files["test/dynamo/test_dynamo.py"] = PRE_EXISTING
  files["test/dynamo/test_bridge.py"] = REGRESSES
  files["test/dynamo/test_dynamo_config.py"] = CRASHES_WITHOUT_SERIES
  # One of the series' own test files already exists (and fails) upstream.
  files[series_tests()[0]] = PRE_EXISTING
  for rel, text in files.items():
    path = os.path.join(checkout, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write(textwrap.dedent(text).lstrip())
  git("add", "-A", cwd=checkout)
  git("commit", "-q", "-m", "stand-in for upstream's tests", cwd=checkout)
  git("tag", "-f", "v2.9.0", cwd=checkout)
  return checkout


def series(checkout, patch_dir, marker, own_test_fails):
  """A series that writes MARKER into the config and carries the series' own
  test files (passing; the first one failing if OWN_TEST_FAILS)."""
  changes = {CONFIG: append_line(marker)}
  for i, rel in enumerate(series_tests()):
    changes[rel] = PRE_EXISTING + "# the series' version\n" \
        if i == 0 and own_test_fails else PASSING
  make_series(checkout, patch_dir, [("Change the config", changes)])
  return patch_dir


def last_lines(stderr, n):
  lines = [l for l in stderr.splitlines() if l.strip()]
  return [l.replace("[apply_and_test] ", "", 1) for l in lines[-n:]]


def table_row(stderr, name):
  for line in stderr.splitlines():
    fields = line.split()
    if fields[1:2] == [name]:
      return fields[2:]
  raise AssertionError(f"no row for {name}:\n{stderr}")


def test_regressions_are_told_from_pre_existing_failures(
    tools, real_like, tmp_path):
  patches = series(real_like, str(tmp_path / "p1"), "# regression", True)
  p = tools.run("apply_and_test.sh", "--checkout", real_like, "--patches",
                patches)
  assert p.returncode == 1, p.stderr
  n_own = len(series_tests())
  n_passing = len(regression_tests()) - 3  # the upstream files that pass
  # The series' own failing tests fail the same way upstream but still
  # count, and so do the regression and the failure that cannot be compared.
  assert last_lines(p.stderr, 2) == [
      "(2 failures pre-existing: they fail the same way without the series)",
      f"{n_own + n_passing + 1} passed, {2 + 1 + 1} failed",
  ]
  header = table_row(p.stderr, "file")
  assert header == [
      "tests", "passed", "failed", "pre-existing", "skipped", "result"
  ]
  assert table_row(p.stderr, series_tests()[0])[:5] == ["3", "1", "2", "-",
                                                        "0"]
  assert table_row(p.stderr, "test/dynamo/test_dynamo.py") == [
      "3", "1", "2", "2", "0", "ok", "(failures", "pre-existing)"
  ]
  assert table_row(p.stderr, "test/dynamo/test_bridge.py")[:5] == [
      "1", "0", "1", "0", "0"
  ]
  assert table_row(p.stderr, "test/dynamo/test_dynamo_config.py")[:5] == [
      "1", "0", "1", "0", "0"
  ]
  # (__main__.DynamoTest.test_x) on Python 3.11+, (__main__.DynamoTest) before
  assert re.search(
      r"^\[apply_and_test\]   ERROR: test_needs_a_missing_package "
      r"\(__main__\.DynamoTest[.\w]*\): ModuleNotFoundError: No module named "
      r"'no_such_module_for_this_test'$", p.stderr, re.M), p.stderr
  # The subtest's description holds an address, different in each run.
  assert re.search(
      r"^\[apply_and_test\]   FAIL: test_subtests \(__main__\.DynamoTest"
      r"[.\w]*\) \(fn=<object object at 0x\.\.\.>\): AssertionError: fails "
      r"with and without the series$", p.stderr, re.M), p.stderr
  assert ("new failures of test/dynamo/test_bridge.py (not failing without "
          "the series):") in p.stderr
  assert ("test/dynamo/test_dynamo_config.py: not compared with a run "
          "without the series (without the series it CRASHED (exit 137, "
          "SIGKILL, no 'Ran N tests' line)); 1 failure counted") in p.stderr

  # Only the failing upstream files were rerun, in a worktree of the cache.
  base_logs = os.path.join(tools.cache, "logs/patched/without-series")
  assert sorted(os.listdir(base_logs)) == [
      "dynamo_test_bridge.log", "dynamo_test_dynamo.log",
      "dynamo_test_dynamo_config.log", "import-check.log"
  ]
  m = re.search(r"without the series: worktree (\S+) detached", p.stderr)
  assert m and m.group(1).startswith(os.path.join(tools.cache, "unpatched"))
  assert git("rev-parse", "HEAD", cwd=m.group(1)) == \
      git("rev-parse", "v2.9.0^{commit}", cwd=real_like)
  # The checkout stayed on the series' branch.
  assert git("symbolic-ref", "HEAD", cwd=real_like).strip() == \
      "refs/heads/fix-8832"
  assert git("status", "--porcelain", cwd=real_like) == ""
  with open(os.path.join(real_like, CONFIG)) as f:
    assert f.read().endswith("# regression\n")

  # A series that regresses nothing: only pre-existing failures are left.
  patches = series(real_like, str(tmp_path / "p2"), "# harmless", False)
  p = tools.run("apply_and_test.sh", "--checkout", real_like, "--patches",
                patches)
  assert last_lines(p.stderr, 2) == [
      "(2 failures pre-existing: they fail the same way without the series)",
      f"{n_own + n_passing + 2 + 1} passed, 0 failed",
  ]
  assert p.returncode == 0, p.stderr

  # --unpatched: no comparison, as before.
  p = tools.run("apply_and_test.sh", "--checkout", real_like, "--patches",
                patches, "--unpatched", "--only", "test_dynamo")
  assert p.returncode == 1, p.stderr
  assert last_lines(p.stderr, 1) == ["1 passed, 2 failed"]
  assert "pre-existing" not in p.stderr
  assert "WITHOUT the series" not in p.stderr
