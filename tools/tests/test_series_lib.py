"""Parsers in tools/series_lib.py (no torch needed)."""

import series_lib


def write(tmp_path, name, text):
  p = tmp_path / name
  p.write_text(text)
  return str(p)


def test_parse_unittest_ok_and_skips():
  assert series_lib.parse_unittest_log(
      "....\n------\nRan 4 tests in 0.1s\n\nOK (skipped=1)\n") == {
          "ran": 4, "failed": 0, "skipped": 1, "passed": 3, "complete": True
      }


def test_parse_unittest_failures():
  r = series_lib.parse_unittest_log(
      "Ran 10 tests in 3.2s\n\nFAILED (failures=1, errors=2, skipped=3, "
      "expected failures=1, unexpected successes=1)\n")
  assert (r["ran"], r["failed"], r["skipped"], r["passed"]) == (10, 4, 3, 3)


def test_parse_unittest_sums_blocks_and_detects_missing():
  text = "Ran 1 test in 0s\n\nOK\nRan 2 tests in 0s\n\nFAILED (errors=1)\n"
  r = series_lib.parse_unittest_log(text)
  assert (r["ran"], r["failed"], r["passed"]) == (3, 1, 2)
  assert not series_lib.parse_unittest_log("Segmentation fault\n")["complete"]


def test_summary_table(tmp_path):
  ok = write(tmp_path, "ok.log", "Ran 3 tests in 1s\n\nOK (skipped=1)\n")
  bad = write(tmp_path, "bad.log", "Ran 2 tests in 1s\n\nFAILED (failures=1)\n")
  seg = write(tmp_path, "seg.log", "Fatal Python error: Segmentation fault\n")
  late = write(tmp_path, "late.log", "Ran 1 test in 1s\n\nOK\n")
  table, passed, failed = series_lib.summarize([
      ("test/dynamo/test_ok.py", ok, 0),
      ("test/dynamo/test_bad.py", bad, 1),
      ("test/dynamo/test_seg.py", seg, 139),
      ("test/dynamo/test_late.py", late, 134),
  ])
  text = "\n".join(table)
  assert (passed, failed) == (2 + 1 + 1, 1 + 1 + 1)
  assert "CRASHED (exit 139, SIGSEGV, no 'Ran N tests' line)" in text
  assert "CRASHED (exit 134, SIGABRT)" in text
  assert table[0].split() == [
      "file", "tests", "passed", "failed", "skipped", "result"
  ]


def test_parse_patch_and_touched(tmp_path):
  patch = write(
      tmp_path, "p.patch", "From 0000 Mon Sep 17 00:00:00 2001\n"
      "Subject: [PATCH] x\n\n---\n"
      "diff --git a/test/run_tests.sh b/test/run_tests.sh\n"
      "index 1..2 100755\n--- a/test/run_tests.sh\n+++ b/test/run_tests.sh\n"
      "@@ -3,3 +3,4 @@ function f {\n a\n-- \n+b\n+  run_test \"x\"\n c\n"
      "diff --git a/test/dynamo/test_new.py b/test/dynamo/test_new.py\n"
      "new file mode 100644\nindex 0..3\n--- /dev/null\n"
      "+++ b/test/dynamo/test_new.py\n@@ -0,0 +1 @@\n+print(1)\n"
      "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n"
      "--- a/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
      "-- \n2.39.5\n\n")
  diffs = series_lib.parse_patch(patch)
  assert [(d.status, d.path) for d in diffs] == [
      ("M", "test/run_tests.sh"), ("A", "test/dynamo/test_new.py"),
      ("D", "gone.py")
  ]
  # "-- " inside a hunk is a removed line, not the signature separator.
  assert diffs[0].hunks()[0][0] == 3
  assert diffs[0].added_lines() == ["b", '  run_test "x"']
  assert series_lib.paths_needing_base([patch]) == [
      "gone.py", "test/run_tests.sh"
  ]


def test_explain_am_failure(tmp_path):
  patch = write(
      tmp_path, "0002-b.patch", "Subject: [PATCH] b\n\n---\n"
      "diff --git a/f.py b/f.py\nindex 1..2 100644\n--- a/f.py\n+++ b/f.py\n"
      "@@ -10,3 +10,4 @@\n a\n+b\n c\n d\n")
  log = ("Applying: a\nApplying: b\nerror: patch failed: f.py:10\n"
         "error: f.py: patch does not apply\nPatch failed at 0002 b\n")
  out = "\n".join(series_lib.explain_am_failure(log, ["0001-a.patch", patch]))
  assert "patch 0002-b.patch (#2 of the series) does not apply" in out
  assert "file f.py, hunk starting at line 10" in out
  assert "@@ -10,3 +10,4 @@" in out


def test_read_series_comments(tmp_path):
  (tmp_path / "series").write_text(
      "# head\n\n0001-a.patch\n  # indented comment\n0002-b.patch  # why\n")
  assert series_lib.read_series(str(tmp_path)) == [
      "0001-a.patch", "0002-b.patch"
  ]
  assert series_lib.series_leading_comments(str(tmp_path)) == ["# head\n"]


# --------------------------------------------------------------------------
# Failures with and without the series (canned `python test_x.py -v` output,
# as unittest on Python 3.11 and absl's parameterized tests print it)

SEP1 = "=" * 70
SEP2 = "-" * 70


def absl_log(addr, fails, passes=("test_einsum0",), noise=True):
  """A -v log of absl-parameterized tests: PASSES pass, FAILS (names) fail
  with ModuleNotFoundError; the function reprs hold the address ADDR."""
  fn = f"<function dynamo_backend at {addr}>"
  out = []
  for name in passes:
    out += [f"{name} ({fn}) (__main__.DynamoTest)",
            f"DynamoTest.{name} ({fn})", f"{name[:-1]}({fn}) ... ok"]
  for name in fails:
    out += [f"{name} ({fn}) (__main__.DynamoTest)",
            f"DynamoTest.{name} ({fn})",
            f"{name[:-1]}({fn}) ... " +
            ("To use this dynamo backend, please install torchax\nERROR"
             if noise else "ERROR")]
  out.append("")
  for name in fails:
    out += [SEP1, f"ERROR: {name} ({fn}) (__main__.DynamoTest)",
            f"DynamoTest.{name} ({fn})", f"{name[:-1]}({fn})", SEP2,
            "Traceback (most recent call last):",
            '  File "/x/torchax/__init__.py", line 4, in <module>',
            "    import jax",
            "ModuleNotFoundError: No module named 'jax'", ""]
  n = len(passes) + len(fails)
  out += [SEP2, f"Ran {n} tests in 1.234s", ""]
  out.append(f"FAILED (errors={len(fails)})" if fails else "OK")
  return "\n".join(out) + "\n"


SUBTESTS_LOG = f"""\
test_ok (__main__.A.test_ok) ... ok
test_sub (__main__.A.test_sub) ... 
  test_sub (__main__.A.test_sub) (i=1) ... FAIL
  test_sub (__main__.A.test_sub) (i=2) ... FAIL
test_sub_msg (__main__.A.test_sub_msg) ... 
  test_sub_msg (__main__.A.test_sub_msg) [named] ... ERROR
test_fail (__main__.A.test_fail)
Docstring line one. ... FAIL
test_skip (__main__.A.test_skip) ... skipped 'why'
test_xf (__main__.A.test_xf) ... expected failure
test_xpass (__main__.A.test_xpass) ... unexpected success

{SEP1}
ERROR: test_sub_msg (__main__.A.test_sub_msg) [named]
{SEP2}
Traceback (most recent call last):
  File "/tmp/t.py", line 17, in test_sub_msg
    raise KeyError("a")
KeyError: 'a'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/tmp/t.py", line 19, in test_sub_msg
    raise ValueError("boom\\nsecond line")
ValueError: boom
second line

{SEP1}
FAIL: test_fail (__main__.A.test_fail)
Docstring line one.
{SEP2}
Traceback (most recent call last):
  File "/tmp/t.py", line 7, in test_fail
    self.assertEqual(1, 2)
AssertionError: 1 != 2

{SEP1}
FAIL: test_sub (__main__.A.test_sub) (i=1)
{SEP2}
Traceback (most recent call last):
  File "/tmp/t.py", line 14, in test_sub
    self.assertLess(i, 1)
AssertionError: 1 not less than 1

{SEP1}
FAIL: test_sub (__main__.A.test_sub) (i=2)
{SEP2}
Traceback (most recent call last):
  File "/tmp/t.py", line 14, in test_sub
    self.assertLess(i, 1)
AssertionError: 2 not less than 1

{SEP1}
UNEXPECTED SUCCESS: test_xpass (__main__.A.test_xpass)
{SEP2}
Ran 7 tests in 0.002s

FAILED (failures=3, errors=1, skipped=1, expected failures=1, unexpected successes=1)
"""


def test_failing_tests_subtests_docstrings_and_chained_errors():
  assert series_lib.unittest_failing_tests(SUBTESTS_LOG) == [
      ("ERROR", "test_sub_msg (__main__.A.test_sub_msg) [named]",
       "ValueError: boom"),
      ("FAIL", "test_fail (__main__.A.test_fail)", "AssertionError: 1 != 2"),
      ("FAIL", "test_sub (__main__.A.test_sub) (i=1)",
       "AssertionError: 1 not less than 1"),
      ("FAIL", "test_sub (__main__.A.test_sub) (i=2)",
       "AssertionError: 2 not less than 1"),
      ("UNEXPECTED SUCCESS", "test_xpass (__main__.A.test_xpass)", ""),
  ]


def test_progress_lines():
  assert series_lib.unittest_progress(SUBTESTS_LOG) == [
      ("test_ok (__main__.A.test_ok)", "ok"),
      ("test_sub (__main__.A.test_sub) (i=1)", "FAIL"),
      ("test_sub (__main__.A.test_sub) (i=2)", "FAIL"),
      ("test_sub_msg (__main__.A.test_sub_msg) [named]", "ERROR"),
      ("test_fail (__main__.A.test_fail)", "FAIL"),
      ("test_skip (__main__.A.test_skip)", "skipped 'why'"),
      ("test_xf (__main__.A.test_xf)", "expected failure"),
      ("test_xpass (__main__.A.test_xpass)", "unexpected success"),
  ]
  # absl: three description lines, and the status cut off by the test's
  # output; addresses blanked.
  fn = "<function dynamo_backend at 0x...>"
  assert series_lib.unittest_progress(
      absl_log("0x7f3218ba2e80", ["test_einsum1"])) == [
          (f"test_einsum0 ({fn}) (__main__.DynamoTest)", "ok"),
          (f"test_einsum1 ({fn}) (__main__.DynamoTest)", "ERROR"),
      ]


def test_unexpected_success_without_block_comes_from_progress_lines():
  # Python < 3.11 lists no unexpected success after the run.
  log = ("test_a (__main__.A) ... unexpected success\n\n" + SEP2 +
         "\nRan 1 test in 0.001s\n\nFAILED (unexpected successes=1)\n")
  assert series_lib.unittest_failing_tests(log) == [
      ("UNEXPECTED SUCCESS", "test_a (__main__.A)", "")
  ]


def test_failure_in_both_runs_is_pre_existing():
  with_series = absl_log("0x7f3218ba2e80", ["test_einsum1", "test_copy1"])
  without = absl_log("0x7f00deadbeef", ["test_copy1", "test_einsum1"],
                     noise=False)
  c = series_lib.compare_with_base(with_series, 1, without, 1)
  assert c["reason"] is None and c["new"] == [] and c["unnamed"] == 0
  fn = "<function dynamo_backend at 0x...>"
  jax = "ModuleNotFoundError: No module named 'jax'"
  assert c["pre_existing"] == [
      ("ERROR", f"test_einsum1 ({fn}) (__main__.DynamoTest)", jax, jax),
      ("ERROR", f"test_copy1 ({fn}) (__main__.DynamoTest)", jax, jax),
  ]


def test_new_failure_is_a_regression():
  with_series = absl_log("0x7f3218ba2e80", ["test_einsum1", "test_copy1"])
  without = absl_log("0x7f00deadbeef", ["test_einsum1"],
                     passes=("test_einsum0", "test_copy1"))
  c = series_lib.compare_with_base(with_series, 1, without, 1)
  assert [t for _, t, _, _ in c["pre_existing"]] == [
      "test_einsum1 (<function dynamo_backend at 0x...>) (__main__.DynamoTest)"
  ]
  assert [t for _, t, _ in c["new"]] == [
      "test_copy1 (<function dynamo_backend at 0x...>) (__main__.DynamoTest)"
  ]


def test_subtests_are_compared_one_by_one():
  without = SUBTESTS_LOG.replace("(i=2) ... FAIL", "(i=2) ... ok")
  start = without.index(SEP1 + "\nFAIL: test_sub (__main__.A.test_sub) (i=2)")
  end = without.index(SEP1 + "\nUNEXPECTED SUCCESS")
  without = without[:start] + without[end:]
  without = without.replace("failures=3", "failures=2")
  c = series_lib.compare_with_base(SUBTESTS_LOG, 1, without, 1)
  assert [t for _, t, _ in c["new"]] == ["test_sub (__main__.A.test_sub) (i=2)"]
  assert len(c["pre_existing"]) == 4


def test_same_failure_twice_is_excused_once():
  # Subtests without parameters share one description.
  block = (f"{SEP1}\nFAIL: test_s (__main__.A.test_s) (<subtest>)\n{SEP2}\n"
           "Traceback (most recent call last):\nAssertionError: x\n\n")
  end = f"{SEP2}\nRan 1 test in 0s\n\nFAILED (failures=%d)\n"
  c = series_lib.compare_with_base(block * 2 + end % 2, 1, block + end % 1, 1)
  assert len(c["pre_existing"]) == 1 and len(c["new"]) == 1


def test_crash_without_the_series_excuses_nothing():
  with_series = absl_log("0x7f3218ba2e80", ["test_einsum1"])
  for without, status, why in [
      ("test_einsum0 (...) ... ok\nFatal Python error: Aborted\n", 134,
       "CRASHED (exit 134, SIGABRT, no 'Ran N tests' line)"),
      (absl_log("0x7f00deadbeef", ["test_einsum1"]), 139,
       "CRASHED (exit 139, SIGSEGV)"),
      ("", 2, "CRASHED (exit 2, no 'Ran N tests' line)"),
  ]:
    c = series_lib.compare_with_base(with_series, 1, without, status)
    assert c["pre_existing"] == [] and len(c["new"]) == 1
    assert c["reason"] == f"without the series it {why}"
  c = series_lib.compare_with_base(with_series, 1, "", None, "no worktree")
  assert c["pre_existing"] == [] and c["reason"] == "no worktree"


def test_crash_with_the_series_excuses_nothing():
  crashed = absl_log("0x7f3218ba2e80", ["test_einsum1"]).split(SEP1)[0]
  same = absl_log("0x7f3218ba2e80", ["test_einsum1"])
  for text, status in [(crashed, 139), (same, 139)]:
    c = series_lib.compare_with_base(text, status, same, 1)
    assert c["pre_existing"] == []
    assert c["reason"].startswith("with the series it CRASHED")


def test_summary_with_baseline(tmp_path):
  fails = ["test_einsum1", "test_copy1"]
  upstream = write(tmp_path, "up.log", absl_log("0x7f3218ba2e80", fails))
  upstream_base = write(tmp_path, "up.base.log",
                        absl_log("0x7f00deadbeef", fails))
  regressed = write(tmp_path, "reg.log", absl_log("0x7f3218ba2e80", fails))
  regressed_base = write(tmp_path, "reg.base.log",
                         absl_log("0x7f00deadbeef", ["test_copy1"],
                                  passes=("test_einsum0", "test_einsum1")))
  # The series' own file fails exactly as it does without the series: it
  # still counts.
  own = write(tmp_path, "own.log", absl_log("0x7f3218ba2e80", ["test_x1"]))
  ok = write(tmp_path, "ok.log", "Ran 3 tests in 1s\n\nOK\n")
  rows = [
      ("test/dynamo/test_own.py", own, 1, "series"),
      ("test/dynamo/test_dynamo.py", upstream, 1, "upstream"),
      ("test/dynamo/test_regressed.py", regressed, 1, "upstream"),
      ("test/dynamo/test_bridge.py", ok, 0, "upstream"),
  ]
  baseline = {
      "test/dynamo/test_own.py": (own, 1, None),
      "test/dynamo/test_dynamo.py": (upstream_base, 1, None),
      "test/dynamo/test_regressed.py": (regressed_base, 1, None),
  }
  lines, passed, failed = series_lib.summarize(rows, baseline)
  assert lines[0].split() == [
      "file", "tests", "passed", "failed", "pre-existing", "skipped", "result"
  ]
  table = {l.split()[0]: l.split() for l in lines[2:6]}
  assert table["test/dynamo/test_own.py"][1:] == [
      "2", "1", "1", "-", "0", "FAILED"
  ]
  assert table["test/dynamo/test_dynamo.py"][1:] == [
      "3", "1", "2", "2", "0", "ok", "(failures", "pre-existing)"
  ]
  assert table["test/dynamo/test_regressed.py"][1:] == [
      "3", "1", "2", "1", "0", "FAILED", "(1", "new,", "1", "pre-existing)"
  ]
  assert table["test/dynamo/test_bridge.py"][1:] == [
      "3", "3", "0", "0", "0", "ok"
  ]
  assert (passed, failed) == (1 + 1 + 1 + 3, 1 + 0 + 1 + 0)
  notes = "\n".join(lines[6:])
  fn = "<function dynamo_backend at 0x...>"
  assert (f"pre-existing failures of test/dynamo/test_dynamo.py (they also "
          f"fail without the series; log: {upstream_base}):\n"
          f"  ERROR: test_einsum1 ({fn}) (__main__.DynamoTest): "
          "ModuleNotFoundError: No module named 'jax'\n") in notes
  assert (f"new failures of test/dynamo/test_regressed.py (not failing "
          f"without the series):\n  ERROR: test_einsum1 ({fn})") in notes
  assert "test_own" not in notes
  assert lines[-1] == ("(3 failures pre-existing: they fail the same way "
                       "without the series)")


def test_summary_without_baseline_is_unchanged(tmp_path):
  log = write(tmp_path, "up.log", absl_log("0x7f3218ba2e80", ["test_x1"]))
  lines, passed, failed = series_lib.summarize([
      ("test/dynamo/test_dynamo.py", log, 1, "upstream")
  ])
  assert lines[0].split() == [
      "file", "tests", "passed", "failed", "skipped", "result"
  ]
  assert len(lines) == 3 and (passed, failed) == (1, 1)


def test_summary_cli(tmp_path, capsys):
  fails = ["test_einsum1"]
  up = write(tmp_path, "up.log", absl_log("0x7f3218ba2e80", fails))
  base = write(tmp_path, "base.log", absl_log("0x7f00deadbeef", fails))
  crashed = write(tmp_path, "crashed.log", "Segmentation fault\n")
  ok = write(tmp_path, "ok.log", "Ran 2 tests in 1s\n\nOK\n")
  tsv = write(
      tmp_path, "summary.tsv", f"test/dynamo/test_new.py\t{ok}\t0\tseries\n"
      f"test/dynamo/test_dynamo.py\t{up}\t1\tupstream\n"
      f"test/dynamo/test_crash.py\t{crashed}\t139\tupstream\n"
      f"test/dynamo/test_old_format.py\t{up}\t1\n")
  assert series_lib.main(["rerun-candidates", tsv]) == 0
  assert capsys.readouterr().out == "test/dynamo/test_dynamo.py\n"

  with_crash = write(tmp_path, "baseline.tsv",
                     f"test/dynamo/test_dynamo.py\t{base}\t1\n")
  assert series_lib.main(["summary", tsv, "--baseline", with_crash]) == 1
  out = capsys.readouterr().out.splitlines()
  # The crash and the 4th file (no kind: one of the series') count.
  assert out[-1] == "4 passed, 2 failed"
  assert out[-2] == ("(1 failure pre-existing: it fails the same way without "
                     "the series)")

  with open(tsv) as f:
    only_upstream = write(tmp_path, "only.tsv", "".join(f.readlines()[:2]))
  assert series_lib.main(["summary", only_upstream, "--baseline",
                          with_crash]) == 0
  assert capsys.readouterr().out.splitlines()[-1] == "3 passed, 0 failed"

  not_run = write(tmp_path, "not_run.tsv",
                  "test/dynamo/test_dynamo.py\t\t\tno worktree\n")
  assert series_lib.main(["summary", only_upstream, "--baseline",
                          not_run]) == 1
  out = capsys.readouterr().out
  assert out.splitlines()[-1] == "3 passed, 1 failed"
  assert ("test/dynamo/test_dynamo.py: not compared with a run without the "
          "series (no worktree); 1 failure counted") in out
  # Without --baseline (--unpatched, wheel checkout): as before.
  assert series_lib.main(["summary", only_upstream]) == 1
  assert capsys.readouterr().out.splitlines()[-1] == "3 passed, 1 failed"
