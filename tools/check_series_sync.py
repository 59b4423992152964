#!/usr/bin/env python3
"""Checks that the patch series and <repo>/test/ agree.

  1. Every patches/*.patch is listed in patches/series, and every entry of
     series exists.
  2. The files under test/ that the series creates or modifies (except
     test/run_tests.sh) are byte for byte the files under <repo>/test/, in
     both directions: a file in <repo>/test/ that the series does not carry is
     an error too.
  3. Each carried test_*.py is registered in upstream's test/run_tests.sh by
     the series: an added line like
         +  run_test "$_TEST_DIR/dynamo/test_foo.py"
     (any run_test* helper) in a patch's diff of test/run_tests.sh.

To get the carried files, the series' changes to test/ are applied with
`git apply --include='test/*'` to an empty git repository (enough when the
series only creates test files).  If the series modifies test files that
already exist upstream, pass --checkout with a pytorch/xla checkout that has
the base commit; the series is then applied to a temporary worktree at the
base.  Exit status 1 on any mismatch.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import series_lib  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_TESTS = "test/run_tests.sh"


def log(msg):
  print(f"[check_series_sync] {msg}", file=sys.stderr)


def run(args, cwd):
  return subprocess.run(args, cwd=cwd, capture_output=True, text=True)


def files_under(root, sub="test"):
  """Paths 'test/...' of the files under ROOT/test (caches ignored)."""
  out = set()
  top = os.path.join(root, sub)
  for d, dirs, names in os.walk(top):
    dirs[:] = [x for x in dirs if x not in ("__pycache__", ".pytest_cache")]
    for n in names:
      if not n.endswith(".pyc"):
        out.add(os.path.relpath(os.path.join(d, n), root))
  return out


def check_series_listing(patch_dir, errors):
  listed = series_lib.read_series(patch_dir)
  on_disk = sorted(n for n in os.listdir(patch_dir) if n.endswith(".patch"))
  for name in listed:
    if not os.path.isfile(os.path.join(patch_dir, name)):
      errors.append(f"series lists {name}, but {patch_dir}/{name} does not exist")
  if len(set(listed)) != len(listed):
    errors.append("series lists a patch more than once")
  for name in on_disk:
    if name not in listed:
      errors.append(f"{patch_dir}/{name} is not listed in series")
  return [
      os.path.join(patch_dir, n)
      for n in listed
      if os.path.isfile(os.path.join(patch_dir, n))
  ]


def base_commit(checkout):
  for rev in (f"refs/tags/{series_lib.BASE_TAG}^{{commit}}",
              f"{series_lib.BASE_COMMIT}^{{commit}}"):
    p = run(["git", "rev-parse", "-q", "--verify", rev], checkout)
    if p.returncode == 0:
      return p.stdout.strip()
  sys.exit(f"error: {checkout} has neither tag {series_lib.BASE_TAG} nor "
           f"commit {series_lib.BASE_COMMIT}")


def apply_test_changes(patches, checkout, errors):
  """Applies the series' changes to test/ (minus run_tests.sh) in a scratch
  tree; returns {path: bytes or None if deleted} for the carried files."""
  carried = {}
  for status, path in series_lib.touched(patches):
    if path.startswith("test/") and path != RUN_TESTS:
      carried[path] = status
  if not carried:
    return {}
  need_base = [
      p for p in series_lib.paths_needing_base(patches)
      if p in carried
  ]
  with tempfile.TemporaryDirectory(prefix="check_series_sync.") as tmp:
    work = os.path.join(tmp, "tree")
    if checkout:
      base = base_commit(checkout)
      p = run(["git", "worktree", "add", "-q", "--detach", work, base], checkout)
      if p.returncode:
        sys.exit(f"error: git worktree add failed in {checkout}: {p.stderr}")
    else:
      if need_base:
        for path in need_base:
          errors.append(
              f"the series modifies {path}, which must already exist upstream; "
              "rerun with --checkout /path/to/pytorch/xla to check it")
        return None
      os.makedirs(work)
      run(["git", "init", "-q"], work)
    try:
      for patch in patches:
        p = run([
            "git", "apply", f"--exclude={RUN_TESTS}", "--include=test/*",
            patch
        ], work)
        if p.returncode:
          errors.append(f"{os.path.basename(patch)}: its changes to test/ do "
                        f"not apply:\n    " +
                        p.stderr.strip().replace("\n", "\n    "))
          return None
      result = {}
      for path in carried:
        full = os.path.join(work, path)
        if os.path.isfile(full):
          with open(full, "rb") as f:
            result[path] = f.read()
        else:
          result[path] = None
      return result
    finally:
      if checkout:
        run(["git", "worktree", "remove", "--force", work], checkout)


def check_registration(patches, carried, errors):
  added = []
  for patch in patches:
    for d in series_lib.parse_patch(patch):
      if d.path == RUN_TESTS:
        added += d.added_lines()
  for path in sorted(carried):
    name = os.path.basename(path)
    if carried[path] is None or not (name.startswith("test_") and
                                     name.endswith(".py")):
      continue
    rel = path[len("test/"):]
    pattern = re.compile(r'^\s*(?:\S+\s+)*run_test\w*\s+"\$_TEST_DIR/' +
                         re.escape(rel) + r'"')
    if not any(pattern.match(line) for line in added):
      errors.append(
          f"{path} is not registered in {RUN_TESTS} by the series; add a line "
          f'+  run_test "$_TEST_DIR/{rel}"')


def main(argv=None):
  ap = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--patches",
                  default=os.path.join(REPO_ROOT, "patches"),
                  help="directory with series and the patches "
                  "(default: %(default)s)")
  ap.add_argument("--tests-root",
                  default=REPO_ROOT,
                  help="directory whose test/ must match the series "
                  "(default: %(default)s)")
  ap.add_argument("--checkout",
                  help="pytorch/xla checkout with the base commit, needed "
                  "only if the series modifies existing upstream test files")
  a = ap.parse_args(argv)
  patch_dir = os.path.abspath(a.patches)
  root = os.path.abspath(a.tests_root)

  errors = []
  patches = check_series_listing(patch_dir, errors)
  carried = apply_test_changes(patches, a.checkout, errors)
  if carried is not None:
    ours = files_under(root)
    for path in sorted(carried):
      content = carried[path]
      mine = os.path.join(root, path)
      if content is None:
        if os.path.exists(mine):
          errors.append(f"the series deletes {path}, but {mine} exists")
      elif not os.path.isfile(mine):
        errors.append(f"the series carries {path}, but {mine} does not exist")
      else:
        with open(mine, "rb") as f:
          if f.read() != content:
            errors.append(f"{mine} differs from the {path} the series carries "
                          "(regenerate the series with tools/regen_patches.sh, "
                          "or copy the file from the patched checkout)")
    for path in sorted(ours - set(carried)):
      errors.append(f"{os.path.join(root, path)} is not carried by the series")
    check_registration(patches, carried, errors)

  if errors:
    for e in errors:
      log("error: " + e)
    log(f"FAILED: {len(errors)} problem(s)")
    return 1
  n = len([p for p in (carried or {}).values() if p is not None])
  log(f"OK: {len(patches)} patch(es) in series; the {n} test file(s) they "
      f"carry match {os.path.join(root, 'test')}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
