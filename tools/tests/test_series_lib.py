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
