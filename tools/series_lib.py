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
  summary TSV                    table of unittest results; exit 1 on failure

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


def summarize(rows):
  """ROWS: (name, log path, exit status).  Returns (table lines, passed,
  failed)."""
  table = []
  header = ("file", "tests", "passed", "failed", "skipped", "result")
  body = []
  total_pass = total_fail = 0
  for name, log, status in rows:
    text = ""
    if os.path.exists(log):
      with open(log, errors="replace") as f:
        text = f.read()
    r = parse_unittest_log(text)
    if not r["complete"] or status > 128:
      sig = SIGNALS.get(status - 128, f"signal {status - 128}") \
          if status > 128 else None
      result = f"CRASHED (exit {status}{', ' + sig if sig else ''}" + \
               ("" if r["complete"] else ", no 'Ran N tests' line") + ")"
      failed = max(r["failed"], 1)
      tests = str(r["ran"]) if r["complete"] else "?"
      passed = r["passed"] if r["complete"] else 0
      skipped = r["skipped"]
    else:
      tests, passed, failed, skipped = str(
          r["ran"]), r["passed"], r["failed"], r["skipped"]
      if status != 0 and failed == 0:
        failed = 1
        result = f"FAILED (exit {status} although the tests passed)"
      else:
        result = "ok" if failed == 0 else "FAILED"
    total_pass += passed
    total_fail += failed
    body.append((name, tests, str(passed), str(failed), str(skipped), result))
  if not body:
    return ["(no test files were run)"], 0, 0
  widths = [max(len(r[i]) for r in [header] + body) for i in range(6)]

  def fmt(r):
    return "  ".join(
        r[i].ljust(widths[i]) if i in (0, 5) else r[i].rjust(widths[i])
        for i in range(6)).rstrip()

  table.append(fmt(header))
  table.append("  ".join("-" * w for w in widths))
  table.extend(fmt(r) for r in body)
  return table, total_pass, total_fail


# --------------------------------------------------------------------------


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
  p.add_argument("tsv", help="lines: name<TAB>log<TAB>exit status")
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
  elif a.cmd == "package-dir":
    print(installed_package_dir())
  elif a.cmd == "summary":
    rows = []
    with open(a.tsv) as f:
      for line in f:
        if line.strip():
          name, log, status = line.rstrip("\n").split("\t")
          rows.append((name, log, int(status)))
    table, passed, failed = summarize(rows)
    for line in table:
      print(line)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
  return 0


if __name__ == "__main__":
  sys.exit(main())
