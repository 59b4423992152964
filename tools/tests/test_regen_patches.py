"""tools/regen_patches.sh, round trip with apply_and_test.sh."""

import os

from conftest import append_line, git

CONFIG = "torch_xla/_dynamo/config.py"
BRIDGE = "torch_xla/_dynamo/dynamo_bridge.py"


def commit(checkout, path, line, subject):
  with open(os.path.join(checkout, path), "a") as f:
    f.write(line + "\n")
  git("commit", "-q", "-am", subject, cwd=checkout)


def test_regen_round_trip(tools, checkout, tmp_path):
  patches = tmp_path / "patches"
  patches.mkdir()
  (patches / "series").write_text("# Leading comment\n# kept as is\n\n"
                                  "0009-stale.patch\n")
  (patches / "0009-stale.patch").write_text("old\n")
  root = tmp_path / "root"
  (root / "test").mkdir(parents=True)

  git("checkout", "-q", "-b", "fix-8832", "v2.9.0", cwd=checkout)
  commit(checkout, CONFIG, "# one", "[dynamo] First change")
  commit(checkout, BRIDGE, "# two", "Second change")
  args = ("--checkout", checkout, "--patches", str(patches), "--tests-root",
          str(root))
  p = tools.run("regen_patches.sh", *args, check=0)
  assert "removed stale 0009-stale.patch" in p.stderr
  names = sorted(os.listdir(patches))
  assert names == [
      "0001-dynamo-First-change.patch", "0002-Second-change.patch", "series"
  ]
  assert (patches / "series").read_text() == (
      "# Leading comment\n# kept as is\n"
      "0001-dynamo-First-change.patch\n0002-Second-change.patch\n")
  first = (patches / "0001-dynamo-First-change.patch").read_text()
  assert first.startswith("From 0000000000000000000000000000000000000000 ")
  assert "Subject: [PATCH] [dynamo] First change" in first
  assert not first.rstrip().endswith(".git")  # no "-- \n2.x.y" signature
  snapshot = {n: (patches / n).read_bytes() for n in names}

  # Deterministic: a second run changes nothing.
  p = tools.run("regen_patches.sh", *args, check=0)
  assert "series unchanged" in p.stderr
  assert {n: (patches / n).read_bytes() for n in names} == snapshot

  # Applying the regenerated series gives the branch's tree back.
  other = tmp_path / "other"
  git("clone", "-q", "-b", "wheel", checkout, str(other), cwd=str(tmp_path))
  tools.run("apply_and_test.sh", "--checkout", str(other), "--patches",
            str(patches), "--run", "true", check=0)
  assert git("rev-parse", "fix-8832^{tree}", cwd=str(other)) == \
      git("rev-parse", "fix-8832^{tree}", cwd=checkout)
  # ... and regenerating from there gives the same bytes (subjects such as
  # "[dynamo] ..." survive git am).
  again = tmp_path / "again"
  again.mkdir()
  (again / "series").write_text("# Leading comment\n# kept as is\n")
  tools.run("regen_patches.sh", "--checkout", str(other), "--patches",
            str(again), "--tests-root", str(root), check=0)
  assert {n: (again / n).read_bytes() for n in names} == snapshot

  # Dropping a commit removes its patch.
  git("reset", "-q", "--hard", "HEAD~1", cwd=checkout)
  p = tools.run("regen_patches.sh", *args, check=0)
  assert "removed stale 0002-Second-change.patch" in p.stderr
  assert (patches / "series").read_text().endswith(
      "# kept as is\n0001-dynamo-First-change.patch\n")


def test_regen_refuses_wheel_checkout_when_series_touches_missing_files(
    tools, checkout, tmp_path):
  patches = tmp_path / "patches"
  patches.mkdir()
  (patches / "0001-x.patch").write_text(
      "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
      "From: A <a@b>\nSubject: [PATCH] x\n\n---\n"
      "diff --git a/test/run_tests.sh b/test/run_tests.sh\n"
      "index 1111111..2222222 100755\n--- a/test/run_tests.sh\n"
      "+++ b/test/run_tests.sh\n@@ -1,1 +1,2 @@\n a\n+b\n")
  (patches / "series").write_text("0001-x.patch\n")
  git("checkout", "-q", "-b", "fix-8832", "v2.9.0", cwd=checkout)
  p = tools.run("regen_patches.sh", "--checkout", checkout, "--patches",
                str(patches), check=1)
  assert "lacks test/run_tests.sh" in p.stderr
  assert (patches / "0001-x.patch").exists()  # nothing was rewritten
