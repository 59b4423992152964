#!/usr/bin/env bash
# Regenerates patches/ from a pytorch/xla checkout; see --help.  The work is
# done by tools/regen_patches.py, which needs only git and python3.
exec python3 "$(dirname "$0")/regen_patches.py" "$@"
