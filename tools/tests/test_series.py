"""The real series (patches/) and its tests (test/), through apply_and_test.sh
on the default checkout, built from the wheel."""

import glob
import re

from conftest import REPO_ROOT


def test_real_series_passes_its_tests_on_the_wheel_checkout(tools):
  p = tools.run("apply_and_test.sh")
  lines = p.stdout.splitlines()
  assert [l.split()[0] for l in lines[1:-1]] == sorted(
      glob.glob("test/**/test_*.py", root_dir=REPO_ROOT, recursive=True))
  assert re.fullmatch(r"\d+ passed, 0 failed", lines[-1]), p.stdout
  assert p.returncode == 0
