"""What the tools share: the series' base, its patch files, and git."""

import os
import re
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_TAG = "v2.9.0"
BASE_COMMIT = "5fab7053df86c8d503b98d9e7202ca8b8d4978c7"
RUN_TESTS = "test/run_tests.sh"


def die(msg):
  sys.exit(f"error: {msg}")


def git(cwd, *args, env=None, check=True):
  """git's stripped stdout.  A failure exits with git's message, or returns
  None if CHECK is false."""
  p = subprocess.run(["git", *args],
                     cwd=cwd,
                     env=env and dict(os.environ, **env),
                     capture_output=True,
                     text=True)
  if p.returncode == 0:
    return p.stdout.strip()
  if check:
    die(f"git {' '.join(args)} (in {cwd}): {p.stderr.strip()}")
  return None


def read_series(patch_dir):
  """Paths of the patches that PATCH_DIR/series lists, in order."""
  with open(os.path.join(patch_dir, "series")) as f:
    names = [line.split("#")[0].strip() for line in f]
  return [os.path.join(patch_dir, name) for name in names if name]


def base_commit(checkout):
  """The series' base in CHECKOUT: tag v2.9.0, else its commit."""
  for rev in (f"refs/tags/{BASE_TAG}", BASE_COMMIT):
    sha = git(checkout,
              "rev-parse",
              "-q",
              "--verify",
              rev + "^{commit}",
              check=False)
    if sha:
      return sha
  die(f"{checkout} has neither tag {BASE_TAG} nor commit {BASE_COMMIT}; "
      f"git -C {checkout} fetch https://github.com/pytorch/xla tag {BASE_TAG}")


def file_diffs(patch):
  """[(path, created)] for each file a git format-patch file changes."""
  with open(patch, encoding="utf-8", errors="replace") as f:
    text = f.read()
  return [(path, bool(new)) for path, new in re.findall(
      r"^diff --git a/\S+ b/(\S+)\n(new file mode)?", text, re.M)]


def missing_from_base(checkout, base, patches):
  """Paths the series changes (not creates) that BASE lacks, e.g.
  test/run_tests.sh in the checkout built from the wheel."""
  diffs = [d for patch in patches for d in file_diffs(patch)]
  created = {path for path, new in diffs if new}
  return sorted({
      path for path, _ in diffs if path not in created and
      git(checkout, "cat-file", "-e", f"{base}:{path}", check=False) is None
  })


def changed_lines(patch, prefix="torch_xla/"):
  """{path: (added, removed)} of the files under PREFIX that PATCH changes."""
  sizes, path = {}, None
  with open(patch, encoding="utf-8", errors="replace") as f:
    for line in f:
      if line.startswith("diff --git "):
        path = line.split(" b/", 1)[1].strip()
        path = path if path.startswith(prefix) else None
      elif path and line.startswith(("+++ ", "--- ")):
        continue
      elif path and line[:1] in "+-":
        added, removed = sizes.get(path, (0, 0))
        sizes[path] = (added + (line[0] == "+"), removed + (line[0] == "-"))
  return sizes
