"""Applies patches/series to a pytorch/xla checkout and runs its tests.

Run it as tools/apply_and_test.sh, which picks the Python (tools/env.sh).

Apply: `git am --keep-non-patch` of the series on a branch fix-8832 made from
v2.9.0, in a scratch worktree, so a patch that fails is named and the
checkout is left as it was.  A second run says "already applied"; a checkout
with uncommitted changes is refused.  Without --checkout, the checkout is
<cache>/wheel-checkout, built once from the installed torch_xla wheel: a git
repository tagged v2.9.0 whose torch_xla/**/*.py equal the tag's, with no C++
sources and no tests; the series' changes to files it lacks (test/run_tests.sh)
are left out.  Either way the checkout's Python sources run over the wheel's
native _XLAC: the installed torch_xla files that git does
not track (version.py) are symlinked into the checkout and git-excluded, and
PYTHONPATH=<checkout> makes `import torch_xla` load the checkout.  But a
checkout with a build of its own, as `python setup.py develop` or `pip install
-e .` leaves it (an _XLAC*.so built in place, torch_xla/version.py), runs as
it is, over its own _XLAC, with nothing linked into it; the unpatched
worktree links to what it built.  The installed torch_xla is looked up from
no directory in particular, so the tool runs from anywhere, the checkout
included (--checkout .).

Test: each test/**/test_*.py of this repository (the series' own; from the
checkout, or from this repository with --unpatched) and, on a real checkout,
upstream's regression files (REGRESSION_FILES), as test/run_tests.sh runs
them: from the checkout root, PJRT_DEVICE=CPU CPU_NUM_DEVICES=1 (4 for the
series' test/spmd/ files, as run_test_multi_devices),
PYTHONPATH=<checkout>:<checkout>/test, under pytest, whose JUnit XML
(<cache>/logs/) gives each test's outcome.
On a real checkout, the upstream files with failures are rerun without the
series (a worktree at v2.9.0, <cache>/unpatched/): a test failing there too
is pre-existing, listed but not counted.  stdout gets a table per file and a
last line "N passed, N failed"; the exit status is 0 if no counted test
failed.  Our messages and the tests' output go to stderr.

PyTorch side: if the patch directory has pytorch/series (a series against
pytorch/pytorch v2.9.0), its changes to torch/ run over the installed torch
too.  <cache>/torch-overlay/<hash of the series>/, built once per series,
holds a git repository of the installed torch's files that the series
changes, tagged v2.9.0, with the series applied by `git am`, and torch/, a
tree of symlinks to the installed package's entries in which those files
link into the repository instead; it goes first on PYTHONPATH (tests and
--run), so `import torch` loads the installed torch but for them.

Environment: PYTHON (see tools/env.sh); APPLY_AND_TEST_CACHE, the cache
directory (default <repo>/.cache).
"""

import argparse
import fcntl
import glob
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from series_lib import (BASE_TAG, REPO_ROOT, RUN_TESTS, base_commit, die,
                        file_diffs, git, missing_from_base, read_series)

BRANCH = "fix-8832"
# The PyTorch series: <patch dir>/pytorch/series.
TORCH_SERIES = "pytorch"
# The CPU dynamo tests of upstream's test/run_tests.sh.
REGRESSION_FILES = [
    f"test/dynamo/{name}.py"
    for name in ("test_dynamo_aliasing", "test_bridge",
                 "test_graph_input_matcher", "test_num_output",
                 "test_dynamo_config", "test_none_remover",
                 "test_dynamo_integrations_util", "test_dynamo",
                 "test_dynamo_dynamic_shape")
] + ["test/spmd/test_dynamo_spmd.py"]
# git am's committer.  Fixed, with --committer-date-is-author-date, so the
# same series gives the same commits; it also tells our commits from yours.
COMMITTER = "apply_and_test.sh"
AM_ENV = {
    "GIT_COMMITTER_NAME": COMMITTER,
    "GIT_COMMITTER_EMAIL": "apply_and_test@localhost"
}
# The wheel checkout's commit: fixed identity and date (the tag's), so the
# same wheel gives the same commit.
WHEEL_ENV = {
    f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
    for what, value in (("NAME", "torch_xla wheel sources"),
                        ("EMAIL", "wheel-checkout@localhost"),
                        ("DATE", "2025-11-17T13:23:46-0800"))
}
COMMIT = ("-c", "commit.gpgSign=false", "commit", "-q", "--no-verify",
          "--allow-empty")
# 100755 in the tag; the wheel does not keep modes.
TAG_EXECUTABLES = ("torch_xla/debug/frame_parser_util.py",
                   "torch_xla/utils/utils.py")


def log(msg):
  print(f"[apply_and_test] {msg}", file=sys.stderr, flush=True)


def torch_xla_dir(pythonpath="", package="torch_xla"):
  """The directory `import torch_xla` (or PACKAGE) loads with PYTHONPATH
  (found without importing it); with none, the installed one's (the wheel,
  or the checkout installed in develop mode).  Not the current directory's:
  run from a checkout, `python -c` would find the checkout's torch_xla/."""
  code = ("import importlib.util as u, sys\n"
          "sys.path[:] = filter(None, sys.path)\n"
          f"s = u.find_spec('{package}'); print(s.origin if s else '')")
  origin = subprocess.run([sys.executable, "-c", code],
                          env=dict(os.environ, PYTHONPATH=pythonpath),
                          capture_output=True,
                          text=True).stdout.strip()
  if not origin:
    die(f"{sys.executable} cannot import {package} (PYTHONPATH={pythonpath})")
  return os.path.dirname(origin)


def build_wheel_checkout(dest):
  """A git repository of the installed wheel's torch_xla/**/*.py (equal to
  the v2.9.0 tag's, but for version.py, which setup.py writes and git does
  not track), committed and tagged v2.9.0."""
  tmp = dest + ".tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  shutil.copytree(torch_xla_dir(),
                  os.path.join(tmp, "torch_xla"),
                  ignore=lambda d, names: [
                      n for n in names if n == "__pycache__" or not (n.endswith(
                          ".py") or os.path.isdir(f"{d}/{n}"))
                  ])
  os.remove(os.path.join(tmp, "torch_xla/version.py"))
  for path in TAG_EXECUTABLES:
    os.chmod(os.path.join(tmp, path), 0o755)
  git(tmp, "-c", "init.defaultBranch=wheel", "init", "-q")
  commit_tagged(
      tmp, "torch_xla 2.9.0 Python sources, from the installed wheel\n\n"
      "Not upstream's commit: only torch_xla/**/*.py, as the wheel ships "
      "them.\nBuilt by tools/apply_and_test.sh.")
  os.rename(tmp, dest)


def commit_tagged(repo, message):
  """Commits all of REPO (WHEEL_ENV's identity and date) and tags it."""
  git(repo, "add", "-A")
  git(repo, *COMMIT, "-m", message, env=WHEEL_ENV)
  git(repo, "tag", BASE_TAG)


def link_tree(src, dst, files, patched):
  """Makes DST a directory of symlinks to SRC's entries, but for FILES (paths
  relative to SRC), which link to PATCHED/<path>, and the directories that
  hold them, made the same way."""
  os.makedirs(dst)
  names = set(os.listdir(src) if os.path.isdir(src) else [])
  for name in sorted(names | {f.split("/")[0] for f in files}):
    inner = [f.split("/", 1)[1] for f in files if f.startswith(name + "/")]
    if inner:
      link_tree(f"{src}/{name}", f"{dst}/{name}", inner, f"{patched}/{name}")
    elif name != "__pycache__":
      os.symlink(f"{patched if name in files else src}/{name}", f"{dst}/{name}")


def torch_overlay(patch_dir, cache):
  """The directory to put first on PYTHONPATH to run PATCH_DIR's PyTorch
  series over the installed torch (see the module's doc), built if needed;
  None if PATCH_DIR has none."""
  if not os.path.exists(f"{patch_dir}/{TORCH_SERIES}/series"):
    return None
  patches = read_series(f"{patch_dir}/{TORCH_SERIES}")
  installed = torch_xla_dir(package="torch")
  key = hashlib.sha1(installed.encode())
  for patch in patches:
    with open(patch, "rb") as f:
      key.update(f.read())
  dest = f"{cache}/torch-overlay/{key.hexdigest()[:12]}"
  files = sorted({
      path for patch in patches for path, _ in file_diffs(patch)
      if path.startswith("torch/")
  })
  if not os.path.isdir(dest):
    log(f"building {dest}: the installed torch's {' '.join(files)} with "
        f"{len(patches)} PyTorch patch(es) (once)")
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(f"{tmp}/git")
    for path in files:  # but those the series creates
      if os.path.exists(f"{installed}/../{path}"):
        os.makedirs(os.path.dirname(f"{tmp}/git/{path}"), exist_ok=True)
        shutil.copyfile(f"{installed}/../{path}", f"{tmp}/git/{path}")
    git(f"{tmp}/git", "init", "-q")
    commit_tagged(
        f"{tmp}/git",
        "torch's files that the PyTorch series changes, as installed")
    am = subprocess.run([
        "git", "-c", "core.hooksPath=/dev/null", "am", "--keep-non-patch",
        "--include=torch/*", *patches
    ],
                        cwd=f"{tmp}/git",
                        env=dict(os.environ, **AM_ENV),
                        capture_output=True,
                        text=True)
    if am.returncode:
      sys.stderr.write(am.stdout + am.stderr)
      die(f"the PyTorch series ({patch_dir}/{TORCH_SERIES}) does not apply to "
          f"the installed torch ({installed})")
    link_tree(installed, f"{tmp}/torch",
              [f.removeprefix("torch/") for f in files], f"{dest}/git/torch")
    os.rename(tmp, dest)
  if torch_xla_dir(dest, "torch") != f"{dest}/torch":
    die(f"import torch loads {torch_xla_dir(dest, 'torch')}, not {dest}/torch")
  log(f"torch: the installed one, but for the PyTorch series' {' '.join(files)}"
      f" ({dest})")
  return dest


def apply_series(checkout, base, patches, cache):
  """Puts CHECKOUT on branch fix-8832 = BASE + the series."""
  if git(checkout, "status", "--porcelain", "--untracked-files=no"):
    die(f"{checkout} has uncommitted changes; commit or stash them and rerun")
  excluded = missing_from_base(checkout, base, patches)
  for path in excluded:
    log(f"not applying the series' changes to {path}, which the checkout "
        "lacks (a real checkout has it)")
  with tempfile.TemporaryDirectory(dir=cache) as tmp:
    git(checkout, "worktree", "add", "-q", "--detach", tmp + "/am", base)
    try:
      am = subprocess.run([
          "git", "-c", "core.hooksPath=/dev/null", "am", "--keep-non-patch",
          "--committer-date-is-author-date",
          *[f"--exclude={p}" for p in excluded], *patches
      ],
                          cwd=tmp + "/am",
                          env=dict(os.environ, **AM_ENV),
                          capture_output=True,
                          text=True) if patches else None
      if am and am.returncode:
        output = am.stdout + am.stderr
        sys.stderr.write(re.sub(r"^hint:.*\n", "", output, flags=re.M))
        n = re.search(r"^Patch failed at (\d+)", output, re.M)
        name = os.path.basename(patches[int(n.group(1)) - 1]) if n else "?"
        die(f"patch {name} does not apply; {checkout} was not changed")
      new = git(tmp + "/am", "rev-parse", "HEAD")
    finally:
      git(checkout, "worktree", "remove", "--force", tmp + "/am", check=False)
  ref = f"refs/heads/{BRANCH}"
  old = git(checkout, "rev-parse", "-q", "--verify", ref, check=False)
  if old and git(checkout, "rev-parse", f"{old}^{{tree}}") == git(
      checkout, "rev-parse", f"{new}^{{tree}}"):
    log(f"already applied: {BRANCH} holds the series")
    new = old
  elif old:
    theirs = [
        line.split("\t")[1]
        for line in git(checkout, "log", "--format=%cn\t%h %s",
                        f"{base}..{old}").splitlines()
        if line.split("\t")[0] != COMMITTER
    ]
    if theirs:
      die(f"{BRANCH} has commits not made by this tool ({'; '.join(theirs)}) "
          f"and differs from the series; export them with "
          f"tools/regen_patches.sh, or rename the branch")
    log(f"moving {BRANCH} from an older series")
  git(checkout, "checkout", "-q", "-B", BRANCH, new)
  log(f"{BRANCH} = {BASE_TAG} + {len(patches)} patch(es) in {checkout}")


def base_worktree(checkout, base, cache):
  """A worktree of CHECKOUT at BASE, under <cache>/unpatched/."""
  name = hashlib.sha1(checkout.encode()).hexdigest()[:8]
  wt = os.path.join(cache, "unpatched", f"{os.path.basename(checkout)}-{name}")
  if os.path.isdir(wt) and git(wt, "rev-parse", "HEAD", check=False) == base \
      and git(wt, "status", "--porcelain", "--untracked-files=no") == "":
    return wt
  git(checkout, "worktree", "remove", "--force", wt, check=False)
  shutil.rmtree(wt, ignore_errors=True)
  git(checkout, "worktree", "prune")
  git(checkout, "worktree", "add", "-q", "--detach", wt, base)
  return wt


def own_build(checkout):
  """CHECKOUT's own _XLAC*.so, if it is a build of its own, as a checkout
  installed in develop mode (`python setup.py develop`, `pip install -e .`)
  is: _XLAC built in place, at its root or in torch_xla/, and
  torch_xla/version.py written, so that `import torch_xla` works from the
  checkout itself.  [] for a plain checkout, even with our links."""
  version = f"{checkout}/torch_xla/version.py"
  if not os.path.isfile(version) or os.path.islink(version):
    return []
  return [
      so for so in glob.glob(f"{checkout}/_XLAC*.so") +
      glob.glob(f"{checkout}/torch_xla/_XLAC*.so") if not os.path.islink(so)
  ]


def link_prebuilt(root, base, checkout):
  """Makes PYTHONPATH=ROOT (CHECKOUT, or a worktree of it) import ROOT's
  torch_xla over a native _XLAC.  A CHECKOUT with a build of its own
  (own_build()) is used as it is, and a worktree gets links to what it built:
  its files in torch_xla/ that git does not track, and its _XLAC.  Else ROOT
  gets links to the installed torch_xla's files that git does not track
  there (version.py; the wheel's _XLAC loads from site-packages).  The links
  are listed in info/exclude, so the checkout stays clean."""
  built = own_build(checkout)
  if built and root == checkout:
    log(f"{checkout} has a build of its own (installed in develop mode): "
        f"testing it as it is, with {' '.join(built)}")
    return
  pkg = f"{checkout}/torch_xla" if built else os.path.realpath(torch_xla_dir())
  if pkg == f"{root}/torch_xla":
    die(f"the installed torch_xla is {pkg}, but {root} has no _XLAC*.so and "
        "torch_xla/version.py of its own (links are not): build it in place "
        "(python setup.py develop) or install the wheel")
  tracked = set(
      git(root, "ls-tree", "-r", "--name-only", base, "torch_xla").split("\n") +
      git(root, "ls-files", "torch_xla").split("\n") +
      (git(checkout, "ls-files", "torch_xla").split("\n") if built else []))
  links = {
      os.path.basename(so): so
      for so in built
      if os.path.dirname(so) == checkout
  }
  for d, dirs, names in os.walk(pkg):
    dirs[:] = [x for x in dirs if x != "__pycache__"]
    for n in names:
      links[os.path.relpath(f"{d}/{n}", os.path.dirname(pkg))] = f"{d}/{n}"
  exclude = os.path.join(root,
                         git(root, "rev-parse", "--git-path", "info/exclude"))
  os.makedirs(os.path.dirname(exclude), exist_ok=True)
  with open(exclude, "a+") as f:
    f.seek(0)
    excluded = f.read().splitlines()
    for path, src in sorted(links.items()):
      if path in tracked:
        continue
      if os.path.islink(f"{root}/{path}"):
        os.unlink(f"{root}/{path}")
      if not os.path.exists(f"{root}/{path}"):
        os.makedirs(os.path.dirname(f"{root}/{path}"), exist_ok=True)
        os.symlink(src, f"{root}/{path}")
      if "/" + path not in excluded:
        f.write(f"/{path}\n")
  if torch_xla_dir(root) != f"{root}/torch_xla":
    die(f"import torch_xla loads {torch_xla_dir(root)}, not {root}/torch_xla")


def outcomes(xml):
  """{test id: passed, failed or skipped} from pytest's JUnit XML; None if
  pytest wrote none (it crashed)."""
  if not os.path.exists(xml):
    return None
  out = {}
  for case in ET.parse(xml).iter("testcase"):
    tags = {child.tag for child in case}
    outcome = "skipped" if "skipped" in tags else "passed"
    outcome = "failed" if tags & {"failure", "error"} else outcome
    out[f"{case.get('classname')}::{case.get('name')}"] = outcome
  return out


def run_file(root, rel, path, logs, overlay=None):
  """Runs one test file as run_tests.sh does, but under pytest (see
  pytest_as_script.py), whose report goes to LOGS, with OVERLAY (the PyTorch
  series' torch) first on PYTHONPATH; returns (exit status, outcomes)."""
  xml = f"{logs}/{rel.replace('/', '_')}.xml"
  # run_tests.sh runs the series' test/spmd files with run_test_multi_devices
  # and upstream's test_dynamo_spmd.py with run_test.
  devices = "4" if rel.startswith(
      "test/spmd/") and rel not in REGRESSION_FILES else "1"
  env = dict(os.environ,
             PJRT_DEVICE="CPU",
             CPU_NUM_DEVICES=devices,
             PYTHONPATH=":".join(filter(None, [overlay, root, f"{root}/test"])))
  # -c /dev/null: no pytest settings from directories above the checkout.
  pytest = [
      sys.executable, f"{REPO_ROOT}/tools/pytest_as_script.py", "-v", "-p",
      "no:cacheprovider", "-c", os.devnull, f"--rootdir={root}",
      f"--junitxml={xml}", path
  ]
  if os.path.exists(xml):
    os.remove(xml)
  log(f"=== {rel} (CPU_NUM_DEVICES={devices})")
  status = subprocess.run(pytest, cwd=root, env=env,
                          stdout=sys.stderr).returncode
  return status, outcomes(xml)


def file_row(rel, status, got, before):
  """The table row of one test file and the names of its pre-existing
  failures: those that also fail in BEFORE (its outcomes without the
  series, or {})."""
  got_ = got or {}
  failed = [t for t, o in got_.items() if o == "failed"]
  old = [t for t in failed if before.get(t) == "failed"]
  counted = len(failed) - len(old)
  result = "FAILED" if counted else "ok"
  if got is None or (status and not failed):  # a crash, or no test ran
    counted += 1
    how = f"killed by {signal.Signals(-status).name}" if status < 0 \
        else f"exit {status}"
    result = f"FAILED ({how}{', no report' if got is None else ''})"
  passed = list(got_.values()).count("passed")
  skipped = list(got_.values()).count("skipped")
  tests = "?" if got is None else str(len(got))
  numbers = [str(n) for n in (passed, counted, len(old), skipped)]
  return [rel, tests, *numbers, result], old


def summarize(results, baselines):
  """Prints the table of RESULTS [(file, exit status, outcomes)], the notes
  on the files rerun without the series (BASELINES {file: outcomes, None if
  that run wrote no report}) and the totals; returns the counted failures."""
  header = [
      "file", "tests", "passed", "failed", "pre-existing", "skipped", "result"
  ]
  rows, notes = [header], []
  for rel, status, got in results:
    row, old = file_row(rel, status, got, baselines.get(rel) or {})
    rows.append(row)
    notes += [f"pre-existing: {rel}: {t}" for t in old]
    if rel in baselines and baselines[rel] is None:
      notes.append(f"{rel}: no report without the series; all counted")
    elif rel in baselines:
      notes += [
          f"regression: {rel}: {t}" for t, o in got.items()
          if o == "failed" and t not in old
      ]
  widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
  for row in rows:
    print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
  for note in notes:
    print(note)
  passed = sum(int(row[2]) for row in rows[1:])
  failed = sum(int(row[3]) for row in rows[1:])
  print(f"{passed} passed, {failed} failed")
  return failed


def rerun_without_series(checkout, base, cache, files):
  """{file: outcomes} of FILES in a worktree at BASE (the prebuilt links
  too), to tell regressions from failures the series did not cause."""
  log(f"rerunning without the series: {' '.join(files)}")
  wt = base_worktree(checkout, base, cache)
  link_prebuilt(wt, base, checkout)
  return {
      rel: run_file(wt, rel, f"{wt}/{rel}", f"{cache}/logs/without-series")[1]
      for rel in files
  }


def parse_args():
  ap = argparse.ArgumentParser(
      prog="tools/apply_and_test.sh",
      description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--checkout",
                  help="a pytorch/xla checkout (default: the "
                  "one built from the wheel)")
  ap.add_argument("--patches",
                  default=f"{REPO_ROOT}/patches",
                  help="directory of series and the patches (and of "
                  "pytorch/series, the PyTorch series, if any)")
  ap.add_argument("--unpatched",
                  action="store_true",
                  help="the same without either series (a worktree at "
                  "v2.9.0, the installed torch)")
  ap.add_argument("--only", help="just this test file (test_foo[.py])")
  ap.add_argument("--run",
                  nargs=argparse.REMAINDER,
                  metavar="CMD",
                  help="run CMD ARGS... instead, from this directory, with "
                  "the (un)patched torch_xla importable; exit with its status")
  a = ap.parse_args()
  if a.run == []:
    ap.error("--run needs a command")
  return a


def lock(cache):
  """Waits until no other run uses CACHE.  The lock's descriptor is closed
  at exec (Python's default), so --run CMD does not hold it."""
  f = open(f"{cache}/.lock", "w")
  try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    log(f"waiting for another run using {cache}")
    fcntl.flock(f, fcntl.LOCK_EX)
  return f


def pick_checkout(arg, cache):
  if not arg:
    checkout = f"{cache}/wheel-checkout"
    if not os.path.isdir(checkout):
      log(f"building {checkout} from the installed torch_xla wheel (once)")
      build_wheel_checkout(checkout)
    return checkout
  checkout = os.path.realpath(arg)
  if git(checkout, "rev-parse", "--show-toplevel", check=False) != checkout:
    die(f"--checkout {arg} is not the top of a git checkout")
  return checkout


def exec_command(root, cmd, overlay=None):
  """Replaces this process with CMD, ROOT's torch_xla (and OVERLAY's torch)
  importable."""
  path = [overlay, root, os.environ.get("PYTHONPATH")]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)))
  env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
  log(f"running {' '.join(cmd)}")
  try:
    os.execvpe(cmd[0], cmd, env)
  except OSError as e:
    die(f"cannot run {cmd[0]}: {e}")


def test_files(root, real, unpatched, only):
  """[(file, path, upstream?)] to run: the series' own (this repository's
  test/), from ROOT unless UNPATCHED, then upstream's REGRESSION_FILES if
  REAL."""
  ours = sorted(
      glob.glob("test/**/test_*.py", root_dir=REPO_ROOT, recursive=True))
  files = []
  for rel in ours:
    path = f"{root}/{rel}"
    if not unpatched and not os.path.exists(path):
      log(f"warning: the series lacks {rel}; running this repository's "
          "copy (see tools/check_series_sync.py)")
    if unpatched or not os.path.exists(path):
      path = f"{REPO_ROOT}/{rel}"
    files.append((rel, path, False))
  files += [(rel, f"{root}/{rel}", True)
            for rel in REGRESSION_FILES
            if real and rel not in ours]
  if only:
    name = os.path.basename(only).removesuffix(".py") + ".py"
    files = [f for f in files if os.path.basename(f[0]) == name]
    if not files:
      die(f"--only {only}: no such test file")
  return files


def main():
  a = parse_args()
  cache = os.path.realpath(
      os.environ.get("APPLY_AND_TEST_CACHE", f"{REPO_ROOT}/.cache"))
  os.makedirs(f"{cache}/logs/without-series", exist_ok=True)
  held = lock(cache)  # noqa: F841 (held until exit)
  checkout = pick_checkout(a.checkout, cache)
  base = base_commit(checkout)
  real = git(checkout, "cat-file", "-e", f"{base}:{RUN_TESTS}",
             check=False) is not None
  overlay = None
  if a.unpatched:
    root = base_worktree(checkout, base, cache)
    log(f"unpatched: {root}, at {BASE_TAG} without the series")
  else:
    apply_series(checkout, base, read_series(os.path.abspath(a.patches)), cache)
    overlay = torch_overlay(os.path.abspath(a.patches), cache)
    root = checkout
  link_prebuilt(root, base, checkout)
  if a.run:
    if root != checkout and os.path.commonpath([os.getcwd(), checkout
                                               ]) == checkout:
      log(f"warning: run from {checkout}, `python -c`/`-m` import its "
          "torch_xla, not the unpatched one (`python FILE` does not)")
    exec_command(root, a.run, overlay)

  if not real:
    log(f"{checkout} is not a real pytorch/xla checkout: upstream's tests "
        "are not run (use --checkout DIR for that)")
  files = test_files(root, real, a.unpatched, a.only)
  results = [(rel, *run_file(root, rel, path, f"{cache}/logs", overlay))
             for rel, path, _ in files]
  upstream = {rel for rel, _, upstream in files if upstream}
  rerun = [
      rel for rel, _, got in results
      if rel in upstream and got and "failed" in got.values()
  ]
  baselines = {}
  if rerun and not a.unpatched:
    baselines = rerun_without_series(checkout, base, cache, rerun)
  return 1 if summarize(results, baselines) else 0


if __name__ == "__main__":
  sys.exit(main())
