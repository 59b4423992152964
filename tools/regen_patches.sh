#!/usr/bin/env bash
# Regenerates patches/ from a working branch on a pytorch/xla checkout.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: tools/regen_patches.sh --checkout DIR [--branch fix-8832] [--patches DIR]

Writes one patch per commit of BASE..BRANCH of the checkout into patches/
(BASE: tag v2.9.0, else commit 5fab7053df86c8d503b98d9e7202ca8b8d4978c7),
removes patch files that are no longer part of the series, rewrites
patches/series (keeping its leading comment block) and runs
tools/check_series_sync.py.

The output is deterministic (same commits -> same bytes): `git format-patch`
with --zero-commit (no commit ids in the "From" lines), --no-signature (no git
version), -N (plain "[PATCH]" subjects, so adding a patch does not rewrite the
others), --abbrev=12 (same "index" lines whatever the repository size), the
default --stat, and user settings that change diffs overridden.  File names
keep the numbering 0001-..., 0002-...

Use a real pytorch/xla checkout when the series changes files that a
checkout built from the wheel lacks (test/run_tests.sh): regenerating from
the wheel checkout would drop those changes, so it is refused.

Options:
  --checkout DIR   the checkout holding the branch (required)
  --branch NAME    branch to export (default: fix-8832)
  --patches DIR    patch directory to rewrite (default: <repo>/patches)
  --tests-root DIR directory whose test/ the series must match, passed to
                   check_series_sync.py (default: <repo>; for tests)
  -h, --help       show this help
EOF
}

log() { printf '[regen_patches] %s\n' "$*" >&2; }
die() {
  printf '[regen_patches] error: %s\n' "$*" >&2
  exit 1
}

REPO_ROOT="$(cd "$(dirname "$0")/.." && pwd -P)"
BASE_TAG=v2.9.0
BASE_COMMIT=5fab7053df86c8d503b98d9e7202ca8b8d4978c7
CHECKOUT=""
BRANCH=fix-8832
PATCH_DIR="$REPO_ROOT/patches"
TESTS_ROOT="$REPO_ROOT"
while (($#)); do
  case "$1" in
    --checkout) CHECKOUT="${2:?--checkout needs a directory}"; shift 2 ;;
    --checkout=*) CHECKOUT="${1#*=}"; shift ;;
    --branch) BRANCH="${2:?--branch needs a name}"; shift 2 ;;
    --branch=*) BRANCH="${1#*=}"; shift ;;
    --patches) PATCH_DIR="${2:?--patches needs a directory}"; shift 2 ;;
    --patches=*) PATCH_DIR="${1#*=}"; shift ;;
    --tests-root) TESTS_ROOT="${2:?--tests-root needs a directory}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ -n "$CHECKOUT" ]] || die "--checkout DIR is required (see --help)"
[[ -d "$CHECKOUT" ]] || die "--checkout $CHECKOUT: no such directory"
CHECKOUT="$(cd "$CHECKOUT" && pwd -P)"
git -C "$CHECKOUT" rev-parse --git-dir >/dev/null 2>&1 || die "$CHECKOUT is not a git checkout"
[[ -d "$PATCH_DIR" ]] || die "patch directory $PATCH_DIR not found"
PATCH_DIR="$(cd "$PATCH_DIR" && pwd -P)"
LIB="$REPO_ROOT/tools/series_lib.py"

if BASE="$(git -C "$CHECKOUT" rev-parse -q --verify "refs/tags/$BASE_TAG^{commit}")"; then
  BASE_NAME="tag $BASE_TAG"
elif BASE="$(git -C "$CHECKOUT" rev-parse -q --verify "$BASE_COMMIT^{commit}")"; then
  BASE_NAME="commit $BASE_COMMIT"
else
  die "$CHECKOUT has neither the tag $BASE_TAG nor commit $BASE_COMMIT"
fi
TIP="$(git -C "$CHECKOUT" rev-parse -q --verify "refs/heads/$BRANCH^{commit}")" ||
  die "$CHECKOUT has no branch $BRANCH"
git -C "$CHECKOUT" merge-base --is-ancestor "$BASE" "$TIP" ||
  die "$BRANCH does not descend from $BASE_NAME; rebase it onto $BASE_TAG first"
if [[ -n "$(git -C "$CHECKOUT" rev-list --merges "$BASE..$TIP")" ]]; then
  die "$BASE_NAME..$BRANCH contains merge commits, which format-patch cannot export; rebase to a linear history"
fi
if [[ "$(git -C "$CHECKOUT" symbolic-ref -q HEAD || true)" == "refs/heads/$BRANCH" ]] &&
  { ! git -C "$CHECKOUT" diff --quiet || ! git -C "$CHECKOUT" diff --cached --quiet; }; then
  log "warning: $CHECKOUT has uncommitted changes; only committed work is exported"
fi

# A checkout built from the wheel lacks test/run_tests.sh and the other
# non-torch_xla files; the current series' changes to them would be lost.
if ! git -C "$CHECKOUT" cat-file -e "$BASE:test/run_tests.sh" 2>/dev/null; then
  out="$(python3 "$LIB" series "$PATCH_DIR")" || die "cannot read $PATCH_DIR/series"
  if [[ -n "$out" ]]; then
    mapfile -t current <<<"$out"
    lost="$(cd "$CHECKOUT" && python3 "$LIB" wheel-missing "$BASE" "${current[@]}")" ||
      die "cannot list the files the current series touches"
    if [[ -n "$lost" ]]; then
      die "$CHECKOUT is built from the wheel and lacks $(tr '\n' ' ' <<<"$lost")which the current series changes; regenerate from a real pytorch/xla checkout (apply there with tools/apply_and_test.sh --checkout /path/to/xla, commit, then pass --checkout /path/to/xla here)"
    fi
  fi
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
git -C "$CHECKOUT" \
  -c diff.noprefix=false -c diff.mnemonicPrefix=false -c diff.relative=false \
  -c diff.algorithm=myers -c diff.renames=true -c diff.orderFile=/dev/null \
  -c diff.suppressBlankEmpty=false \
  -c format.coverLetter=false -c format.thread=false \
  -c format.forceInBodyFrom=false -c format.useAutoBase=false \
  -c core.quotePath=true -c core.abbrev=12 \
  format-patch -q --zero-commit --no-signature -N --abbrev=12 --no-attach \
  --no-cover-letter --no-thread --subject-prefix=PATCH --no-base \
  -o "$TMP" "$BASE..$TIP" >/dev/null

mapfile -t NEW < <(cd "$TMP" && find . -maxdepth 1 -name '*.patch' -printf '%f\n' | LC_ALL=C sort)
for f in "$PATCH_DIR"/*.patch; do
  [[ -e "$f" ]] || continue
  name="$(basename "$f")"
  keep=0
  for n in "${NEW[@]}"; do [[ "$n" == "$name" ]] && keep=1; done
  if ((!keep)); then
    rm -f "$f"
    log "removed stale $name"
  fi
done
for n in "${NEW[@]}"; do
  if [[ -f "$PATCH_DIR/$n" ]] && cmp -s "$TMP/$n" "$PATCH_DIR/$n"; then
    log "unchanged $n"
  else
    cp "$TMP/$n" "$PATCH_DIR/$n"
    log "wrote $n"
  fi
done

# series: keep the leading comment block, then the patches in order.
SERIES_TMP="$TMP/series"
REGEN_LIB_DIR="$REPO_ROOT/tools" python3 - "$PATCH_DIR" >"$SERIES_TMP" <<'EOF'
import os, sys
sys.path.insert(0, os.environ["REGEN_LIB_DIR"])
import series_lib
for line in series_lib.series_leading_comments(sys.argv[1]):
    sys.stdout.write(line)
EOF
((${#NEW[@]} == 0)) || printf '%s\n' "${NEW[@]}" >>"$SERIES_TMP"
if cmp -s "$SERIES_TMP" "$PATCH_DIR/series"; then
  log "series unchanged (${#NEW[@]} patch(es) from $BASE_NAME..$BRANCH)"
else
  cp "$SERIES_TMP" "$PATCH_DIR/series"
  log "rewrote series (${#NEW[@]} patch(es) from $BASE_NAME..$BRANCH)"
fi

SYNC_ARGS=(--patches "$PATCH_DIR" --tests-root "$TESTS_ROOT")
if git -C "$CHECKOUT" cat-file -e "$BASE:test/run_tests.sh" 2>/dev/null; then
  SYNC_ARGS+=(--checkout "$CHECKOUT")
fi
log "checking that the series' tests match $TESTS_ROOT/test"
python3 "$REPO_ROOT/tools/check_series_sync.py" "${SYNC_ARGS[@]}"
