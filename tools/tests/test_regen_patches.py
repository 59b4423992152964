"""tools/regen_patches.sh, round trip with apply_and_test.sh."""

import os

from conftest import BRIDGE, CONFIG, git

AUTHOR = "A U Thor <author@example.com>"


def commit(checkout, path, subject):
  with open(os.path.join(checkout, path), "a") as f:
    f.write(f"# {subject}\n")
  git("commit", "-q", "-am", subject, cwd=checkout)


def read(patch_dir):
  return {n: (patch_dir / n).read_bytes() for n in sorted(os.listdir(patch_dir))}


def test_regen_round_trip(tools, checkout, tmp_path):
  patches, root = tmp_path / "patches", tmp_path / "root"
  patches.mkdir()
  (root / "test").mkdir(parents=True)
  (patches / "series").write_text("# Leading comment\n0009-stale.patch\n")
  (patches / "0009-stale.patch").write_text("old\n")
  git("checkout", "-q", "-b", "fix-8832", "v2.9.0", cwd=checkout)
  commit(checkout, CONFIG, "[dynamo] First change")
  commit(checkout, BRIDGE, "Second change")
  args = ("--patches", str(patches), "--tests-root", str(root))
  p = tools.run("regen_patches.sh",
                "--checkout",
                checkout,
                "--author",
                AUTHOR,
                *args,
                check=0)
  assert "removed 0009-stale.patch" in p.stderr
  first = "0001-dynamo-First-change.patch"
  written = read(patches)
  assert list(written) == [first, "0002-Second-change.patch", "series"]
  assert written["series"] == \
      f"# Leading comment\n{first}\n0002-Second-change.patch\n".encode()
  text = written[first].decode()
  assert text.startswith("From 0000000000000000000000000000000000000000 ")
  assert f"From: {AUTHOR}\n" in text
  assert "Subject: [PATCH] [dynamo] First change\n" in text
  assert "\n-- \n" not in text  # no signature (git's version)
  tools.run("regen_patches.sh",
            "--checkout",
            checkout,
            "--author",
            AUTHOR,
            *args,
            check=0)
  assert read(patches) == written

  # The series applied elsewhere gives the same tree back, and regenerated
  # there (author from git config) the same bytes.
  other = str(tmp_path / "other")
  git("clone", "-q", "-b", "wheel", checkout, other, cwd=tmp_path)
  git("config", "user.name", "A U Thor", cwd=other)
  git("config", "user.email", "author@example.com", cwd=other)
  tools.run("apply_and_test.sh",
            "--checkout",
            other,
            "--patches",
            str(patches),
            "--run",
            "true",
            check=0)
  assert git("rev-parse", "fix-8832^{tree}", cwd=other) == \
      git("rev-parse", "fix-8832^{tree}", cwd=checkout)
  tools.run("regen_patches.sh", "--checkout", other, *args, check=0)
  assert read(patches) == written


def test_regen_refuses_a_checkout_lacking_files_the_series_changes(
    tools, checkout, tmp_path):
  patches = tmp_path / "patches"
  patches.mkdir()
  (patches / "0001-x.patch").write_text(
      "Subject: [PATCH] x\n\n---\n"
      "diff --git a/test/run_tests.sh b/test/run_tests.sh\n"
      "--- a/test/run_tests.sh\n+++ b/test/run_tests.sh\n@@ -1 +1,2 @@\n"
      " a\n+b\n")
  (patches / "series").write_text("0001-x.patch\n")
  git("checkout", "-q", "-b", "fix-8832", "v2.9.0", cwd=checkout)
  p = tools.run("regen_patches.sh",
                "--checkout",
                checkout,
                "--patches",
                str(patches),
                check=1)
  assert "lacks test/run_tests.sh" in p.stderr
  assert (patches / "0001-x.patch").exists()
