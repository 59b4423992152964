#!/usr/bin/env bash
# Applies patches/series to a pytorch/xla checkout and runs its tests with
# the project's Python (tools/env.sh).  See --help, or tools/apply_and_test.py.
set -euo pipefail
# shellcheck source=tools/env.sh
source "$(dirname "$0")/env.sh"
exec "$PYTHON" "$REPO_ROOT/tools/apply_and_test.py" "$@"
