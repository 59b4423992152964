#!/usr/bin/env python3
"""Regenerates patches/ from the commits v2.9.0..fix-8832 of a pytorch/xla
checkout, then runs tools/check_series_sync.py.

One patch per commit, deterministic (same commits, same bytes): git
format-patch --zero-commit --no-signature -N --abbrev=12, with the user
settings that change diffs overridden.  The commits' author is set to
--author (default: git config user.name and user.email of the checkout) in
copies of the commits, so the branch does not move.  Patch files no longer
in the series are removed; patches/series keeps its leading '#' lines.
"""

import argparse
import itertools
import os
import re
import shutil
import sys
import tempfile

import check_series_sync
from series_lib import (REPO_ROOT, base_commit, die, git, missing_from_base,
                        read_series)

# User settings that would make format-patch write other bytes, overridden.
SETTINGS = [
    "diff.noprefix=false", "diff.mnemonicPrefix=false", "diff.relative=false",
    "diff.algorithm=myers", "diff.renames=true", "diff.orderFile=/dev/null",
    "core.quotePath=true", "format.coverLetter=false",
    "format.forceInBodyFrom=false"
]
FORMAT_PATCH = [arg for s in SETTINGS for arg in ("-c", s)] + [
    "format-patch", "-q", "--zero-commit", "--no-signature", "-N",
    "--abbrev=12", "--no-attach", "--no-thread", "--no-base",
    "--subject-prefix=PATCH"
]


def with_author(checkout, base, tip, author):
  """Copies of the commits BASE..TIP with AUTHOR ("Name <email>") as their
  author (and committer), dates and messages kept; returns the new tip."""
  m = re.fullmatch(r"\s*(.+?)\s*<(.+)>\s*", author)
  if not m:
    die(f"--author {author!r} is not 'Name <email>'")
  name, email = m.groups()
  who = {
      "GIT_AUTHOR_NAME": name,
      "GIT_AUTHOR_EMAIL": email,
      "GIT_COMMITTER_NAME": name,
      "GIT_COMMITTER_EMAIL": email
  }
  parent = base
  for commit in git(checkout, "rev-list", "--reverse",
                    f"{base}..{tip}").split():
    date = git(checkout, "log", "-1", "--format=%ad", "--date=raw", commit)
    message = git(checkout, "log", "-1", "--format=%B", commit)
    parent = git(checkout,
                 "commit-tree",
                 "-p",
                 parent,
                 "-m",
                 message,
                 f"{commit}^{{tree}}",
                 env=dict(who, GIT_AUTHOR_DATE=date))
  return parent


def default_author(checkout):
  name, email = (git(checkout, "config", f"user.{key}", check=False)
                 for key in ("name", "email"))
  if not (name and email):
    die("no --author, and no git config user.name and user.email")
  return f"{name} <{email}>"


def export(checkout, base, tip, patch_dir):
  """Writes the patches of BASE..TIP into PATCH_DIR, removes the ones no
  longer in the series and rewrites its series file."""
  with tempfile.TemporaryDirectory() as tmp:
    git(checkout, *FORMAT_PATCH, "-o", tmp, f"{base}..{tip}")
    names = sorted(os.listdir(tmp))
    for name in os.listdir(patch_dir):
      if name.endswith(".patch") and name not in names:
        os.remove(os.path.join(patch_dir, name))
        print(f"[regen_patches] removed {name}", file=sys.stderr)
    for name in names:
      shutil.copyfile(os.path.join(tmp, name), os.path.join(patch_dir, name))
  series = os.path.join(patch_dir, "series")
  with open(series) as f:  # its leading comment lines stay
    head = list(itertools.takewhile(lambda line: line.startswith("#"), f))
  with open(series, "w") as f:
    f.write("".join(head) + "".join(n + "\n" for n in names))
  print(f"[regen_patches] wrote {len(names)} patch(es) and series",
        file=sys.stderr)


def main(argv=None):
  ap = argparse.ArgumentParser(prog="tools/regen_patches.sh",
                               description=__doc__,
                               formatter_class=argparse.RawTextHelpFormatter)
  ap.add_argument("--checkout", required=True, help="the pytorch/xla checkout")
  ap.add_argument("--branch", default="fix-8832")
  ap.add_argument("--author", help='"Name <email>" (default: git config)')
  ap.add_argument("--patches", default=os.path.join(REPO_ROOT, "patches"))
  ap.add_argument("--tests-root",
                  default=REPO_ROOT,
                  help="directory whose test/ the series must match")
  a = ap.parse_args(argv)
  checkout, patch_dir = os.path.abspath(a.checkout), os.path.abspath(a.patches)
  base = base_commit(checkout)
  tip = git(checkout, "rev-parse", "--verify", f"refs/heads/{a.branch}")
  if git(checkout, "merge-base", "--is-ancestor", base, tip,
         check=False) is None:
    die(f"{a.branch} does not descend from the base; rebase it onto it")
  if git(checkout, "rev-list", "--merges", f"{base}..{tip}"):
    die(f"{a.branch} has merge commits; make its history linear")
  # A checkout built from the wheel lacks e.g. test/run_tests.sh: the
  # series' changes to it would be lost.
  lost = missing_from_base(checkout, base, read_series(patch_dir))
  if lost:
    die(f"{checkout} lacks {', '.join(lost)}, which the series changes; "
        "regenerate from a real pytorch/xla checkout")
  author = a.author or default_author(checkout)
  export(checkout, base, with_author(checkout, base, tip, author), patch_dir)
  return check_series_sync.main(
      ["--patches", patch_dir, "--tests-root", a.tests_root])


if __name__ == "__main__":
  sys.exit(main())
