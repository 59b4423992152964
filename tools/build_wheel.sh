#!/usr/bin/env bash
# Builds dist/torch_xla-2.9.0+fix8832-<tags>.whl: the released torch_xla
# 2.9.0 wheel with patches/series applied to its Python files.
#
#   tools/build_wheel.sh [--python 3.10|3.11|3.12|3.13] [--wheel FILE]
#                        [--dist DIR]
#
# The wheel comes from the package index for --python (default: the tools'
# Python, tools/env.sh) or is FILE.  `wheel unpack` opens it; the series is
# applied with `git am` to its torch_xla/ (the same patches; their test files
# are left out); the version gets the local label +fix8832 and the
# .dist-info a file PATCHES naming the patches; `wheel pack` writes it again
# with a new RECORD (hashes, sizes).  The native _XLAC and every file the
# series does not change are as released.  Without the PyTorch patches
# (patches/pytorch), which patch torch, see README.
set -euo pipefail
# shellcheck source=tools/env.sh
source "$(dirname "$0")/env.sh"
die() { echo "build_wheel: error: $*" >&2; exit 1; }

py=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
wheel= dist=$REPO_ROOT/dist
while (($#)); do
  case "$1" in
    --python) py=${2:?--python needs a version}; shift 2 ;;
    --wheel) wheel=$(realpath "${2:?--wheel needs a file}"); shift 2 ;;
    --dist) dist=$(realpath -m "${2:?--dist needs a directory}"); shift 2 ;;
    *) die "unknown argument $1 (see the top of $0)" ;;
  esac
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z $wheel ]]; then
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: \
    --python-version "$py" -d "$tmp/download" torch_xla==2.9.0 2>"$tmp/pip" ||
    die "no torch_xla 2.9.0 wheel for Python $py on the package index" \
      "(2.9.0 has 3.10 to 3.13)"
  wheel=$(ls "$tmp"/download/*.whl)
fi
[[ $(basename "$wheel") == torch_xla-2.9.0-*.whl ]] ||
  die "$(basename "$wheel") is not a torch_xla 2.9.0 wheel"

"$PYTHON" -m wheel unpack -d "$tmp" "$wheel" >/dev/null 2>&1 ||
  die "$(basename "$wheel") is not a wheel that unpacks"
root=$tmp/torch_xla-2.9.0
[[ -d $root/torch_xla ]] || die "$(basename "$wheel") has no torch_xla/"
git -C "$root" init -q
git -C "$root" add -A
git -C "$root" -c user.name=build_wheel -c user.email=build_wheel@localhost \
  commit -q -m "torch_xla 2.9.0 as released"
mapfile -t patches < <(grep -v '^#' "$REPO_ROOT/patches/series" | grep .)
git -C "$root" -c user.name=build_wheel -c user.email=build_wheel@localhost \
  -c core.hooksPath=/dev/null am -q --include='torch_xla/*' \
  "${patches[@]/#/$REPO_ROOT/patches/}" >"$tmp/am" 2>&1 ||
  die "the series does not apply to $(basename "$wheel"): $(grep -m1 -i \
    'error\|patch failed' "$tmp/am")"
rm -rf "$root/.git"

[[ -f $root/torch_xla-2.9.0.dist-info/METADATA ]] ||
  die "$(basename "$wheel") has no torch_xla-2.9.0.dist-info"
info=$root/torch_xla-2.9.0+fix8832.dist-info
mv "$root/torch_xla-2.9.0.dist-info" "$info"
sed -i 's/^Version: 2\.9\.0$/Version: 2.9.0+fix8832/' "$info/METADATA"
{
  echo "torch_xla 2.9.0 with the fix of pytorch/xla#8832, patches applied:"
  printf '%s\n' "${patches[@]}"
} >"$info/PATCHES"
mkdir -p "$tmp/dist" "$dist"
"$PYTHON" -m wheel pack -d "$tmp/dist" "$root" >/dev/null
built=$(basename "$tmp"/dist/*.whl)
mv "$tmp/dist/$built" "$dist/"
echo "$dist/$built"
