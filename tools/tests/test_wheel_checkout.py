"""The checkout that apply_and_test.sh builds from the installed wheel."""

import os

import pytest

import series_lib
from conftest import XLA_SRC, git


def tree(repo, rev="v2.9.0", path="torch_xla"):
  """{path: (mode, blob)} of the files under PATH at REV."""
  out = {}
  for line in git("ls-tree", "-r", rev, "--", path, cwd=repo).splitlines():
    meta, name = line.split("\t", 1)
    mode, _, blob = meta.split()
    out[name] = (mode, blob)
  return out


def test_exclusions_are_wheel_files_missing_from_git(wheel_pkg_dir):
  for rel in series_lib.WHEEL_GENERATED_FILES:
    assert os.path.isfile(os.path.join(wheel_pkg_dir,
                                       os.path.relpath(rel, "torch_xla")))


def test_checkout_equals_installed_wheel(wheel_checkout, wheel_pkg_dir):
  files = tree(wheel_checkout)
  # Every *.py of the wheel, minus the documented generated files.
  wheel_py = set()
  for root, dirs, names in os.walk(wheel_pkg_dir):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    for n in names:
      if n.endswith(".py"):
        wheel_py.add("torch_xla/" +
                     os.path.relpath(os.path.join(root, n), wheel_pkg_dir))
  assert set(files) == wheel_py - set(series_lib.WHEEL_GENERATED_FILES)
  for path in files:
    committed = git("show", f"v2.9.0:{path}", cwd=wheel_checkout)
    with open(os.path.join(wheel_pkg_dir, os.path.relpath(path, "torch_xla")),
              encoding="utf-8") as f:
      assert committed == f.read(), path
  # Only torch_xla/ is in the commit.
  assert set(tree(wheel_checkout, path=".")) == set(files)


@pytest.mark.skipif(not os.path.isdir(os.path.join(XLA_SRC, ".git")),
                    reason=f"no pytorch/xla mirror at {XLA_SRC} (set XLA_SRC)")
def test_checkout_equals_tag_python_files(wheel_checkout):
  """Same paths, modes and blobs as the tag's torch_xla/**/*.py."""
  tag = {p: v for p, v in tree(XLA_SRC).items() if p.endswith(".py")}
  assert git("rev-parse", "v2.9.0^{commit}",
             cwd=XLA_SRC).strip() == series_lib.BASE_COMMIT
  assert tree(wheel_checkout) == tag


def test_build_is_reproducible(wheel_checkout, wheel_pkg_dir, tmp_path):
  again = series_lib.build_wheel_checkout(str(tmp_path / "again"),
                                          wheel_pkg_dir)
  assert again == git("rev-parse", "v2.9.0^{commit}",
                      cwd=wheel_checkout).strip()
