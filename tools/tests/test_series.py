"""The real series (patches/) and its torch_xla tests, via apply_and_test.sh
on the default checkout (built from the wheel, in this session's cache)."""

import re


def test_series_tests_pass_on_wheel_checkout(tools):
  p = tools.run("apply_and_test.sh")
  lines = [l for l in p.stderr.splitlines() if l.strip()]
  last = lines[-1] if lines else ""
  m = re.fullmatch(r"\[apply_and_test\] (\d+) passed, (\d+) failed", last)
  assert m, f"no summary line; stderr:\n{p.stderr}"
  assert m.group(2) == "0", p.stderr
  assert p.returncode == 0, p.stderr
