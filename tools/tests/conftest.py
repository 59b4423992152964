"""Fixtures for the tests of the tooling (tools/*.sh, tools/*.py).

Run them with tools/test.sh, which picks the environment (tools/env.sh).
The scripts under test run with APPLY_AND_TEST_CACHE pointing to a
per-session temporary directory, so a test run never touches the developer's
<repo>/.cache (their wheel checkout and its fix-8832 branch).
"""

import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TOOLS = os.path.join(REPO_ROOT, "tools")
sys.path.insert(0, TOOLS)

import series_lib  # noqa: E402

# A mirror of pytorch/xla with the v2.9.0 tag, used where available (not on
# CI machines).
XLA_SRC = os.environ.get("XLA_SRC", "/work/xla-src")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Tooling Test",
    "GIT_AUTHOR_EMAIL": "tooling-test@example.com",
    "GIT_AUTHOR_DATE": "2025-12-01T12:00:00+0000",
    "GIT_COMMITTER_NAME": "Tooling Test",
    "GIT_COMMITTER_EMAIL": "tooling-test@example.com",
    "GIT_COMMITTER_DATE": "2025-12-01T12:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(*args, cwd, check=True):
  p = subprocess.run(["git", *args],
                     cwd=cwd,
                     env=dict(os.environ, **GIT_ENV),
                     capture_output=True,
                     text=True)
  if check and p.returncode:
    raise AssertionError(f"git {args} failed in {cwd}:\n{p.stderr}")
  return p.stdout


def repo_state(path):
  """Everything a failed or refused run must leave unchanged."""
  return {
      "HEAD": git("rev-parse", "HEAD", cwd=path).strip(),
      "symbolic HEAD": git("symbolic-ref", "-q", "HEAD", cwd=path,
                           check=False).strip(),
      "refs": git("for-each-ref", "--format=%(refname) %(objectname)",
                  cwd=path),
      "status": git("status", "--porcelain=v1", "--untracked-files=all",
                    cwd=path),
      "index": git("ls-files", "--stage", cwd=path),
      "worktrees": git("worktree", "list", "--porcelain", cwd=path),
      "diff": git("diff", cwd=path),
  }


class Tools:
  """Runs the scripts with the session's cache and interpreter."""

  def __init__(self, cache):
    self.cache = cache
    self.env = dict(os.environ,
                    APPLY_AND_TEST_CACHE=cache,
                    PYTHON=sys.executable,
                    PJRT_DEVICE="CPU")

  def run(self, script, *args, cwd=None, check=None):
    p = subprocess.run([os.path.join(TOOLS, script), *args],
                       cwd=cwd or REPO_ROOT,
                       env=self.env,
                       capture_output=True,
                       text=True)
    if check is not None and p.returncode != check:
      raise AssertionError(f"{script} {args}: exit {p.returncode}, "
                           f"expected {check}\n--- stdout\n{p.stdout}\n"
                           f"--- stderr\n{p.stderr}")
    return p


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def tools(cache_dir):
  return Tools(cache_dir)


@pytest.fixture(scope="session")
def wheel_pkg_dir():
  return series_lib.installed_package_dir()


@pytest.fixture(scope="session")
def wheel_checkout(cache_dir, wheel_pkg_dir):
  """The checkout built from the installed wheel, at the place where
  apply_and_test.sh looks for it (built once per session)."""
  path = os.path.join(cache_dir, "wheel-checkout")
  series_lib.build_wheel_checkout(path, wheel_pkg_dir)
  return path


@pytest.fixture
def checkout(wheel_checkout, tmp_path):
  """A private copy of the wheel checkout, for tests that change it."""
  path = str(tmp_path / "checkout")
  # -b wheel: the branch the wheel checkout was created with, at the base;
  # not whatever the session's default-mode runs checked out there.
  git("clone", "-q", "-b", "wheel", wheel_checkout, path, cwd=str(tmp_path))
  return path


def make_series(checkout, out_dir, commits, base="v2.9.0"):
  """Commits COMMITS on a scratch clone of CHECKOUT at BASE and exports them
  with format-patch into OUT_DIR (with a series file).

  COMMITS: [(subject, {path: content or callable(old) -> new})].
  Returns the list of patch paths."""
  work = out_dir + ".work"
  git("clone", "-q", checkout, work, cwd=os.path.dirname(out_dir))
  git("checkout", "-q", "--detach", base, cwd=work)
  for subject, changes in commits:
    for path, content in changes.items():
      full = os.path.join(work, path)
      if callable(content):
        with open(full) as f:
          content = content(f.read())
      os.makedirs(os.path.dirname(full), exist_ok=True)
      with open(full, "w") as f:
        f.write(content)
      git("add", path, cwd=work)
    git("commit", "-q", "-m", subject, cwd=work)
  os.makedirs(out_dir, exist_ok=True)
  n = len(commits)
  git("format-patch", "-q", "--zero-commit", "--no-signature", "-o", out_dir,
      f"HEAD~{n}..HEAD", cwd=work)
  names = sorted(f for f in os.listdir(out_dir) if f.endswith(".patch"))
  with open(os.path.join(out_dir, "series"), "w") as f:
    f.write("# synthetic series for a test\n" + "".join(n + "\n" for n in names))
  return [os.path.join(out_dir, n) for n in names]


def append_line(line):
  return lambda old: old + line + "\n"
