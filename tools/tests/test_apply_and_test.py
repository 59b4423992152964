"""tools/apply_and_test.sh on synthetic series (the real one is tested in
test_series.py)."""

import os
import re
import subprocess

import pytest

from conftest import (XLA_SRC, append_line, git, make_series, repo_state)

CONFIG = "torch_xla/_dynamo/config.py"
BRIDGE = "torch_xla/_dynamo/dynamo_bridge.py"


@pytest.fixture
def two_patches(checkout, tmp_path):
  patch_dir = str(tmp_path / "patches")
  make_series(checkout, patch_dir, [
      ("Mark config", {CONFIG: append_line("# synthetic change 1")}),
      ("Mark bridge", {BRIDGE: append_line("# synthetic change 2")}),
  ])
  return patch_dir


def test_apply_twice_is_a_noop(tools, checkout, two_patches):
  first = tools.run("apply_and_test.sh", "--checkout", checkout, "--patches",
                    two_patches, "--run", "true", check=0)
  assert "applied 2 patch(es)" in first.stderr
  head = git("rev-parse", "fix-8832", cwd=checkout).strip()
  assert git("symbolic-ref", "HEAD", cwd=checkout).strip() == \
      "refs/heads/fix-8832"
  with open(os.path.join(checkout, BRIDGE)) as f:
    assert f.read().endswith("# synthetic change 2\n")
  # Prebuilt links are there but excluded: the checkout is clean.
  assert os.path.islink(os.path.join(checkout, "torch_xla/version.py"))
  assert git("status", "--porcelain", cwd=checkout) == ""
  before = repo_state(checkout)

  second = tools.run("apply_and_test.sh", "--checkout", checkout, "--patches",
                     two_patches, "--run", "true", check=0)
  assert "already applied" in second.stderr
  assert repo_state(checkout) == before
  assert git("rev-parse", "fix-8832^{tree}", cwd=checkout) == \
      git("rev-parse", f"{head}^{{tree}}", cwd=checkout)


@pytest.mark.parametrize("staged", [False, True])
def test_dirty_checkout_is_refused(tools, checkout, two_patches, staged):
  with open(os.path.join(checkout, CONFIG), "a") as f:
    f.write("# local edit\n")
  if staged:
    git("add", CONFIG, cwd=checkout)
  before = repo_state(checkout)
  p = tools.run("apply_and_test.sh", "--checkout", checkout, "--patches",
                two_patches, "--run", "true", check=1)
  assert "uncommitted changes" in p.stderr
  assert "commit or stash" in p.stderr
  assert repo_state(checkout) == before


def test_broken_patch_is_reported_and_checkout_untouched(
    tools, checkout, tmp_path):
  patch_dir = str(tmp_path / "patches")
  patches = make_series(checkout, patch_dir, [
      ("Good one", {CONFIG: append_line("# fine")}),
      ("Broken one", {BRIDGE: lambda s: s.replace(
          "import torch\n", "import torch  # changed\n", 1)}),
  ])
  # Corrupt a context line of the second patch's hunk.
  with open(patches[1]) as f:
    text = f.read()
  hunk_start = re.search(r"^@@ -(\d+),", text, re.M)
  context = re.search(r"^ (\S.*)$", text[hunk_start.end():], re.M)
  text = text.replace("\n " + context.group(1) + "\n",
                      "\n " + context.group(1) + " WRONG\n", 1)
  with open(patches[1], "w") as f:
    f.write(text)
  git("checkout", "-q", "-b", "my-work", cwd=checkout)
  before = repo_state(checkout)

  p = tools.run("apply_and_test.sh", "--checkout", checkout, "--patches",
                patch_dir, "--run", "true", check=1)
  name = os.path.basename(patches[1])
  assert f"patch {name} (#2 of the series) does not apply" in p.stderr
  assert (f"file {BRIDGE}, hunk starting at line {hunk_start.group(1)}"
          in p.stderr)
  assert "WRONG" in p.stderr  # the hunk is shown
  assert "was not changed" in p.stderr
  assert repo_state(checkout) == before
  assert "fix-8832" not in git("branch", "--list", cwd=checkout)


def test_wheel_mode_excludes_files_missing_from_the_wheel(
    tools, checkout, tmp_path):
  # Make a patch that, like the real series, also registers a test in
  # upstream's test/run_tests.sh (which the wheel checkout does not have).
  work = str(tmp_path / "upstream-like")
  git("clone", "-q", checkout, work, cwd=str(tmp_path))
  git("checkout", "-q", "--detach", "v2.9.0", cwd=work)
  os.makedirs(os.path.join(work, "test"))
  with open(os.path.join(work, "test/run_tests.sh"), "w") as f:
    f.write("function run_xla_op_tests5 {\n"
            '  run_test "$_TEST_DIR/dynamo/test_bridge.py"\n}\n')
  git("add", "test", cwd=work)
  git("commit", "-q", "-m", "stand-in for upstream files", cwd=work)
  with open(os.path.join(work, "test/run_tests.sh")) as f:
    text = f.read()
  with open(os.path.join(work, "test/run_tests.sh"), "w") as f:
    f.write(text.replace("test_bridge.py\"\n",
                         "test_bridge.py\"\n"
                         '  run_test "$_TEST_DIR/dynamo/test_new.py"\n'))
  os.makedirs(os.path.join(work, "test/dynamo"))
  with open(os.path.join(work, "test/dynamo/test_new.py"), "w") as f:
    f.write("print('new test')\n")
  with open(os.path.join(work, CONFIG), "a") as f:
    f.write("# fix\n")
  git("add", "-A", cwd=work)
  git("commit", "-q", "-m", "Fix and test", cwd=work)
  patch_dir = str(tmp_path / "patches")
  git("format-patch", "-q", "-o", patch_dir, "HEAD~1..HEAD", cwd=work)
  with open(os.path.join(patch_dir, "series"), "w") as f:
    f.write("0001-Fix-and-test.patch\n")

  p = tools.run("apply_and_test.sh", "--checkout", checkout, "--patches",
                patch_dir, "--run", "true", check=0)
  excluded = [l for l in p.stderr.splitlines() if "not applying" in l]
  assert len(excluded) == 1 and "test/run_tests.sh" in excluded[0]
  assert os.path.isfile(os.path.join(checkout, "test/dynamo/test_new.py"))
  assert not os.path.exists(os.path.join(checkout, "test/run_tests.sh"))


@pytest.mark.skipif(not os.path.isdir(os.path.join(XLA_SRC, ".git")),
                    reason=f"no pytorch/xla mirror at {XLA_SRC} (set XLA_SRC)")
def test_real_checkout_excludes_nothing(tools, tmp_path):
  real = str(tmp_path / "xla")
  git("clone", "-q", "--no-checkout", XLA_SRC, real, cwd=str(tmp_path))
  git("checkout", "-q", "-b", "main", "v2.9.0", cwd=real)
  patch_dir = str(tmp_path / "patches")
  make_series(real, patch_dir, [
      ("Register and fix", {
          "test/run_tests.sh":
              lambda s: s.replace(
                  '  run_test "$_TEST_DIR/dynamo/test_bridge.py"\n',
                  '  run_test "$_TEST_DIR/dynamo/test_bridge.py"\n'
                  '  run_test "$_TEST_DIR/dynamo/test_new.py"\n'),
          CONFIG: append_line("# fix"),
      }),
  ])
  p = tools.run("apply_and_test.sh", "--checkout", real, "--patches",
                patch_dir, "--run", "true", check=0)
  assert "not applying" not in p.stderr
  with open(os.path.join(real, "test/run_tests.sh")) as f:
    assert "dynamo/test_new.py" in f.read()
  assert git("status", "--porcelain", cwd=real) == ""


def test_unpatched_run_imports_from_base_worktree(tools, wheel_checkout,
                                                 tmp_path):
  """Default checkout (the session's wheel checkout), --unpatched."""
  patch_dir = str(tmp_path / "patches")
  make_series(wheel_checkout, patch_dir,
              [("Mark config", {CONFIG: append_line("# patched!")})])
  # Put the default checkout on the patched branch first.
  tools.run("apply_and_test.sh", "--patches", patch_dir, "--run", "true",
            check=0)
  before = repo_state(wheel_checkout)

  p = tools.run("apply_and_test.sh", "--patches", patch_dir, "--unpatched",
                "--run", "python", "-c",
                "import torch_xla; print(torch_xla.__file__)",
                cwd=str(tmp_path), check=0)
  out = p.stdout.strip().splitlines()
  assert len(out) == 1, p.stdout  # stdout is only the command's
  worktree = os.path.dirname(os.path.dirname(out[0]))
  assert worktree.startswith(os.path.join(tools.cache, "unpatched") + os.sep)
  assert out[0] == os.path.join(worktree, "torch_xla", "__init__.py")
  assert git("rev-parse", "HEAD", cwd=worktree) == \
      git("rev-parse", "v2.9.0^{commit}", cwd=wheel_checkout)
  with open(os.path.join(worktree, CONFIG)) as f:
    assert "# patched!" not in f.read()
  # The checkout did not move; it only gained the registered worktree.
  after = repo_state(wheel_checkout)
  assert after.pop("worktrees") != before.pop("worktrees")
  assert after == before


def test_run_keeps_caller_cwd_and_exit_status(tools, tmp_path):
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "series").write_text("")
  caller = tmp_path / "somewhere"
  caller.mkdir()
  p = tools.run("apply_and_test.sh", "--patches", str(empty), "--run",
                "python", "-c",
                "import os, sys, torch_xla; print(os.getcwd()); "
                "print(sys.executable); sys.exit(7)",
                cwd=str(caller))
  assert p.returncode == 7, p.stderr
  cwd, exe = p.stdout.strip().splitlines()
  assert cwd == os.path.realpath(caller)
  assert os.path.realpath(exe) == os.path.realpath(tools.env["PYTHON"])
  assert "[apply_and_test] running in" in p.stderr  # our messages: stderr


def test_help_and_bad_options(tools):
  p = tools.run("apply_and_test.sh", "--help", check=0)
  for opt in ("--checkout", "--patches", "--build prebuilt", "--build source",
              "--unpatched", "--only", "--run", "PYTHON", "PJRT_DEVICE",
              "APPLY_AND_TEST_CACHE", "bazel"):
    assert opt in p.stdout
  p = tools.run("apply_and_test.sh", "--bogus", check=1)
  assert "unknown option" in p.stderr
  p = tools.run("apply_and_test.sh", "--build", "nightly", check=1)
  assert "--build must be" in p.stderr


def test_branch_with_someone_elses_commits_is_not_moved(tools, checkout,
                                                       two_patches, tmp_path):
  tools.run("apply_and_test.sh", "--checkout", checkout, "--patches",
            two_patches, "--run", "true", check=0)
  with open(os.path.join(checkout, CONFIG), "a") as f:
    f.write("# my work in progress\n")
  git("commit", "-q", "-am", "My work", cwd=checkout)
  before = repo_state(checkout)
  p = tools.run("apply_and_test.sh", "--checkout", checkout, "--patches",
                two_patches, "--run", "true", check=1)
  assert "My work" in p.stderr
  assert "not made by this script" in p.stderr
  assert repo_state(checkout) == before

  # A branch holding only an older series is moved to the new one.
  git("reset", "-q", "--hard", "HEAD~1", cwd=checkout)
  one_patch = str(tmp_path / "one")
  make_series(checkout, one_patch,
              [("Only one", {CONFIG: append_line("# newer series")})])
  p = tools.run("apply_and_test.sh", "--checkout", checkout, "--patches",
                one_patch, "--run", "true", check=0)
  assert "(an older series)" in p.stderr
  with open(os.path.join(checkout, CONFIG)) as f:
    assert f.read().endswith("# newer series\n")
