"""tools/apply_and_test.sh: applying a synthetic series, --run, --unpatched,
a PyTorch series over the installed torch, a checkout installed in develop
mode, runs from inside the checkout."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

import apply_and_test
from conftest import (BRIDGE, CONFIG, XLA_CHECKOUT, append_line, git,
                      make_series, needs_xla_checkout, repo_state)

RUN_TRUE = ("--run", "true")


@pytest.fixture
def two_patches(checkout, tmp_path):
  patch_dir = str(tmp_path / "patches")
  make_series(checkout, patch_dir, [("[dynamo] Mark config", {
      CONFIG: append_line("# change 1")
  }), ("Mark bridge", {
      BRIDGE: append_line("# change 2")
  })])
  return patch_dir


def test_apply_then_already_applied(tools, checkout, two_patches):
  args = ("--checkout", checkout, "--patches", two_patches, *RUN_TRUE)
  tools.apply(*args, check=0)
  assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=checkout) == "fix-8832\n"
  assert git("log", "--format=%s", "-2", cwd=checkout) == \
      "Mark bridge\n[dynamo] Mark config\n"
  # The wheel's version.py is linked in, and git-excluded.
  assert os.path.islink(os.path.join(checkout, "torch_xla/version.py"))
  assert git("status", "--porcelain", cwd=checkout) == ""
  before = repo_state(checkout)
  # Again, with the patch directory relative to the current directory.
  relative = ("--checkout", checkout, "--patches", "patches", *RUN_TRUE)
  p = tools.apply(*relative, cwd=os.path.dirname(two_patches), check=0)
  assert "already applied" in p.stderr
  assert repo_state(checkout) == before


def test_dirty_checkout_is_refused(tools, checkout, two_patches):
  with open(os.path.join(checkout, CONFIG), "a") as f:
    f.write("# local edit\n")
  before = repo_state(checkout)
  p = tools.apply("--checkout",
                  checkout,
                  "--patches",
                  two_patches,
                  *RUN_TRUE,
                  check=1)
  assert "uncommitted changes" in p.stderr
  assert repo_state(checkout) == before


def test_failing_patch_is_named_and_checkout_untouched(tools, checkout,
                                                       tmp_path):
  patch_dir = str(tmp_path / "patches")
  patches = make_series(checkout, patch_dir, [("Good", {
      CONFIG: append_line("# fine")
  }), ("Bad", {
      BRIDGE: append_line("# never applies")
  })])
  with open(patches[1]) as f:
    text = f.read()
  with open(patches[1], "w") as f:  # a context line that is not there
    f.write(re.sub(r"^(@@.*\n) (.*)", r"\1 \2 WRONG", text, flags=re.M))
  before = repo_state(checkout)
  p = tools.apply("--checkout",
                  checkout,
                  "--patches",
                  patch_dir,
                  *RUN_TRUE,
                  check=1)
  assert f"patch {os.path.basename(patches[1])} does not apply" in p.stderr
  assert f"error: patch failed: {BRIDGE}:" in p.stderr
  assert repo_state(checkout) == before


def test_wheel_checkout_leaves_out_files_it_lacks(tools, checkout, tmp_path):
  # Like the real series: a new test, registered in test/run_tests.sh,
  # which upstream has and the wheel checkout lacks.
  upstream = str(tmp_path / "upstream")
  git("clone", "-q", checkout, upstream, cwd=tmp_path)
  os.makedirs(os.path.join(upstream, "test"))
  with open(os.path.join(upstream, "test/run_tests.sh"), "w") as f:
    f.write("run_test a\n")
  git("add", "test", cwd=upstream)
  git("commit", "-q", "-m", "upstream's files", cwd=upstream)
  git("tag", "-f", "v2.9.0", cwd=upstream)
  patch_dir = str(tmp_path / "patches")
  make_series(upstream, patch_dir, [("Fix and test", {
      "test/run_tests.sh": append_line("run_test b"),
      "test/dynamo/test_new.py": "print('new')\n",
      CONFIG: append_line("# fix"),
  })])
  p = tools.apply("--checkout",
                  checkout,
                  "--patches",
                  patch_dir,
                  *RUN_TRUE,
                  check=0)
  assert re.findall(r"not applying .* to (\S+),", p.stderr) == \
      ["test/run_tests.sh"]
  assert os.path.isfile(os.path.join(checkout, "test/dynamo/test_new.py"))


@needs_xla_checkout
def test_real_checkout_leaves_out_nothing(tools, tmp_path):
  real = str(tmp_path / "xla")
  git("clone", "-q", "--shared", "-b", "v2.9.0", XLA_CHECKOUT, real, cwd=".")
  patch_dir = str(tmp_path / "patches")
  make_series(real, patch_dir, [("Register a test", {
      "test/run_tests.sh": append_line("run_test b"),
  })])
  p = tools.apply("--checkout",
                  real,
                  "--patches",
                  patch_dir,
                  *RUN_TRUE,
                  check=0)
  assert "not applying" not in p.stderr
  assert git("status", "--porcelain", cwd=real) == ""


def test_your_commits_on_the_branch_are_kept(tools, checkout, two_patches,
                                             tmp_path):
  apply = lambda patch_dir, check: tools.apply(
      "--checkout", checkout, "--patches", patch_dir, *RUN_TRUE, check=check)
  apply(two_patches, 0)
  with open(os.path.join(checkout, CONFIG), "a") as f:
    f.write("# my work\n")
  git("commit", "-q", "-am", "My work", cwd=checkout)
  before = repo_state(checkout)
  p = apply(two_patches, 1)
  assert "My work" in p.stderr and "not made by this tool" in p.stderr
  assert repo_state(checkout) == before
  # A branch holding only an older series moves to the new one.
  git("reset", "-q", "--hard", "HEAD~1", cwd=checkout)
  newer = str(tmp_path / "newer")
  make_series(checkout, newer, [("Newer", {CONFIG: append_line("# newer")})])
  assert "older series" in apply(newer, 0).stderr
  assert git("log", "--format=%s", "-1", cwd=checkout) == "Newer\n"


def test_unpatched_run_uses_a_worktree_at_the_base(tools, wheel_checkout,
                                                   tmp_path):
  patch_dir = str(tmp_path / "patches")
  make_series(wheel_checkout, patch_dir, [("Mark", {
      CONFIG: append_line("# patched!")
  })])
  tools.apply("--patches", patch_dir, *RUN_TRUE, check=0)
  before = repo_state(wheel_checkout)
  p = tools.apply("--patches",
                  patch_dir,
                  "--unpatched",
                  "--run",
                  "python",
                  "-c",
                  "import torch_xla; print(torch_xla.__file__)",
                  check=0)
  (where,) = p.stdout.split()  # stdout is the command's alone
  worktree = os.path.dirname(os.path.dirname(where))
  assert worktree.startswith(os.path.join(tools.cache, "unpatched", ""))
  assert git("rev-parse", "HEAD", cwd=worktree) == \
      git("rev-parse", "v2.9.0^{commit}", cwd=wheel_checkout)
  with open(os.path.join(worktree, CONFIG)) as f:
    assert "# patched!" not in f.read()
  after = repo_state(wheel_checkout)  # it only gained a worktree
  assert after.pop("worktree list") != before.pop("worktree list")
  assert after == before


def test_run_keeps_cwd_and_exit_status(tools, tmp_path):
  (tmp_path / "series").write_text("")
  code = ("import os, sys, torch_xla\n"
          "print(os.getcwd(), torch_xla.__file__)\nsys.exit(7)")
  p = tools.apply("--patches",
                  str(tmp_path),
                  "--run",
                  "python",
                  "-c",
                  code,
                  cwd=tmp_path,
                  check=7)
  cwd, where = p.stdout.split()
  assert cwd == os.path.realpath(tmp_path)
  assert where == f"{tools.cache}/wheel-checkout/torch_xla/__init__.py"


WHERE = ("import torch_xla\n"
         "print(torch_xla.__file__, torch_xla._XLAC.__file__, "
         "torch_xla.__version__)")


def test_run_from_inside_the_checkout(tools, checkout, two_patches):
  # The checkout's torch_xla/ (no version.py) in the current directory must
  # not hide the installed one from the tool.
  p = tools.apply("--checkout",
                  ".",
                  "--patches",
                  two_patches,
                  "--run",
                  "python",
                  "-c",
                  WHERE,
                  cwd=checkout,
                  check=0)
  where, xlac, version = p.stdout.split()
  assert where == f"{checkout}/torch_xla/__init__.py"
  assert xlac == importlib.util.find_spec("_XLAC").origin  # the wheel's
  assert version == "2.9.0"
  assert os.path.islink(os.path.join(checkout, "torch_xla/version.py"))


# What `import torch_xla` would load, without the import's 8 s.
FIND = ("import importlib.util as u\n"
        "print(u.find_spec('torch_xla').origin, u.find_spec('_XLAC').origin)")
DEVELOP_VERSION = "2.9.0+gitdevelop"
DEVELOP_TEST = """import unittest

import torch
import torch_xla


class DevelopBuildTest(unittest.TestCase):

  def test_compiled_add(self):
    print(torch_xla.__file__, torch_xla._XLAC.__file__, torch_xla.__version__)
    x = torch.arange(4.0, device=torch_xla.device())
    f = torch.compile(lambda x: x * 2 + 1, backend="openxla")
    self.assertEqual(f(x).cpu().tolist(), [1.0, 3.0, 5.0, 7.0])


if __name__ == "__main__":
  unittest.main()
"""


def develop_install(checkout, venv, over_the_wheel):
  """Installs CHECKOUT as `python setup.py develop` does, into a new venv
  VENV that has the installed packages, torch_xla's wheel too if
  OVER_THE_WHEEL (links to them): the wheel's _XLAC copied to the
  checkout's root (where build_ext --inplace puts it), torch_xla/version.py
  and torch_xla.egg-info written there, and torch_xla.pth in VENV's
  site-packages naming the checkout (after site-packages on sys.path, so the
  wheel, if there, is the installed torch_xla).  Returns VENV's python and
  the checkout's _XLAC."""
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv],
                 check=True)
  site = os.path.dirname(apply_and_test.torch_xla_dir(package="torch"))
  venv_site = sysconfig.get_path("purelib", vars={"base": venv})
  for name in os.listdir(site):
    if over_the_wheel or not re.match(r"torch_xla\b|_XLAC|__editable__", name):
      os.symlink(f"{site}/{name}", f"{venv_site}/{name}")
  with open(f"{venv_site}/torch_xla.pth", "w") as f:
    f.write(checkout + "\n")
  wheel_xlac = importlib.util.find_spec("_XLAC").origin
  xlac = os.path.join(checkout, os.path.basename(wheel_xlac))
  shutil.copyfile(wheel_xlac, xlac)
  with open(os.path.join(checkout, "torch_xla/version.py"), "w") as f:
    f.write(f"__version__ = '{DEVELOP_VERSION}'\n__xla_gitrev__ = ''\n"
            "__torch_gitrev__ = ''\n")
  os.makedirs(os.path.join(checkout, "torch_xla.egg-info"))
  with open(os.path.join(checkout, "torch_xla.egg-info/PKG-INFO"), "w") as f:
    f.write(f"Metadata-Version: 2.1\nName: torch_xla\n"
            f"Version: {DEVELOP_VERSION}\n")
  return f"{venv}/bin/python", xlac


def links_in(directory):
  return [
      os.path.join(d, n)
      for d, dirs, names in os.walk(directory)
      for n in dirs + names
      if os.path.islink(os.path.join(d, n))
  ]


@pytest.mark.parametrize("kind", [
    "develop",
    "develop over the wheel",
    pytest.param("real", marks=needs_xla_checkout),
])
def test_develop_build_runs_with_its_own_xlac(tools, checkout, tmp_path, kind):
  if kind == "real":
    checkout = str(tmp_path / "xla")
    git("clone",
        "-q",
        "--shared",
        "-b",
        "v2.9.0",
        XLA_CHECKOUT,
        checkout,
        cwd=".")
  patch_dir = str(tmp_path / "patches")
  make_series(checkout, patch_dir, [("Add a test and a module", {
      CONFIG: append_line("# patched"),
      "torch_xla/_dynamo/develop_mark.py": "MARK = 1\n",
      "test/dynamo/test_develop_build.py": DEVELOP_TEST,
  })])
  exclude = os.path.join(checkout, ".git/info/exclude")
  with open(exclude) as f:
    excluded = f.read()
  python, xlac = develop_install(checkout, str(tmp_path / "venv"),
                                 kind == "develop over the wheel")
  apply = lambda *args, cwd: tools.apply(
      "--patches", patch_dir, *args, cwd=cwd, env={"PYTHON": python}, check=0)
  try:
    # From inside the checkout, as a maintainer runs it on their build.
    p = apply("--checkout",
              ".",
              "--run",
              "python",
              "test/dynamo/test_develop_build.py",
              cwd=checkout)
    assert "has a build of its own" in p.stderr and "\nOK\n" in p.stderr
    assert p.stdout.split() == [
        f"{checkout}/torch_xla/__init__.py", xlac, DEVELOP_VERSION
    ]
    # From elsewhere, the same; nothing is linked into it or git-excluded.
    p = apply("--checkout", checkout, "--run", "python", "-c", FIND, cwd=".")
    assert p.stdout.split() == [f"{checkout}/torch_xla/__init__.py", xlac]
    assert links_in(os.path.join(checkout, "torch_xla")) == []
    with open(exclude) as f:
      assert f.read() == excluded
    # Unpatched: the base's Python over the checkout's build (links to its
    # _XLAC and version.py), without the series' new module.
    p = apply("--checkout",
              os.path.basename(checkout),
              "--unpatched",
              "--run",
              "python",
              "-c",
              FIND,
              cwd=tmp_path)
    where, its_xlac = p.stdout.split()
    worktree = os.path.dirname(os.path.dirname(where))
    assert worktree.startswith(os.path.join(tools.cache, "unpatched", ""))
    assert os.path.realpath(its_xlac) == xlac
    assert os.path.realpath(f"{worktree}/torch_xla/version.py") == \
        f"{checkout}/torch_xla/version.py"
    assert not os.path.exists(f"{worktree}/torch_xla/_dynamo/develop_mark.py")
  finally:
    os.remove(xlac)  # 300 MB


def test_pytorch_series_runs_over_the_installed_torch(tools, tmp_path):
  torchxla = "torch/_dynamo/backends/torchxla.py"
  site = os.path.dirname(apply_and_test.torch_xla_dir(package="torch"))
  mini = tmp_path / "torch"  # the installed torchxla.py, tagged v2.9.0
  os.makedirs(mini / os.path.dirname(torchxla))
  shutil.copyfile(f"{site}/{torchxla}", mini / torchxla)
  git("init", "-q", cwd=mini)
  git("add", ".", cwd=mini)
  git("commit", "-q", "-m", "v2.9.0's file", cwd=mini)
  git("tag", "v2.9.0", cwd=mini)
  patch_dir = tmp_path / "patches"
  os.makedirs(patch_dir)
  make_series(str(mini), str(patch_dir / "pytorch"), [("Mark torchxla", {
      torchxla: append_line("MARK = 'patched'"),
      "test/dynamo/test_mark.py": "left out\n",
  })])
  (patch_dir / "series").write_text("")  # no torch_xla patch
  code = ("import torch, torch._dynamo.backends.torchxla as t\n"
          "print(torch.__file__, t.__file__, getattr(t, 'MARK', None))")
  p = tools.apply("--patches",
                  patch_dir,
                  "--run",
                  "python",
                  "-c",
                  code,
                  check=0)
  torch_init, where, mark = p.stdout.split()
  overlay = os.path.dirname(os.path.dirname(torch_init))
  assert overlay.startswith(os.path.join(tools.cache, "torch-overlay", ""))
  assert where == f"{overlay}/{torchxla}" and mark == "patched"
  assert os.path.realpath(f"{overlay}/torch/_C") == f"{site}/torch/_C"
  assert not os.path.exists(f"{overlay}/git/test")
  with open(f"{site}/{torchxla}") as f:
    assert "MARK" not in f.read()
  # Built once; --unpatched runs the installed torch.
  p = tools.apply("--patches",
                  patch_dir,
                  "--run",
                  "python",
                  "-c",
                  code,
                  check=0)
  assert "building" not in p.stderr and p.stdout.split()[2] == "patched"
  p = tools.apply("--patches",
                  patch_dir,
                  "--unpatched",
                  "--run",
                  "python",
                  "-c",
                  code,
                  check=0)
  assert p.stdout.split()[1:] == [f"{site}/{torchxla}", "None"]


def test_help_and_bad_options(tools):
  out = tools.apply("--help", check=0).stdout
  for option in ("--checkout", "--patches", "--unpatched", "--only", "--run",
                 "APPLY_AND_TEST_CACHE"):
    assert option in out
  assert "unrecognized" in tools.apply("--build", "source", check=2).stderr
