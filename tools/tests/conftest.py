"""Fixtures for the tests of tools/ (run them with tools/test.sh).

The tools run with APPLY_AND_TEST_CACHE in a temporary directory, so a test
run never touches <repo>/.cache.  XLA_CHECKOUT, if set, is a pytorch/xla
clone with the v2.9.0 tag; the tests that need one skip without it.
"""

import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(REPO_ROOT, "tools")
sys.path.insert(0, TOOLS)

import apply_and_test  # noqa: E402

XLA_CHECKOUT = os.environ.get("XLA_CHECKOUT")
needs_xla_checkout = pytest.mark.skipif(
    not XLA_CHECKOUT, reason="set XLA_CHECKOUT to a pytorch/xla clone")
CONFIG = "torch_xla/_dynamo/config.py"
BRIDGE = "torch_xla/_dynamo/dynamo_bridge.py"

GIT_ENV = {
    f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
    for what, value in (("NAME", "Tooling Test"), ("EMAIL",
                                                   "tooling-test@example.com"),
                        ("DATE", "2025-12-01T12:00:00+0000"))
}


def git(*args, cwd):
  return subprocess.run(["git", *args],
                        cwd=cwd,
                        env=dict(os.environ, **GIT_ENV),
                        capture_output=True,
                        text=True,
                        check=True).stdout


def repo_state(path):
  """What a refused or failed run must leave as it was."""
  return {
      " ".join(args): git(*args, cwd=path)
      for args in (("rev-parse", "HEAD"), ("for-each-ref",),
                   ("status", "--porcelain", "--untracked-files=all"),
                   ("ls-files", "--stage"), ("worktree", "list"), ("diff",),
                   ("rev-parse", "--symbolic-full-name", "HEAD"))
  }


class Tools:
  """Runs the tools with the session's cache and interpreter."""

  def __init__(self, cache):
    self.cache = cache
    self.env = dict(os.environ,
                    APPLY_AND_TEST_CACHE=cache,
                    PYTHON=sys.executable)

  def run(self, script, *args, cwd=REPO_ROOT, check=None, env=None):
    p = subprocess.run([os.path.join(TOOLS, script), *args],
                       cwd=cwd,
                       env=dict(self.env, **(env or {})),
                       capture_output=True,
                       text=True)
    assert check is None or p.returncode == check, (
        f"{script} {args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p

  def apply(self, *args, **kwargs):
    """tools/apply_and_test.sh ARGS..."""
    return self.run("apply_and_test.sh", *args, **kwargs)


def pytest_collection_modifyitems(items):
  # The slow tests first, so that the workers (-n 2 in setup.cfg) end together.
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def tools(tmp_path_factory):
  return Tools(str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def wheel_checkout(tools):
  """The checkout built from the wheel, where apply_and_test.sh expects it."""
  path = os.path.join(tools.cache, "wheel-checkout")
  if not os.path.isdir(path):  # a test's apply_and_test.sh may have built it
    apply_and_test.build_wheel_checkout(path)
  return path


@pytest.fixture
def checkout(wheel_checkout, tmp_path):
  """A clone of the wheel checkout, for a test to change."""
  git("clone", "-q", "-b", "wheel", wheel_checkout, "checkout", cwd=tmp_path)
  return str(tmp_path / "checkout")


def make_series(checkout, patch_dir, commits):
  """Commits COMMITS [(subject, {path: text or f(old text)})] on v2.9.0 of
  a clone of CHECKOUT and exports them into PATCH_DIR, with a series file.
  Returns the patch paths."""
  work = patch_dir + ".work"
  git("clone", "-q", checkout, work, cwd=os.path.dirname(patch_dir))
  git("checkout", "-q", "--detach", "v2.9.0", cwd=work)
  for subject, changes in commits:
    for path, text in changes.items():
      full = os.path.join(work, path)
      if callable(text):
        with open(full) as f:
          text = text(f.read())
      os.makedirs(os.path.dirname(full), exist_ok=True)
      with open(full, "w") as f:
        f.write(text)
      git("add", path, cwd=work)
    git("commit", "-q", "-m", subject, cwd=work)
  names = git("format-patch",
              "--zero-commit",
              "-o",
              patch_dir,
              f"HEAD~{len(commits)}",
              cwd=work).split()
  with open(os.path.join(patch_dir, "series"), "w") as f:
    f.write("# a test's series\n" +
            "".join(os.path.basename(n) + "\n" for n in names))
  return names


def append_line(line):
  return lambda old: old + line + "\n"
