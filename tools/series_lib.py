#!/usr/bin/env python3
"""Helpers shared by tools/*.sh and tools/check_series_sync.py (stdlib only).

Parsing and file-system work that would be awkward in bash:

  series DIR                     print the patch files of DIR/series, in order
  touched PATCH...               print "A|M|D<TAB>path" for the files the patches touch
  wheel-missing BASE PATCH...    (run inside a checkout) paths the series modifies
                                 that commit BASE lacks, i.e. the --exclude list
                                 for a checkout built from the wheel
  am-failure LOG PATCH...        explain a failed `git am` (patch, file, hunk)
  build-wheel-checkout DEST      git repository of the installed wheel's sources
  prebuilt-links CHECKOUT BASE   symlink the wheel's generated/native files
  remove-prebuilt-links CHECKOUT
  summary TSV [--baseline TSV]   table of unittest results; exit 1 on failure
                                 (with --baseline, failures of upstream's files
                                 that also fail without the series excepted)
  rerun-candidates TSV           upstream files of TSV to rerun without the
                                 series: those with failing tests

Run with the environment's python (tools/env.sh) except for `series`,
`touched` and `am-failure`, which any python3 can run.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

BASE_TAG = "v2.9.0"
BASE_COMMIT = "5fab7053df86c8d503b98d9e7202ca8b8d4978c7"

# Files that the torch_xla 2.9.0 wheel ships under torch_xla/ as *.py but that
# are NOT in git at the v2.9.0 tag, so a checkout built from the wheel must
# not contain them (it would differ from the tag).  Found by comparing the
# wheel with `git ls-files 'torch_xla/**.py'` of the tag: this is the only one.
WHEEL_GENERATED_FILES = {
    "torch_xla/version.py":
        "written by upstream's setup.py at build time (__version__, "
        "__xla_gitrev__, __torch_gitrev__); listed in upstream's .gitignore",
}

# The wheel does not keep file modes (everything is 0644), but these two
# files are 100755 in git at the v2.9.0 tag.  Restoring the mode keeps the
# wheel-derived checkout identical to the tag, so `git format-patch` output
# (the "index ... 100755" lines) is the same from either kind of checkout.
TAG_EXECUTABLE_FILES = (
    "torch_xla/debug/frame_parser_util.py",
    "torch_xla/utils/utils.py",
)

# Fixed identity and date (those of the upstream v2.9.0 commit) so that
# building the wheel checkout is reproducible: same commit id every time.
WHEEL_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "torch_xla wheel sources",
    "GIT_AUTHOR_EMAIL": "wheel-checkout@localhost",
    "GIT_AUTHOR_DATE": "2025-11-17T13:23:46-0800",
    "GIT_COMMITTER_NAME": "torch_xla wheel sources",
    "GIT_COMMITTER_EMAIL": "wheel-checkout@localhost",
    "GIT_COMMITTER_DATE": "2025-11-17T13:23:46-0800",
}

WHEEL_COMMIT_MESSAGE = f"""\
torch_xla 2.9.0 Python sources, from the installed release wheel

This is NOT upstream commit {BASE_COMMIT}.
It holds only torch_xla/**/*.py as shipped in the torch_xla 2.9.0 wheel,
which are identical to the files of the {BASE_TAG} tag's torch_xla/ directory,
minus files generated at build time ({", ".join(WHEEL_GENERATED_FILES)}).
There are no C++ sources and none of upstream's tests.
Built by tools/apply_and_test.sh; tagged {BASE_TAG} so the patch series applies.
"""

EXCLUDE_BEGIN = "# BEGIN apply_and_test.sh prebuilt links (generated, do not edit)"
EXCLUDE_END = "# END apply_and_test.sh prebuilt links"


def die(msg):
  sys.exit(f"error: {msg}")


def git(*args, cwd=None, env=None, check=True):
  full_env = None
  if env:
    full_env = dict(os.environ, **env)
  proc = subprocess.run(["git", *args],
                        cwd=cwd,
                        env=full_env,
                        capture_output=True,
                        text=True)
  if check and proc.returncode != 0:
    die(f"git {' '.join(args)} failed in {cwd or os.getcwd()}:\n"
        f"{proc.stderr.strip()}")
  return proc.stdout


# --------------------------------------------------------------------------
# Series and patches


def read_series(patch_dir):
  """Patch file names listed in PATCH_DIR/series ('#' comments, blank lines)."""
  path = os.path.join(patch_dir, "series")
  if not os.path.isfile(path):
    die(f"{path} not found")
  names = []
  with open(path) as f:
    for line in f:
      line = re.sub(r"(^|\s)#.*$", "", line).strip()
      if line:
        names.append(line)
  return names


def series_leading_comments(patch_dir):
  """The comment block (and blank lines) at the top of PATCH_DIR/series."""
  path = os.path.join(patch_dir, "series")
  lines = []
  if os.path.isfile(path):
    with open(path) as f:
      for line in f:
        if line.strip() and not line.lstrip().startswith("#"):
          break
        lines.append(line)
  while lines and not lines[-1].strip():
    lines.pop()
  return lines


def _unquote(path):
  # git quotes unusual paths: "a/sp\303\251cial name"
  if path.startswith('"'):
    path = path[1:-1].encode("latin-1").decode("unicode_escape")
    path = path.encode("latin-1").decode("utf-8")
  return path


class FileDiff:
  """One `diff --git` section of a patch."""

  def __init__(self, old, new):
    self.old = old  # path before (a/...), None if created
    self.new = new  # path after (b/...), None if deleted
    self.lines = []  # raw lines of the section, headers included

  @property
  def path(self):
    return self.new or self.old

  @property
  def status(self):
    if self.old is None:
      return "A"
    if self.new is None:
      return "D"
    return "M"

  def hunks(self):
    """[(old_start, [lines])] for each @@ hunk."""
    result = []
    for line in self.lines:
      m = re.match(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", line)
      if m:
        result.append((int(m.group(1)), [line]))
      elif result and line[:1] in (" ", "+", "-", "\\"):
        result[-1][1].append(line)
    return result

  def added_lines(self):
    return [l[1:] for _, h in self.hunks() for l in h[1:] if l.startswith("+")]


def parse_patch(path):
  """FileDiff sections of a `git format-patch` file.  Hunk bodies are read by
  their line counts, so a removed line "- " is not taken for the "-- "
  signature separator."""
  diffs = []
  cur = None
  old_left = new_left = 0  # lines still expected in the current hunk
  with open(path, encoding="utf-8", errors="surrogateescape") as f:
    lines = f.read().split("\n")
  for line in lines:
    if old_left > 0 or new_left > 0:
      cur.lines.append(line)
      tag = line[:1]
      if tag in (" ", ""):
        old_left -= 1
        new_left -= 1
      elif tag == "-":
        old_left -= 1
      elif tag == "+":
        new_left -= 1
      continue
    m = re.match(r"diff --git (\"?a/.*?\"?) (\"?b/.*\"?)$", line)
    if m:
      cur = FileDiff(_unquote(m.group(1))[2:], _unquote(m.group(2))[2:])
      diffs.append(cur)
      cur.lines.append(line)
      continue
    if cur is None:
      continue
    h = re.match(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", line)
    if h:
      old_left = int(h.group(1) if h.group(1) is not None else 1)
      new_left = int(h.group(2) if h.group(2) is not None else 1)
    elif line.startswith("\\"):  # "\ No newline at end of file"
      pass
    elif line.startswith("new file mode"):
      cur.old = None
    elif line.startswith("deleted file mode"):
      cur.new = None
    elif line.startswith("rename from "):
      cur.old = _unquote(line[len("rename from "):])
    elif line.startswith("rename to "):
      cur.new = _unquote(line[len("rename to "):])
    elif not re.match(r"(index |old mode|new mode|similarity|dissimilarity|"
                      r"copy |--- |\+\+\+ |Binary files|GIT binary patch)",
                      line):
      cur = None  # end of this file's diff (signature, next mail, ...)
      continue
    cur.lines.append(line)
  return diffs


def touched(patches):
  """[(status, path)] over the patches, in order (repeats possible)."""
  out = []
  for p in patches:
    for d in parse_patch(p):
      if d.status == "M" and d.old != d.new:  # rename: old disappears
        out.append(("D", d.old))
        out.append(("A", d.new))
      else:
        out.append((d.status, d.path))
  return out


def paths_needing_base(patches):
  """Paths whose first touch in the series is a modification or deletion,
  i.e. that must already exist in the base commit."""
  first = {}
  for status, path in touched(patches):
    first.setdefault(path, status)
  return sorted(p for p, s in first.items() if s != "A")


def wheel_missing(base, patches, cwd="."):
  """Paths the series modifies that commit BASE does not have."""
  missing = []
  for path in paths_needing_base(patches):
    proc = subprocess.run(["git", "cat-file", "-e", f"{base}:{path}"],
                          cwd=cwd,
                          capture_output=True)
    if proc.returncode != 0:
      missing.append(path)
  return missing


# --------------------------------------------------------------------------
# Explaining a failed `git am`


def explain_am_failure(log_text, patches):
  """Lines that say which patch, file and hunk made `git am` fail."""
  out = []
  m = re.search(r"^Patch failed at (\d+) (.*)$", log_text, re.M)
  if m:
    idx = int(m.group(1)) - 1
  else:  # e.g. a corrupt patch: count "Applying:" lines
    idx = max(0, len(re.findall(r"^Applying: ", log_text, re.M)) - 1)
  patch = patches[idx] if 0 <= idx < len(patches) else None
  out.append(f"patch {os.path.basename(patch) if patch else '?'} "
             f"(#{idx + 1} of the series) does not apply")
  diffs = parse_patch(patch) if patch else []
  found_detail = False
  for fm in re.finditer(r"^error: patch failed: (.*):(\d+)$", log_text, re.M):
    path, line = fm.group(1), int(fm.group(2))
    found_detail = True
    out.append(f"  file {path}, hunk starting at line {line} of the original:")
    for d in diffs:
      if d.path != path and d.old != path:
        continue
      for start, hunk in d.hunks():
        if start == line:
          for l in hunk[:40]:
            out.append("    " + l)
          if len(hunk) > 40:
            out.append(f"    ... ({len(hunk) - 40} more lines)")
  for em in re.finditer(r"^error: (?!patch failed:)(.*)$", log_text, re.M):
    found_detail = True
    out.append("  " + em.group(1))
  if not found_detail:
    out.append("  (no file/hunk details in git am's output; see the log)")
  return out


# --------------------------------------------------------------------------
# The checkout built from the installed wheel


def installed_package_dir(name="torch_xla"):
  import importlib.util
  spec = importlib.util.find_spec(name)  # does not import (fast)
  if spec is None or not spec.submodule_search_locations:
    die(f"{name} is not installed in {sys.executable}")
  return os.path.realpath(list(spec.submodule_search_locations)[0])


def wheel_python_files(pkg_dir):
  """Relative paths 'torch_xla/...py' of the wheel's sources that belong in
  the checkout (all *.py minus WHEEL_GENERATED_FILES), sorted."""
  files = []
  for root, dirs, names in os.walk(pkg_dir):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
    for n in names:
      if n.endswith(".py"):
        rel = "torch_xla/" + os.path.relpath(os.path.join(root, n), pkg_dir)
        if rel not in WHEEL_GENERATED_FILES:
          files.append(rel)
  return sorted(files)


def build_wheel_checkout(dest, pkg_dir):
  dest = os.path.abspath(dest)
  if os.path.exists(dest):
    die(f"{dest} already exists")
  tmp = f"{dest}.tmp-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  try:
    git("-c", "init.defaultBranch=wheel", "init", "-q", cwd=tmp)
    for rel in wheel_python_files(pkg_dir):
      src = os.path.join(pkg_dir, os.path.relpath(rel, "torch_xla"))
      dst = os.path.join(tmp, rel)
      os.makedirs(os.path.dirname(dst), exist_ok=True)
      shutil.copyfile(src, dst)
      os.chmod(dst, 0o755 if rel in TAG_EXECUTABLE_FILES else 0o644)
    cfg = [
        "-c", "core.autocrlf=false", "-c", "core.fileMode=true", "-c",
        "commit.gpgSign=false", "-c", "core.hooksPath=/dev/null"
    ]
    git(*cfg, "add", "-A", "torch_xla", cwd=tmp)
    git(*cfg,
        "commit",
        "-q",
        "--no-verify",
        "-m",
        WHEEL_COMMIT_MESSAGE,
        cwd=tmp,
        env=WHEEL_COMMIT_ENV)
    git("tag", BASE_TAG, cwd=tmp)
    os.rename(tmp, dest)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return git("rev-parse", "HEAD", cwd=dest).strip()


# --------------------------------------------------------------------------
# Prebuilt mode: the checkout's Python sources over the wheel's native parts


def _exclude_file(checkout):
  rel = git("rev-parse", "--git-path", "info/exclude", cwd=checkout).strip()
  return os.path.join(checkout, rel)


def _read_exclude(path):
  """(lines outside our block, paths inside our block)."""
  outside, ours, inside = [], [], False
  if os.path.exists(path):
    with open(path) as f:
      for line in f.read().splitlines():
        if line == EXCLUDE_BEGIN:
          inside = True
        elif line == EXCLUDE_END:
          inside = False
        elif inside:
          ours.append(line.lstrip("/"))
        else:
          outside.append(line)
  return outside, ours


def _write_exclude(path, outside, ours):
  while outside and not outside[-1].strip():
    outside.pop()
  lines = list(outside)
  if ours:
    lines += ["", EXCLUDE_BEGIN] + ["/" + p for p in ours] + [EXCLUDE_END]
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write("\n".join(lines) + ("\n" if lines else ""))


def _remove_our_links(checkout, paths):
  for rel in paths:
    p = os.path.join(checkout, rel)
    if os.path.islink(p):
      os.unlink(p)


def prebuilt_links(checkout, base, pkg_dir):
  """Symlink into CHECKOUT/torch_xla every file of the installed package that
  git does not track there (in BASE or in HEAD): generated files such as
  version.py and native libraries.  A directory missing from the checkout
  (e.g. torch_xla/lib/) is linked as a whole.  The links are listed in
  .git/info/exclude so the checkout stays clean.  Returns the links."""
  checkout = os.path.abspath(checkout)
  tracked = set(
      git("ls-tree", "-r", "--name-only", base, "--", "torch_xla",
          cwd=checkout).splitlines())
  tracked |= set(git("ls-files", "--", "torch_xla", cwd=checkout).splitlines())
  tracked_dirs = {os.path.dirname(p) for p in tracked}
  for p in list(tracked_dirs):
    while p:
      p = os.path.dirname(p)
      tracked_dirs.add(p)

  wanted = {}  # checkout-relative path -> link target
  for root, dirs, names in os.walk(pkg_dir):
    rel_root = os.path.normpath(
        os.path.join("torch_xla", os.path.relpath(root, pkg_dir)))
    keep = []
    for d in sorted(dirs):
      if d == "__pycache__":
        continue
      rel = os.path.join(rel_root, d)
      if rel in tracked_dirs:
        keep.append(d)
      else:  # whole directory unknown to git: one link
        wanted[rel] = os.path.join(root, d)
    dirs[:] = keep
    for n in sorted(names):
      rel = os.path.join(rel_root, n)
      if rel not in tracked:
        wanted[rel] = os.path.join(root, n)

  exclude = _exclude_file(checkout)
  outside, previous = _read_exclude(exclude)
  _remove_our_links(checkout, [p for p in previous if p not in wanted])
  for rel, target in sorted(wanted.items()):
    dst = os.path.join(checkout, rel)
    if os.path.islink(dst):
      if os.readlink(dst) == target:
        continue
      os.unlink(dst)
    elif os.path.exists(dst):
      die(f"{dst} exists and is not a link made by this script (left by a "
          "source build?).  Remove it for --build prebuilt, or use --build "
          "source.")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.symlink(target, dst)
  _write_exclude(exclude, outside, sorted(wanted))
  return sorted(wanted)


def remove_prebuilt_links(checkout):
  checkout = os.path.abspath(checkout)
  exclude = _exclude_file(checkout)
  outside, previous = _read_exclude(exclude)
  _remove_our_links(checkout, previous)
  _write_exclude(exclude, outside, [])
  return previous


# --------------------------------------------------------------------------
# unittest result summary

SIGNALS = {
    1: "SIGHUP",
    2: "SIGINT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    15: "SIGTERM"
}


def parse_unittest_log(text):
  """dict(ran, failed, skipped, passed, complete) from unittest's output.
  Several `Ran N tests` blocks in one file are added up."""
  ran = failed = skipped = 0
  blocks = 0
  lines = text.splitlines()
  for i, line in enumerate(lines):
    m = re.match(r"^Ran (\d+) tests? in ", line)
    if not m:
      continue
    blocks += 1
    ran += int(m.group(1))
    for status in lines[i + 1:i + 6]:
      s = re.match(r"^(OK|FAILED)\b(?: \((.*)\))?", status)
      if not s:
        continue
      counts = {}
      for part in (s.group(2) or "").split(","):
        if "=" in part:
          k, v = part.split("=")
          counts[k.strip()] = int(v)
      failed += (
          counts.get("failures", 0) + counts.get("errors", 0) +
          counts.get("unexpected successes", 0))
      skipped += counts.get("skipped", 0)
      break
  return {
      "ran": ran,
      "failed": failed,
      "skipped": skipped,
      "passed": ran - failed - skipped,  # expected failures count as passed
      "complete": blocks > 0,
  }


def read_log(path):
  """Text of a log file ("" if it is missing)."""
  if not path or not os.path.exists(path):
    return ""
  with open(path, errors="replace") as f:
    return f.read()


def file_result(text, status):
  """How one test file's run ended, from its log TEXT and exit STATUS, as the
  summary counts it: dict(tests, passed, failed, skipped, result, normal).
  NORMAL is False for a crash (no "Ran N tests" line, or killed by a signal)
  and for a non-zero exit with no failing test: then the failures cannot be
  told apart test by test."""
  r = parse_unittest_log(text)
  if not r["complete"] or status > 128:
    sig = SIGNALS.get(status - 128, f"signal {status - 128}") \
        if status > 128 else None
    result = f"CRASHED (exit {status}{', ' + sig if sig else ''}" + \
             ("" if r["complete"] else ", no 'Ran N tests' line") + ")"
    return {
        "tests": str(r["ran"]) if r["complete"] else "?",
        "passed": r["passed"] if r["complete"] else 0,
        "failed": max(r["failed"], 1),
        "skipped": r["skipped"],
        "result": result,
        "normal": False,
    }
  out = {
      "tests": str(r["ran"]),
      "passed": r["passed"],
      "failed": r["failed"],
      "skipped": r["skipped"],
      "result": "ok" if r["failed"] == 0 else "FAILED",
      "normal": True,
  }
  if status != 0 and r["failed"] == 0:
    out.update(failed=1,
               result=f"FAILED (exit {status} although the tests passed)",
               normal=False)
  return out


# Failing tests one by one, to compare a run with the series against a run
# without it.  After the run, unittest prints one block per failure or error:
#
#   ======================================================================
#   ERROR: test_x1 (<function f at 0x7f3218ba2e80>) (__main__.C)
#   (more description lines: docstring, absl's parameters)
#   ----------------------------------------------------------------------
#   Traceback (most recent call last):
#     ...
#   ModuleNotFoundError: No module named 'jax'
#
# and, since Python 3.11, one "UNEXPECTED SUCCESS: <test>" line per
# unexpected success.  With -v it also prints a progress line per test and
# subtest ("test_x (__main__.C.test_x) ... ok", "  test_x (__main__.C.test_x)
# (i=1) ... FAIL").  The blocks are the reliable list: a progress line is cut
# in two when the test prints something ("test_x (...) ... <output>" then
# "ERROR" on a line of its own) and absl's parameterized tests describe
# themselves on three lines.  The progress lines supply what no block lists
# (unexpected successes before Python 3.11, failures of a run that died
# before printing the blocks).

SEPARATOR1 = "=" * 70
SEPARATOR2 = "-" * 70
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
_BLOCK_HEAD = re.compile(r"^(ERROR|FAIL|UNEXPECTED SUCCESS): (.*)$")
_STATUS = re.compile(
    r"ok|FAIL|ERROR|skipped(?: .*)?|expected failure|unexpected success")
_TEST_HEAD = re.compile(r"^\s*\S+ \(.+\)")
_RAN = re.compile(r"^Ran \d+ tests? in ")


def normalize_test_id(description):
  """The test's id for comparing two runs: unittest's description of it (its
  first line) with memory addresses blanked, since absl's parameterized names
  hold reprs such as "<function dynamo_backend at 0x7f3218ba2e80>"."""
  return _ADDRESS.sub("0x...", description.strip())


def _error_line(err_lines):
  """First line of the last exception of a formatted traceback."""
  start = 0
  for i, line in enumerate(err_lines):
    if line.startswith("Traceback (most recent call last):"):
      start = i + 1
  for line in err_lines[start:] + err_lines:
    if line.strip() and not line[:1].isspace():
      return line.strip()
  return next((l.strip() for l in err_lines if l.strip()), "")


def unittest_progress(text):
  """[(test id, status)] from the progress lines of a `-v` run, in order.
  STATUS: ok, FAIL, ERROR, skipped '<reason>', expected failure or unexpected
  success."""
  out = []
  pending = None  # a test whose status is still to come
  recent = []  # lines since the last progress line
  listing = False  # inside the failure blocks printed after the run
  for line in text.splitlines():
    if line in (SEPARATOR1, SEPARATOR2):
      listing = True
      pending = None
      continue
    if listing:
      listing = not _RAN.match(line)
      continue
    m = re.match(r"^(.*?) \.\.\. ?(.*)$", line)
    if m:
      head = m.group(1)
      if not _TEST_HEAD.match(head):
        # The last line of a longer description: its first line is the id.
        head = next((l for l in recent[-2:] if _TEST_HEAD.match(l)), head)
      recent = []
      if _STATUS.fullmatch(m.group(2).strip()):
        out.append((normalize_test_id(head), m.group(2).strip()))
        pending = None
      else:
        pending = normalize_test_id(head)
    elif pending is not None and _STATUS.fullmatch(line.strip()):
      out.append((pending, line.strip()))
      pending = None
    else:
      recent.append(line)
  return out


def unittest_failing_tests(text):
  """[(kind, test id, first error line)] for each failure (kind FAIL), error
  (ERROR) and unexpected success (UNEXPECTED SUCCESS) of a unittest log,
  subtests one by one, in the order unittest lists them."""
  lines = text.splitlines()
  out = []
  i, n = 0, len(lines)
  while i < n:
    if lines[i] != SEPARATOR1:
      i += 1
      continue
    i += 1
    while i < n:
      m = _BLOCK_HEAD.match(lines[i])
      if not m:
        break
      kind, test = m.group(1), normalize_test_id(m.group(2))
      i += 1
      if kind == "UNEXPECTED SUCCESS":
        # One line each (plus maybe a docstring line), no traceback.
        skip = 0
        while (i < n and skip < 3 and not _BLOCK_HEAD.match(lines[i]) and
               lines[i] not in (SEPARATOR1, SEPARATOR2)):
          i += 1
          skip += 1
        out.append((kind, test, ""))
        continue
      while i < n and lines[i] not in (SEPARATOR1, SEPARATOR2):
        i += 1  # the rest of the description
      err = []
      if i < n and lines[i] == SEPARATOR2:
        i += 1
        while i < n and lines[i] not in (SEPARATOR1, SEPARATOR2):
          err.append(lines[i])
          i += 1
      out.append((kind, test, _error_line(err)))
      break  # the next block starts with SEPARATOR1
  progress = unittest_progress(text)
  if not any(kind == "UNEXPECTED SUCCESS" for kind, _, _ in out):
    out += [("UNEXPECTED SUCCESS", test, "")
            for test, status in progress
            if status == "unexpected success"]
  if not any(kind in ("FAIL", "ERROR") for kind, _, _ in out):
    out += [(status, test, "(no traceback in the log)")
            for test, status in progress
            if status in ("FAIL", "ERROR")]
  return out


def compare_with_base(text, status, base_text, base_status, base_note=None):
  """Splits the failures of a run of an upstream test file WITH the series
  (log TEXT, exit STATUS) into pre-existing ones, whose test also fails in
  the run of the same file WITHOUT the series (BASE_TEXT, BASE_STATUS), and
  new ones.  BASE_STATUS None: there is no such run (BASE_NOTE says why).
  Conservative: when the runs cannot be compared test by test (no run
  without the series, a crash on either side, failures that the log does not
  name), the failures are all new.

  Returns dict(pre_existing=[(kind, test, error line, error line without the
  series)], new=[(kind, test, error line)], unnamed=number of failures not
  named in the log (new), reason=why nothing could be compared, or None)."""
  res = {"pre_existing": [], "new": [], "unnamed": 0, "reason": None}
  r = file_result(text, status)
  if r["failed"] == 0:
    return res
  failing = unittest_failing_tests(text)
  res["new"] = [(kind, test, line) for kind, test, line in failing]
  res["unnamed"] = max(0, r["failed"] - len(failing))
  if not r["normal"]:
    res["reason"] = f"with the series it {r['result']}"
    return res
  if len(failing) > r["failed"]:
    res["reason"] = (f"its log names {len(failing)} failing tests but "
                     f"unittest counted {r['failed']}")
    return res
  if base_status is None:
    res["reason"] = base_note or "it was not run without the series"
    return res
  b = file_result(base_text, base_status)
  if not b["normal"]:
    res["reason"] = f"without the series it {b['result']}"
    return res
  base_failing = {}
  for _, test, line in unittest_failing_tests(base_text):
    base_failing.setdefault(test, []).append(line)
  res["new"] = []
  for kind, test, line in failing:
    if base_failing.get(test):
      res["pre_existing"].append((kind, test, line, base_failing[test].pop(0)))
    else:
      res["new"].append((kind, test, line))
  return res


def _plural(n, word):
  return f"{n} {word}" + ("" if n == 1 else "s")


def summarize(rows, baseline=None):
  """ROWS: (name, log path, exit status[, kind]).  KIND "upstream" marks
  upstream's test files, run as a regression check; any other kind is one of
  the series' own test files.

  BASELINE: None (no comparison: the table as before), or, for a run with the
  series on a real checkout, {name: (log path, exit status, note)} for the
  upstream files that were rerun without the series (path and status None,
  and NOTE saying why, if the rerun could not be done).  Then a failure of an
  upstream file whose test also fails without the series is "pre-existing":
  shown in a "pre-existing" column and listed after the table, and not
  counted as failed.  Failures of the series' own files always count.

  Returns (lines: the table and notes, passed, failed)."""
  compare = baseline is not None
  header = ["file", "tests", "passed", "failed"]
  header += ["pre-existing"] if compare else []
  header += ["skipped", "result"]
  body = []
  notes = []
  total_pass = total_fail = total_pre = 0
  all_same = True
  for row in rows:
    name, log, status = row[:3]
    kind = row[3] if len(row) > 3 else "series"
    text = read_log(log)
    r = file_result(text, status)
    pre = 0
    result = r["result"]
    if compare and kind == "upstream" and r["failed"]:
      base_log, base_status, note = baseline.get(name, (None, None, None))
      c = compare_with_base(text, status, read_log(base_log), base_status, note)
      pre = len(c["pre_existing"])
      new = r["failed"] - pre
      if c["pre_existing"]:
        notes.append(f"pre-existing failures of {name} (they also fail "
                     f"without the series; log: {base_log}):")
        for kind_, test, line, base_line in c["pre_existing"]:
          notes.append(f"  {kind_}: {test}" + (f": {line}" if line else ""))
          if normalize_test_id(base_line) != normalize_test_id(line):
            all_same = False
            notes.append(f"      without the series: {base_line}")
      if c["reason"]:
        notes.append(f"{name}: not compared with a run without the series "
                     f"({c['reason']}); {_plural(r['failed'], 'failure')} "
                     "counted")
      elif c["new"] or c["unnamed"]:
        notes.append(f"new failures of {name} (not failing without the "
                     "series):")
        notes += [
            f"  {k}: {test}" + (f": {line}" if line else "")
            for k, test, line in c["new"]
        ]
        if c["unnamed"]:
          notes.append(f"  and {c['unnamed']} not named in the log")
      if new == 0:
        result = "ok (failures pre-existing)"
      elif pre:
        result = f"FAILED ({new} new, {pre} pre-existing)"
      total_pre += pre
    total_pass += r["passed"]
    total_fail += r["failed"] - pre
    cells = [name, r["tests"], str(r["passed"]), str(r["failed"])]
    if compare:
      cells.append(str(pre) if kind == "upstream" else "-")
    cells += [str(r["skipped"]), result]
    body.append(cells)
  if not body:
    return ["(no test files were run)"], 0, 0
  ncol = len(header)
  widths = [max(len(r[i]) for r in [header] + body) for i in range(ncol)]

  def fmt(r):
    return "  ".join(
        r[i].ljust(widths[i]) if i in (0, ncol - 1) else r[i].rjust(widths[i])
        for i in range(ncol)).rstrip()

  lines = [fmt(header), "  ".join("-" * w for w in widths)]
  lines += [fmt(r) for r in body]
  lines += notes
  if total_pre:
    they = "it" if total_pre == 1 else "they"
    fail = "fail" + ("s" if total_pre == 1 else "")
    how = f"{fail} the same way" if all_same else f"also {fail}"
    lines.append(f"({_plural(total_pre, 'failure')} pre-existing: {they} "
                 f"{how} without the series)")
  return lines, total_pass, total_fail


# --------------------------------------------------------------------------


def read_tsv(path, ncols):
  """Lines of PATH split at tabs, padded with "" to NCOLS fields."""
  out = []
  with open(path) as f:
    for line in f:
      if line.strip():
        fields = line.rstrip("\n").split("\t", ncols - 1)
        out.append(fields + [""] * (ncols - len(fields)))
  return out


def read_rows(path):
  """(name, log, exit status, kind) rows of a summary TSV file."""
  return [(name, log, int(status), kind or "series")
          for name, log, status, kind in read_tsv(path, 4)]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawTextHelpFormatter)
  sub = ap.add_subparsers(dest="cmd", required=True)
  p = sub.add_parser("series")
  p.add_argument("patch_dir")
  p = sub.add_parser("touched")
  p.add_argument("patches", nargs="*")
  p = sub.add_parser("wheel-missing")
  p.add_argument("base")
  p.add_argument("patches", nargs="*")
  p = sub.add_parser("am-failure")
  p.add_argument("log")
  p.add_argument("patches", nargs="*")
  p = sub.add_parser("build-wheel-checkout")
  p.add_argument("dest")
  p = sub.add_parser("prebuilt-links")
  p.add_argument("checkout")
  p.add_argument("base")
  p = sub.add_parser("remove-prebuilt-links")
  p.add_argument("checkout")
  p = sub.add_parser("package-dir")
  p = sub.add_parser("summary")
  p.add_argument("tsv", help="lines: name<TAB>log<TAB>exit status[<TAB>kind]")
  p.add_argument("--baseline",
                 help="compare the upstream files' failures with their runs "
                 "without the series; lines: name<TAB>log<TAB>exit status, "
                 "or name<TAB><TAB><TAB>why it was not run")
  p = sub.add_parser("rerun-candidates")
  p.add_argument("tsv", help="as for summary")
  a = ap.parse_args(argv)

  if a.cmd == "series":
    for name in read_series(a.patch_dir):
      path = os.path.join(a.patch_dir, name)
      if not os.path.isfile(path):
        die(f"{a.patch_dir}/series lists {name}, which does not exist")
      print(os.path.abspath(path))
  elif a.cmd == "touched":
    for status, path in touched(a.patches):
      print(f"{status}\t{path}")
  elif a.cmd == "wheel-missing":
    for path in wheel_missing(a.base, a.patches):
      print(path)
  elif a.cmd == "am-failure":
    with open(a.log, errors="replace") as f:
      print("\n".join(explain_am_failure(f.read(), a.patches)))
  elif a.cmd == "build-wheel-checkout":
    print(build_wheel_checkout(a.dest, installed_package_dir()))
  elif a.cmd == "prebuilt-links":
    for rel in prebuilt_links(a.checkout, a.base, installed_package_dir()):
      print(rel)
  elif a.cmd == "remove-prebuilt-links":
    for rel in remove_prebuilt_links(a.checkout):
      print(rel)
  elif a.cmd == "rerun-candidates":
    for name, log, status, kind in read_rows(a.tsv):
      r = file_result(read_log(log), status)
      if kind == "upstream" and r["failed"] and r["normal"]:
        print(name)
  elif a.cmd == "package-dir":
    print(installed_package_dir())
  elif a.cmd == "summary":
    baseline = None
    if a.baseline:
      baseline = {}
      for name, log, status, note in read_tsv(a.baseline, 4):
        baseline[name] = (log or None, int(status) if status else None, note or
                          None)
    table, passed, failed = summarize(read_rows(a.tsv), baseline)
    for line in table:
      print(line)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
  return 0


if __name__ == "__main__":
  sys.exit(main())
