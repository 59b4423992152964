#!/usr/bin/env python3
"""Checks that patches/ and test/ agree.

  1. patches/series lists every patches/*.patch, and each file it lists exists.
  2. The files the series adds under test/ are, byte for byte, the files
     under <repo>/test/: none missing, none extra.
  3. The series registers each test_*.py it adds in test/run_tests.sh, with a
     line such as  run_test "$_TEST_DIR/dynamo/test_foo.py"  (any run_test*
     helper, e.g. run_test_multi_devices for test/spmd/).

Exit status 1 on any mismatch.
"""

import argparse
import fnmatch
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from series_lib import REPO_ROOT, RUN_TESTS, file_diffs, read_series


def added_test_files(patches):
  """{path: bytes} of the files the series creates under test/, from
  applying just those files' changes in a scratch repository."""
  added = [
      path for patch in patches for path, new in file_diffs(patch)
      if new and path.startswith("test/")
  ]
  if not added:  # git apply without --include would apply everything
    return {}
  with tempfile.TemporaryDirectory() as tmp:
    subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    for patch in patches:
      subprocess.run(
          ["git", "apply", *[f"--include={p}" for p in added], patch],
          cwd=tmp,
          check=True)
    return {path: pathlib.Path(tmp, path).read_bytes() for path in added}


def unregistered(patches, added):
  """The test_*.py files of ADDED that the series does not register in
  test/run_tests.sh."""
  lines = []  # the lines the series adds to test/run_tests.sh
  for patch in patches:
    with open(patch, errors="replace") as f:
      for section in re.split(r"^diff --git ", f.read(), flags=re.M):
        if section.startswith(f"a/{RUN_TESTS} "):
          lines += re.findall(r"^\+(?!\+\+ )(.*)", section, re.M)
  missing = []
  for path in sorted(added):
    quoted = '"$_TEST_DIR/' + path[len("test/"):] + '"'
    if fnmatch.fnmatch(os.path.basename(path), "test_*.py") and not any(
        quoted in line and re.search(r"\brun_test\w*\s", line)
        for line in lines):
      missing.append(path)
  return missing


def repo_test_files(root):
  out = set()
  for d, dirs, names in os.walk(os.path.join(root, "test")):
    dirs[:] = [x for x in dirs if x not in ("__pycache__", ".pytest_cache")]
    out |= {os.path.relpath(f"{d}/{n}", root) for n in names}
  return {path for path in out if not path.endswith(".pyc")}


def listing_errors(patch_dir, patches):
  listed = [os.path.basename(p) for p in patches]
  return [
      f"series lists {p}, which does not exist" for p in patches
      if not os.path.isfile(p)
  ] + [
      f"{patch_dir}/{n} is not listed in series"
      for n in sorted(os.listdir(patch_dir))
      if n.endswith(".patch") and n not in listed
  ]


def content_errors(added, root):
  ours = repo_test_files(root)
  errors = []
  for path in sorted(set(added) | ours):
    if path not in ours:
      errors.append(f"the series adds {path}, which {root}/test lacks")
    elif path not in added:
      errors.append(f"{root}/{path} is not added by the series")
    elif pathlib.Path(root, path).read_bytes() != added[path]:
      errors.append(f"{root}/{path} differs from the series' copy")
  return errors


def problems(patch_dir, root):
  patches = read_series(patch_dir)
  errors = listing_errors(patch_dir, patches)
  if errors:
    return errors
  added = added_test_files(patches)
  return content_errors(added, root) + [
      f"the series does not register {path} in {RUN_TESTS}"
      for path in unregistered(patches, added)
  ]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--patches", default=os.path.join(REPO_ROOT, "patches"))
  ap.add_argument("--tests-root",
                  default=REPO_ROOT,
                  help="directory whose test/ the series must match")
  a = ap.parse_args(argv)
  errors = problems(os.path.abspath(a.patches), os.path.abspath(a.tests_root))
  for e in errors:
    print(f"[check_series_sync] {e}", file=sys.stderr)
  print(f"[check_series_sync] {'FAILED' if errors else 'OK'}", file=sys.stderr)
  return 1 if errors else 0


if __name__ == "__main__":
  sys.exit(main())
