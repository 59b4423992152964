"""The checkout apply_and_test.sh builds from the installed wheel."""

import os

import apply_and_test
import series_lib
from conftest import XLA_CHECKOUT, git, needs_xla_checkout


def python_files(repo):
  """{path: (mode, blob)} of torch_xla/**/*.py at v2.9.0 in REPO."""
  out = {}
  for line in git("ls-tree", "-r", "v2.9.0", "--", "torch_xla",
                  cwd=repo).splitlines():
    meta, path = line.split("\t")
    if path.endswith(".py"):
      out[path] = (meta.split()[0], meta.split()[2])
  return out


def test_checkout_holds_the_wheels_python_files(wheel_checkout):
  wheel = apply_and_test.torch_xla_dir()
  files = git("ls-tree", "-r", "--name-only", "v2.9.0",
              cwd=wheel_checkout).split()
  expected = [
      os.path.relpath(os.path.join(d, n), os.path.dirname(wheel))
      for d, _, names in os.walk(wheel)
      for n in names
      if n.endswith(".py")
  ]
  assert sorted(files) == sorted(set(expected) - {"torch_xla/version.py"})
  for path in files:
    with open(os.path.join(os.path.dirname(wheel), path)) as f:
      assert git("show", f"v2.9.0:{path}", cwd=wheel_checkout) == f.read()


def test_build_is_reproducible(wheel_checkout, tmp_path):
  apply_and_test.build_wheel_checkout(str(tmp_path / "again"))
  assert git("rev-parse", "v2.9.0", cwd=tmp_path / "again") == \
      git("rev-parse", "v2.9.0", cwd=wheel_checkout)


@needs_xla_checkout
def test_checkout_equals_the_tags_python_files(wheel_checkout):
  assert git("rev-parse", "v2.9.0^{commit}", cwd=XLA_CHECKOUT).strip() == \
      series_lib.BASE_COMMIT
  assert python_files(wheel_checkout) == python_files(XLA_CHECKOUT)
