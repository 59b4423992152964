# shellcheck shell=bash
# Picks the Python for the tools; they source this file.  The pins live in
# one place: [options] install_requires of setup.cfg, each "name==version".
#
#   1. $PYTHON if set; it must have the torch and torch_xla pins.
#   2. Else the active `python` if it has them (nothing is installed there).
#   3. Else <repo>/.venv, created on first use, and given all the pins when
#      it lacks one (the first time about 3 minutes and 7 GB).
#
# Exports REPO_ROOT, PYTHON (absolute) and PJRT_DEVICE (CPU unless set).

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export REPO_ROOT
export PJRT_DEVICE="${PJRT_DEVICE:-CPU}"

# Prints the executable of interpreter $1 if it has the pins $2...
_env_has() {
  "$1" - "${@:2}" 2>/dev/null <<'EOF'
import importlib.metadata as md, sys
for name, version in (pin.split("==") for pin in sys.argv[1:]):
    if md.version(name).split("+")[0] != version:  # "+cpu" is the same
        sys.exit(1)
print(sys.executable)
EOF
}

# Prints the interpreter to use (see above).
_env_pick() {
  local pins core venv="$REPO_ROOT/.venv"
  mapfile -t pins < <(python3 -c 'import configparser, sys
c = configparser.ConfigParser(); c.read(sys.argv[1])
print(c["options"]["install_requires"].strip())' "$REPO_ROOT/setup.cfg")
  mapfile -t core < <(printf '%s\n' "${pins[@]}" | grep -E '^torch(_xla)?==')
  if [[ -n "${PYTHON:-}" ]]; then
    _env_has "$PYTHON" "${core[@]}" && return
    echo "[env] error: PYTHON=$PYTHON lacks ${core[*]} (pins of setup.cfg)" >&2
    return 1
  fi
  _env_has python "${core[@]}" && return
  _env_has "$venv/bin/python" "${pins[@]}" && return
  echo "[env] installing ${pins[*]} into $venv" >&2
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv" >&2 || return
  "$venv/bin/python" -m pip install --disable-pip-version-check "${pins[@]}" >&2 &&
    _env_has "$venv/bin/python" "${pins[@]}"
}

PYTHON="$(_env_pick)" || { echo "[env] error: no Python for the tools" >&2; return 1; }
export PYTHON
