#!/usr/bin/env bash
# Runs the tooling's tests (tools/tests, see [tool:pytest] in setup.cfg) with
# the project's Python environment (tools/env.sh).  Arguments go to pytest,
# e.g.  tools/test.sh -k apply -x
set -euo pipefail
# shellcheck source=tools/env.sh
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"
exec "$PYTHON" -m pytest -v "$@"
