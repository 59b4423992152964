"""tools/check_series_sync.py, on synthetic series in temporary directories,
and on the real patches/ and test/."""

import os

import check_series_sync
from conftest import git

DYNAMO = "test/dynamo/test_synthetic.py"
SPMD = "test/spmd/test_synthetic_spmd.py"
REGISTER = {
    DYNAMO: 'run_test "$_TEST_DIR/dynamo/test_synthetic.py"\n',
    SPMD: 'run_test_multi_devices "$_TEST_DIR/spmd/test_synthetic_spmd.py"\n',
}


def synthetic(tmp_path, registered=(DYNAMO, SPMD)):
  """A series that adds DYNAMO and SPMD (registering those in REGISTERED),
  made in a stand-in upstream repository; and a root whose test/ matches.
  Returns check_series_sync's arguments for them."""
  up, root = tmp_path / "upstream", tmp_path / "root"
  for d in (up / "test", root / "test/dynamo", root / "test/spmd"):
    d.mkdir(parents=True)
  (up / "test/run_tests.sh").write_text("run_test old\n")
  git("init", "-q", cwd=up)
  git("add", "-A", cwd=up)
  git("commit", "-q", "-m", "base", cwd=up)
  for path in (DYNAMO, SPMD):
    (up / path).parent.mkdir(exist_ok=True)
    (up / path).write_text(f"# {path}\n")
    (root / path).write_text(f"# {path}\n")
  with open(up / "test/run_tests.sh", "a") as f:
    f.write("".join(REGISTER[p] for p in registered))
  git("add", "-A", cwd=up)
  git("commit", "-q", "-m", "Add tests", cwd=up)
  git("format-patch", "-q", "-o", tmp_path / "patches", "HEAD~1", cwd=up)
  (tmp_path / "patches/series").write_text("# comment\n0001-Add-tests.patch\n")
  return ["--patches", str(tmp_path / "patches"), "--tests-root", str(root)]


def check(args, capsys):
  status = check_series_sync.main(args)
  return status, capsys.readouterr().err


def test_in_sync(tmp_path, capsys):
  assert check(synthetic(tmp_path), capsys) == (0, "[check_series_sync] OK\n")


def test_test_dir_differs(tmp_path, capsys):
  args = synthetic(tmp_path)
  root = tmp_path / "root"
  (root / DYNAMO).write_text("# changed\n")
  os.remove(root / SPMD)
  (root / "test/dynamo/test_stray.py").write_text("")
  status, err = check(args, capsys)
  assert status == 1
  assert f"{root}/{DYNAMO} differs from the series' copy" in err
  assert f"the series adds {SPMD}, which {root}/test lacks" in err
  assert f"{root}/test/dynamo/test_stray.py is not added by the series" in err


def test_unregistered_test(tmp_path, capsys):
  status, err = check(synthetic(tmp_path, registered=[SPMD]), capsys)
  assert status == 1
  assert err.count("does not register") == 1
  assert f"does not register {DYNAMO} in test/run_tests.sh" in err


def test_series_listing(tmp_path, capsys):
  args = synthetic(tmp_path)
  patches = tmp_path / "patches"
  (patches / "0002-unlisted.patch").write_text("")
  with open(patches / "series", "a") as f:
    f.write("0003-missing.patch\n")
  status, err = check(args, capsys)
  assert status == 1
  assert "0002-unlisted.patch is not listed in series" in err
  assert "0003-missing.patch, which does not exist" in err


def test_real_repo_patches_match_test_dir(capsys):
  """The real patches/ against the real test/: fails while the series lacks
  a test file that test/ has (regenerate the series)."""
  status, err = check([], capsys)
  assert status == 0, err
