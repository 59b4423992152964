#!/usr/bin/env bash
# Applies the patch series to a pytorch/xla checkout and runs its tests over
# the released torch_xla 2.9.0 wheel.  See --help.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: tools/apply_and_test.sh [OPTIONS] [--run CMD [ARGS...]]

Applies patches/series (plain `git am`, no 3-way merge) to a pytorch/xla
checkout on a branch `fix-8832` made from the base (tag v2.9.0, or commit
5fab7053df86c8d503b98d9e7202ca8b8d4978c7), then runs the torch_xla tests that
the series adds, the way upstream's test/run_tests.sh does:
    PJRT_DEVICE=CPU CPU_NUM_DEVICES=1 python test/dynamo/test_X.py -v
from the checkout root (-v: one line per test).  Logs go to <cache>/logs/; a
summary table and a final "N passed, N failed" line end the run.  Exit
status: 0 if nothing failed (failures that upstream's tests have without the
series aside, see below).

On a real pytorch/xla checkout, upstream's existing test/dynamo tests are run
too, as a regression check.  An upstream test file with failing tests is then
run again WITHOUT the series (in the worktree --unpatched uses, so your
checkout stays where it is; logs in <cache>/logs/patched/without-series/),
and its failures are compared test by test: a test that fails in both runs is
"pre-existing" (for example a test needing a package that is not installed),
one that fails only with the series is a regression.  The table gets a
"pre-existing" column, the pre-existing failures are listed after it, and the
final line counts as failed only the series' own failing tests and the
regressions.  Failures of the series' own test files always count, and if
the run without the series crashes or cannot be done, all of that file's
failures count.  (With --build source nothing is excepted: the base would
need a source build of its own.)

The patches are applied in a temporary `git worktree`, so if one fails, your
checkout is left exactly as it was (HEAD, branches, index, work tree) and the
failing patch, file and hunk are reported.  Running twice is a no-op ("already
applied").  A checkout with uncommitted changes to tracked files is refused.

Options:
  --checkout DIR   pytorch/xla git checkout to use.  Default: a git repository
                   built once from the INSTALLED torch_xla wheel's Python
                   sources (<cache>/wheel-checkout, tagged v2.9.0).  It holds
                   only torch_xla/**/*.py (identical to the tag's torch_xla/),
                   no C++ sources and none of upstream's tests, so upstream's
                   test/dynamo regression tests are not run in that mode, and
                   changes the series makes to files it lacks (for example
                   test/run_tests.sh) are left out (`git am --exclude`).
  --patches DIR    directory holding `series` and the patch files
                   (default: <repo>/patches).
  --build prebuilt (default) Run the checkout's Python sources over the wheel's
                   native library, like PyTorch's tools/nightly.py: files of
                   the installed torch_xla package that git does not track
                   (torch_xla/version.py, native libraries if any) are
                   symlinked into the checkout's torch_xla/ and listed in its
                   .git/info/exclude; _XLAC*.so stays in site-packages; then
                   PYTHONPATH=<checkout> makes `import torch_xla` load the
                   checkout.  Only Python changes can be tested this way.
  --build source   Build with upstream's own `python setup.py develop` in the
                   checkout.  Needs a full pytorch/xla checkout, bazel and
                   network access, and takes hours; not run in our CI.
  --unpatched      Use the base commit WITHOUT the series, to show the bug.
                   This uses a separate worktree detached at the base under
                   <cache>/unpatched/, so your checkout is not touched.  The
                   series' tests are run from <repo>/test/.
  --only NAME      Run only this test file (test_foo, test_foo.py or
                   test/dynamo/test_foo.py).
  --run CMD ...    Instead of the tests, run CMD (with everything after it as
                   its arguments) from the current directory, with the
                   environment's python first on PATH and the patched (or,
                   with --unpatched, unpatched) torch_xla importable through
                   PYTHONPATH.  Exits with CMD's exit status.  Example:
                     tools/apply_and_test.sh --unpatched --run python tools/repro_8832.py
                   Note: python puts the current directory first on sys.path,
                   so do not --run from the root of another pytorch/xla tree.
  -h, --help       Show this help.

Environment:
  PYTHON                 interpreter to use (must have torch==2.9.0 and
                         torch_xla==2.9.0); otherwise the active `python` if it
                         has them, else <repo>/.venv, created on first use
                         from the pins in setup.cfg (see tools/env.sh).
  PJRT_DEVICE            default CPU (tests always use CPU, like run_tests.sh).
  APPLY_AND_TEST_CACHE   cache directory (default: <repo>/.cache).

This script's own messages go to stderr as "[apply_and_test] ...", so with
--run, stdout carries only CMD's output.  Runs sharing a cache directory wait
for each other (flock).  Needs bash >= 4.3 and git >= 2.17.
EOF
}

log() { printf '[apply_and_test] %s\n' "$*" >&2; }
die() {
  printf '[apply_and_test] error: %s\n' "$*" >&2
  exit 1
}

BRANCH=fix-8832
BASE_TAG=v2.9.0
BASE_COMMIT=5fab7053df86c8d503b98d9e7202ca8b8d4978c7
# Upstream's existing dynamo tests, run as a regression check on a real
# checkout (the ones test/run_tests.sh runs on CPU for torch.compile/dynamo).
REGRESSION_TESTS=(
  test_dynamo_aliasing test_bridge test_graph_input_matcher test_num_output
  test_dynamo_config test_none_remover test_dynamo_integrations_util
  test_dynamo test_dynamo_dynamic_shape
)

CALLER_PWD="$PWD"
CHECKOUT=""
PATCH_DIR=""
BUILD=prebuilt
UNPATCHED=0
ONLY=""
RUN=()
while (($#)); do
  case "$1" in
    --checkout) CHECKOUT="${2:?--checkout needs a directory}"; shift 2 ;;
    --checkout=*) CHECKOUT="${1#*=}"; shift ;;
    --patches) PATCH_DIR="${2:?--patches needs a directory}"; shift 2 ;;
    --patches=*) PATCH_DIR="${1#*=}"; shift ;;
    --build) BUILD="${2:?--build needs prebuilt or source}"; shift 2 ;;
    --build=*) BUILD="${1#*=}"; shift ;;
    --unpatched) UNPATCHED=1; shift ;;
    --only) ONLY="${2:?--only needs a test file name}"; shift 2 ;;
    --only=*) ONLY="${1#*=}"; shift ;;
    --run)
      shift
      (($#)) || die "--run needs a command"
      RUN=("$@")
      break
      ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$BUILD" == prebuilt || "$BUILD" == source ]] || die "--build must be 'prebuilt' or 'source', not '$BUILD'"

# shellcheck source=tools/env.sh
source "$(dirname "$0")/env.sh"
LIB="$REPO_ROOT/tools/series_lib.py"
CACHE="${APPLY_AND_TEST_CACHE:-$REPO_ROOT/.cache}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd -P)"
# One run at a time per cache: runs share the wheel checkout, the unpatched
# worktrees and the logs.  (flock is util-linux; skipped where missing.)
if command -v flock >/dev/null 2>&1; then
  exec 9>"$CACHE/.lock"
  if ! flock -n 9; then
    log "another apply_and_test.sh run is using $CACHE; waiting for it to finish"
    flock 9
  fi
fi
PATCH_DIR="$(cd "${PATCH_DIR:-$REPO_ROOT/patches}" 2>/dev/null && pwd -P)" ||
  die "patch directory not found: ${PATCH_DIR:-$REPO_ROOT/patches}"

# ---------------------------------------------------------------- checkout
WHEEL_MODE=0
if [[ -n "$CHECKOUT" ]]; then
  [[ -d "$CHECKOUT" ]] || die "--checkout $CHECKOUT: no such directory"
  CHECKOUT="$(cd "$CHECKOUT" && pwd -P)"
  top="$(git -C "$CHECKOUT" rev-parse --show-toplevel 2>/dev/null)" ||
    die "--checkout $CHECKOUT is not a git checkout"
  [[ "$top" == "$CHECKOUT" ]] || die "--checkout must be the top of the checkout ($top), not $CHECKOUT"
else
  CHECKOUT="$CACHE/wheel-checkout"
  if [[ ! -d "$CHECKOUT/.git" ]]; then
    log "building $CHECKOUT from the installed torch_xla wheel (once)"
    "$PYTHON" "$LIB" build-wheel-checkout "$CHECKOUT" >/dev/null
  fi
  log "checkout: $CHECKOUT"
  log "  It holds only the Python sources of torch_xla 2.9.0 from the installed wheel"
  log "  (identical to the v2.9.0 tag's torch_xla/), not the C++ sources nor upstream's"
  log "  tests, so upstream's test/dynamo regression tests are not run in this mode."
  log "  Use --checkout /path/to/pytorch/xla for a real checkout."
fi

if BASE="$(git -C "$CHECKOUT" rev-parse -q --verify "refs/tags/$BASE_TAG^{commit}")"; then
  BASE_NAME="tag $BASE_TAG"
elif BASE="$(git -C "$CHECKOUT" rev-parse -q --verify "$BASE_COMMIT^{commit}")"; then
  BASE_NAME="commit $BASE_COMMIT"
elif [[ "$CHECKOUT" == "$CACHE/wheel-checkout" ]]; then
  die "$CHECKOUT has no tag $BASE_TAG (damaged?); remove it (rm -rf '$CHECKOUT') to rebuild it"
else
  die "$CHECKOUT has neither the tag $BASE_TAG nor commit $BASE_COMMIT; fetch them: git -C '$CHECKOUT' fetch https://github.com/pytorch/xla.git tag $BASE_TAG"
fi
if ! git -C "$CHECKOUT" cat-file -e "$BASE:test/run_tests.sh" 2>/dev/null; then
  WHEEL_MODE=1
fi

# lines "$1" -> array named $2 (empty output gives an empty array)
lines_to_array() {
  local -n _arr="$2"
  _arr=()
  [[ -z "$1" ]] || mapfile -t _arr <<<"$1"
}
out="$("$PYTHON" "$LIB" series "$PATCH_DIR")" || die "cannot read the series in $PATCH_DIR (above)"
lines_to_array "$out" PATCHES
log "series: ${#PATCHES[@]} patch(es) from $PATCH_DIR/series, base $BASE_NAME (${BASE:0:12})"

# -------------------------------------------------------------- apply
# Committer identity and date are fixed so the same series gives the same
# commits; the authors come from the patches.
COMMITTER=apply_and_test.sh
AM_ENV=(GIT_COMMITTER_NAME="$COMMITTER" GIT_COMMITTER_EMAIL=apply_and_test@localhost)
GIT_QUIET=(-c core.hooksPath=/dev/null -c gc.auto=0 -c advice.detachedHead=false)

AM_WT=""
cleanup_am_worktree() {
  if [[ -n "$AM_WT" && -d "$AM_WT" ]]; then
    git -C "$CHECKOUT" worktree remove --force "$AM_WT" >/dev/null 2>&1 || rm -rf "$AM_WT"
    git -C "$CHECKOUT" worktree prune >/dev/null 2>&1 || true
  fi
  AM_WT=""
}
trap cleanup_am_worktree EXIT

apply_series() {
  if ! git -C "$CHECKOUT" diff --quiet || ! git -C "$CHECKOUT" diff --cached --quiet; then
    git -C "$CHECKOUT" status --short --untracked-files=no >&2
    die "$CHECKOUT has uncommitted changes (above); commit or stash them (git stash) and rerun."
  fi
  local gitdir
  gitdir="$(git -C "$CHECKOUT" rev-parse --git-dir)"
  [[ "$gitdir" == /* ]] || gitdir="$CHECKOUT/$gitdir"
  if [[ -d "$gitdir/rebase-apply" || -d "$gitdir/rebase-merge" || -f "$gitdir/MERGE_HEAD" ]]; then
    die "$CHECKOUT has a git am/rebase/merge in progress; finish or abort it first."
  fi

  local -a exclude=()
  if ((WHEEL_MODE)) && ((${#PATCHES[@]})); then
    local path missing
    missing="$(cd "$CHECKOUT" && "$PYTHON" "$LIB" wheel-missing "$BASE" "${PATCHES[@]}")" ||
      die "could not list the files the series touches"
    local -a missing_paths
    lines_to_array "$missing" missing_paths
    for path in "${missing_paths[@]}"; do
      log "wheel checkout: not applying the series' changes to $path (absent from the wheel's sources; present in a real checkout)"
      exclude+=("--exclude=$path")
    done
  fi

  mkdir -p "$CACHE/tmp" "$CACHE/logs"
  AM_WT="$(mktemp -d "$CACHE/tmp/am.XXXXXX")"
  git -C "$CHECKOUT" "${GIT_QUIET[@]}" worktree add -q --detach "$AM_WT" "$BASE" >&2
  local am_log="$CACHE/logs/git-am.log"
  if ((${#PATCHES[@]})) &&
    ! env "${AM_ENV[@]}" git -C "$AM_WT" "${GIT_QUIET[@]}" am --keep-non-patch --committer-date-is-author-date \
      "${exclude[@]}" "${PATCHES[@]}" >"$am_log" 2>&1; then
    # git am's own output, minus its advice on resolving (we abort instead).
    grep -v -E '^(hint: |When you have resolved|If you prefer to skip|To restore the original)' \
      "$am_log" | sed 's/^/[apply_and_test] git am: /' >&2 || true
    log "----------------------------------------------------------------"
    "$PYTHON" "$LIB" am-failure "$am_log" "${PATCHES[@]}" | sed 's/^/[apply_and_test] /' >&2
    log "----------------------------------------------------------------"
    git -C "$AM_WT" am --abort >/dev/null 2>&1 || true
    cleanup_am_worktree
    die "the series does not apply to $BASE_NAME; $CHECKOUT was not changed (git am log: $am_log)"
  fi
  local new old=""
  new="$(git -C "$AM_WT" rev-parse HEAD)"
  cleanup_am_worktree

  if old="$(git -C "$CHECKOUT" rev-parse -q --verify "refs/heads/$BRANCH")" &&
    [[ "$(git -C "$CHECKOUT" rev-parse "$old^{tree}")" == "$(git -C "$CHECKOUT" rev-parse "$new^{tree}")" ]]; then
    log "already applied: branch $BRANCH (${old:0:12}) has the series' result"
    if [[ "$(git -C "$CHECKOUT" symbolic-ref -q HEAD || true)" != "refs/heads/$BRANCH" ]]; then
      git -C "$CHECKOUT" "${GIT_QUIET[@]}" checkout -q "$BRANCH"
      log "checked out $BRANCH in $CHECKOUT"
    fi
    return
  fi
  if [[ -n "$old" ]]; then
    # Commits this script made have the fixed committer; others are someone's
    # work, which moving the branch would hide.
    local foreign line
    foreign="$(git -C "$CHECKOUT" log --format='%cn%x09%h %s' "$BASE..$old" |
      awk -F '\t' -v me="$COMMITTER" '$1 != me { print $2 }')"
    if [[ -n "$foreign" ]]; then
      while IFS= read -r line; do log "  $line"; done <<<"$foreign"
      die "branch $BRANCH in $CHECKOUT has commits not made by this script (above), and the series gives a different tree. Export them into patches/ with tools/regen_patches.sh --checkout '$CHECKOUT', or rename the branch (git branch -m $BRANCH my-work), then rerun."
    fi
    log "moving branch $BRANCH from ${old:0:12} (an older series) to the new result"
  fi
  git -C "$CHECKOUT" "${GIT_QUIET[@]}" checkout -q -B "$BRANCH" "$new" ||
    die "could not check out $BRANCH in $CHECKOUT (untracked files in the way?); the result is commit $new"
  log "applied ${#PATCHES[@]} patch(es): $BRANCH is now ${new:0:12} in $CHECKOUT"
}

# Worktree detached at the base, for --unpatched; reused across runs.
unpatched_worktree() {
  local slug wt common
  slug="$(basename "$CHECKOUT")-$(printf '%s' "$CHECKOUT" | cksum | cut -d' ' -f1)"
  wt="$CACHE/unpatched/$slug"
  common="$(cd "$CHECKOUT" && cd "$(git rev-parse --git-common-dir)" && pwd -P)"
  if [[ -d "$wt" ]]; then
    local wt_common
    wt_common="$(cd "$wt" 2>/dev/null && cd "$(git rev-parse --git-common-dir 2>/dev/null)" 2>/dev/null && pwd -P || true)"
    if [[ "$wt_common" != "$common" ]]; then
      log "removing stale worktree $wt"
      rm -rf "$wt"
      git -C "$CHECKOUT" worktree prune
    fi
  fi
  if [[ -d "$wt" ]]; then
    if ! git -C "$wt" diff --quiet || ! git -C "$wt" diff --cached --quiet; then
      die "the unpatched worktree $wt has local changes; revert them (git -C '$wt' checkout -- .) or remove it with: git -C '$CHECKOUT' worktree remove --force '$wt'"
    fi
    git -C "$wt" "${GIT_QUIET[@]}" checkout -q --detach "$BASE"
  else
    mkdir -p "$CACHE/unpatched"
    git -C "$CHECKOUT" "${GIT_QUIET[@]}" worktree add -q --detach "$wt" "$BASE" >&2
  fi
  printf '%s\n' "$wt"
}

if ((UNPATCHED)); then
  TARGET="$(unpatched_worktree)"
  log "unpatched: worktree $TARGET detached at $BASE_NAME (the series is NOT applied)"
else
  apply_series
  TARGET="$CHECKOUT"
fi

# -------------------------------------------------------------- build
if [[ "$BUILD" == prebuilt ]]; then
  out="$("$PYTHON" "$LIB" prebuilt-links "$TARGET" "$BASE")" ||
    die "could not set up the prebuilt links in $TARGET"
  lines_to_array "$out" LINKS
  log "prebuilt: linked from the wheel into $TARGET (listed in .git/info/exclude): ${LINKS[*]:-nothing}"
else
  log "source build: python setup.py develop in $TARGET (needs bazel and network; takes long)"
  "$PYTHON" "$LIB" remove-prebuilt-links "$TARGET" >/dev/null
  (cd "$TARGET" && "$PYTHON" setup.py develop) >&2 || die "python setup.py develop failed in $TARGET"
fi

ORIG_PYTHONPATH="${PYTHONPATH:-}"
export PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}"
verify_log="$CACHE/logs/import-check.log"
mkdir -p "$CACHE/logs"
if ! where="$(cd "$TARGET" && "$PYTHON" -c 'import os, torch_xla; print(os.path.realpath(torch_xla.__file__))' 2>"$verify_log")"; then
  cat "$verify_log" >&2
  die "import torch_xla from $TARGET failed (above)"
fi
case "$where" in
  "$TARGET"/torch_xla/*) log "import torch_xla -> $where" ;;
  *) die "import torch_xla loads $where, not the checkout $TARGET/torch_xla (is PYTHONPATH overridden, or torch_xla installed in develop mode elsewhere?)" ;;
esac

# -------------------------------------------------------------- --run
if ((${#RUN[@]})); then
  SHIM="$CACHE/bin"
  mkdir -p "$SHIM"
  for name in python python3; do
    printf '#!/bin/sh\nexec "%s" "$@"\n' "$PYTHON" >"$SHIM/$name.tmp.$$"
    chmod +x "$SHIM/$name.tmp.$$"
    mv -f "$SHIM/$name.tmp.$$" "$SHIM/$name"
  done
  PATH="$SHIM:$(dirname "$PYTHON"):$PATH"
  export PATH
  log "running in $CALLER_PWD: ${RUN[*]}"
  cd "$CALLER_PWD"
  trap - EXIT
  exec 9>&- # release the lock: CMD may run long, or call this script itself
  exec "${RUN[@]}"
fi

# -------------------------------------------------------------- tests
MODE=patched
((UNPATCHED)) && MODE=unpatched
LOG_DIR="$CACHE/logs/$MODE"
rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"

TESTS=() # entries: "<label>|<file to run>"
declare -A UPSTREAM=() # labels of upstream's test files (not the series')
while IFS= read -r rel; do
  if ((UNPATCHED)); then
    TESTS+=("$rel|$REPO_ROOT/$rel")
  elif [[ -f "$TARGET/$rel" ]]; then
    TESTS+=("$rel|$TARGET/$rel")
  else
    log "warning: $rel is in $REPO_ROOT/test but not in the patched checkout; run tools/check_series_sync.py"
    TESTS+=("$rel|$TARGET/$rel")
  fi
done < <(cd "$REPO_ROOT" && find test -name 'test_*.py' -type f 2>/dev/null | LC_ALL=C sort)
if ((${#TESTS[@]} == 0)); then
  log "the series carries no tests (no test/**/test_*.py in $REPO_ROOT); nothing of its own to run"
fi
if ((WHEEL_MODE == 0)); then
  for name in "${REGRESSION_TESTS[@]}"; do
    rel="test/dynamo/$name.py"
    already=0
    for t in "${TESTS[@]}"; do [[ "${t%%|*}" == "$rel" ]] && already=1; done
    if ((already == 0)); then
      TESTS+=("$rel|$TARGET/$rel")
      UPSTREAM[$rel]=1
    fi
  done
fi
if [[ -n "$ONLY" ]]; then
  want="${ONLY%.py}"
  want="${want##*/}"
  kept=()
  for t in "${TESTS[@]}"; do
    rel="${t%%|*}"
    base="${rel##*/}"
    [[ "${base%.py}" == "$want" ]] && kept+=("$t")
  done
  ((${#kept[@]})) || die "--only $ONLY matches none of: $(for t in "${TESTS[@]}"; do printf '%s ' "${t%%|*}"; done)"
  TESTS=("${kept[@]}")
fi

# test/dynamo/test_x.py -> test_x's log file name in the directory $2
log_file() { printf '%s/%s.log' "$2" "$(printf '%s' "${1#test/}" | tr '/' '_' | sed 's/\.py$//')"; }

# Runs the test file $2 from the root $1 of a checkout, the way upstream's
# test/run_tests.sh does, plus -v (one line per test); its output goes to
# stderr and to the log $3.  Returns the test's exit status: call it as
#   status=0; run_test_file ... || status=$?
run_test_file() {
  local root="$1" file="$2" logf="$3"
  (
    cd "$root" &&
      PJRT_DEVICE=CPU CPU_NUM_DEVICES=1 PYTHONPATH="$root:$root/test" \
        "$PYTHON" "$file" -v
  ) 2>&1 | tee "$logf" >&2
  return "${PIPESTATUS[0]}"
}

SUMMARY_TSV="$LOG_DIR/summary.tsv"
: >"$SUMMARY_TSV"
for t in "${TESTS[@]}"; do
  rel="${t%%|*}"
  file="${t#*|}"
  logf="$(log_file "$rel" "$LOG_DIR")"
  log "=== $rel (log: $logf)"
  status=0
  run_test_file "$TARGET" "$file" "$logf" || status=$?
  kind=series
  [[ -z "${UPSTREAM[$rel]:-}" ]] || kind=upstream
  printf '%s\t%s\t%s\t%s\n' "$rel" "$logf" "$status" "$kind" >>"$SUMMARY_TSV"
done

# On a real checkout, with the series: reruns the upstream test files that
# have failing tests in the worktree WITHOUT the series (the one --unpatched
# uses; the checkout does not move), so that the summary can tell the
# regressions from the failures the series did not cause.  Writes one line
# per file to $BASELINE_TSV: "file<TAB>log<TAB>exit status", or
# "file<TAB><TAB><TAB>why it was not rerun" (then its failures all count).
rerun_without_series() {
  local out rel reason="" wt="" rc where logf status
  local dir="$LOG_DIR/without-series"
  local import_log="$dir/import-check.log"
  local -a todo
  if ! out="$("$PYTHON" "$LIB" rerun-candidates "$SUMMARY_TSV")"; then
    log "warning: could not list the upstream test files to rerun without the series (above); their failures all count"
    return 0
  fi
  lines_to_array "$out" todo
  ((${#todo[@]})) || return 0
  mkdir -p "$dir"
  if [[ "$BUILD" != prebuilt ]]; then
    reason="--build source: the base would need a source build of its own"
    log "not rerunning ${todo[*]} without the series ($reason); their failures all count"
  else
    log "=== rerunning without the series, to tell regressions from failures the series did not cause: ${todo[*]}"
    set +e
    wt="$(
      set -e
      unpatched_worktree
    )"
    rc=$?
    set -e
    if ((rc)); then
      reason="the worktree without the series could not be prepared (see the run's messages)"
    elif ! "$PYTHON" "$LIB" prebuilt-links "$wt" "$BASE" >/dev/null; then
      reason="the prebuilt links could not be set up in $wt"
    elif ! where="$(cd "$wt" && PYTHONPATH="$wt${ORIG_PYTHONPATH:+:$ORIG_PYTHONPATH}" \
      "$PYTHON" -c 'import os, torch_xla; print(os.path.realpath(torch_xla.__file__))' 2>"$import_log")"; then
      cat "$import_log" >&2
      reason="import torch_xla failed in $wt"
    elif [[ "$where" != "$wt"/torch_xla/* ]]; then
      reason="import torch_xla loads $where, not $wt/torch_xla"
    else
      log "without the series: worktree $wt detached at $BASE_NAME; import torch_xla -> $where"
    fi
    [[ -z "$reason" ]] || log "warning: cannot rerun without the series: $reason; the failures all count"
  fi
  for rel in "${todo[@]}"; do
    if [[ -n "$reason" ]]; then
      printf '%s\t\t\t%s\n' "$rel" "$reason" >>"$BASELINE_TSV"
    elif [[ ! -f "$wt/$rel" ]]; then
      printf '%s\t\t\t%s\n' "$rel" "$rel is not in $BASE_NAME" >>"$BASELINE_TSV"
    else
      logf="$(log_file "$rel" "$dir")"
      log "=== $rel, WITHOUT the series (log: $logf)"
      status=0
      run_test_file "$wt" "$wt/$rel" "$logf" || status=$?
      printf '%s\t%s\t%s\n' "$rel" "$logf" "$status" >>"$BASELINE_TSV"
    fi
  done
}

BASELINE_TSV=""
if ((UNPATCHED == 0 && WHEEL_MODE == 0)); then
  BASELINE_TSV="$LOG_DIR/without-series.tsv"
  : >"$BASELINE_TSV"
  rerun_without_series
fi

log "=== summary ($MODE, $([[ $WHEEL_MODE == 1 ]] && echo "wheel checkout" || echo "checkout") $TARGET)"
summary_args=(summary "$SUMMARY_TSV")
[[ -z "$BASELINE_TSV" ]] || summary_args+=(--baseline "$BASELINE_TSV")
set +e
"$PYTHON" "$LIB" "${summary_args[@]}" >"$LOG_DIR/summary.txt"
rc=$?
set -e
sed 's/^/[apply_and_test] /' "$LOG_DIR/summary.txt" >&2
exit "$rc"
