# shellcheck shell=bash
# Chooses the Python environment for the tools in this directory.
#
# Sourced by the other scripts:   source "$(dirname "$0")/env.sh"
#
# The pins come from ONE place: install_requires in the [options] section of
# <repo>/setup.cfg.  torch and torch_xla must be pinned there with "==".
#
#   1. If $PYTHON is set, that interpreter must have the torch and torch_xla
#      pins installed (error otherwise).
#   2. Else, if the active `python` (e.g. a venv you activated) has them, it
#      is used as is.  Missing or different *other* pins only give a warning:
#      nothing is ever installed into an environment this script did not
#      create.
#   3. Else <repo>/.venv is used, created with `python3 -m venv` and filled
#      with the pins if needed.  If it exists with other torch/torch_xla
#      versions, that is an error (remove it to start over).
#      A stamp file (.venv/.tools-env-stamp, the sha256 of the pin list) makes
#      later runs skip all checks; it is rewritten when setup.cfg changes.
#
# Exports: REPO_ROOT, PYTHON (absolute path of the chosen interpreter) and
# PJRT_DEVICE (CPU unless already set).  Messages go to stderr as "[env] ...".

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export REPO_ROOT

_env_log() { printf '[env] %s\n' "$*" >&2; }
_env_err() { printf '[env] error: %s\n' "$*" >&2; }

# Prints "key=value" lines describing the interpreter $1: executable, prefix
# and the installed versions of torch and torch_xla (empty if missing).  Reads
# package metadata only; torch is not imported.
_env_describe() {
  "$1" - <<'EOF'
import importlib.metadata as md
import os
import sys

def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return ""

print("executable=" + sys.executable)
print("prefix=" + os.path.realpath(sys.prefix))
print("torch=" + version("torch"))
print("torch_xla=" + version("torch_xla"))
EOF
}

# Prints the pins of setup.cfg, one per line, then a last line "hash=<sha256>".
_env_read_pins() {
  "$1" - "$2" <<'EOF'
import configparser
import hashlib
import re
import sys

path = sys.argv[1]
cfg = configparser.ConfigParser()
if not cfg.read(path):
    sys.exit(f"cannot read {path}")
try:
    raw = cfg.get("options", "install_requires")
except (configparser.NoSectionError, configparser.NoOptionError):
    sys.exit(f"{path} has no install_requires in its [options] section")
pins = []
for line in raw.splitlines():
    line = re.sub(r"\s+#.*$", "", line).strip()  # inline comments
    if line and not line.startswith("#"):
        pins.append(line)
for pin in pins:
    print(pin)
print("hash=" + hashlib.sha256("\n".join(pins).encode()).hexdigest())
EOF
}

# _env_get KEY <<< "$description"
_env_get() { sed -n "s/^$1=//p"; }

# Installed version matches "==X" pin?  PEP 440: a local label (+cpu, +cu128)
# on the installed version still matches a pin without one.
_env_matches() { [[ -n "$1" && "${1%%+*}" == "$2" ]]; }

_env_main() {
  local cfg="$REPO_ROOT/setup.cfg"
  local venv="$REPO_ROOT/.venv"
  local stamp="$venv/.tools-env-stamp"
  local boot="${PYTHON:-python3}"

  if [[ ! -f "$cfg" ]]; then
    _env_err "$cfg not found; it holds the pins (install_requires)."
    return 1
  fi
  if ! command -v "$boot" >/dev/null 2>&1; then
    _env_err "no '$boot' interpreter found on PATH (needed to read setup.cfg and create .venv)."
    return 1
  fi

  local out
  out="$(_env_read_pins "$boot" "$cfg")" || { _env_err "could not read the pins from $cfg"; return 1; }
  local -a pins=()
  local line want_torch="" want_xla="" hash=""
  while IFS= read -r line; do
    case "$line" in
      hash=*) hash="${line#hash=}" ;;
      torch==*) want_torch="${line#torch==}"; pins+=("$line") ;;
      torch_xla==* | torch-xla==*) want_xla="${line#torch*xla==}"; pins+=("$line") ;;
      *) pins+=("$line") ;;
    esac
  done <<<"$out"
  if [[ -z "$want_torch" || -z "$want_xla" ]]; then
    _env_err "$cfg must pin both torch and torch_xla with '==' in [options] install_requires."
    return 1
  fi
  local want="torch==$want_torch and torch_xla==$want_xla"

  # 1 and 2: an interpreter chosen by the user.
  local candidate="" explicit=0
  if [[ -n "${PYTHON:-}" ]]; then
    candidate="$PYTHON"
    explicit=1
  elif command -v python >/dev/null 2>&1; then
    candidate="python"
  fi
  if [[ -n "$candidate" ]]; then
    local desc have_torch have_xla prefix
    if ! desc="$(_env_describe "$candidate" 2>/dev/null)"; then
      if ((explicit)); then
        _env_err "PYTHON=$PYTHON is not a working Python interpreter."
        return 1
      fi
      desc=""
    fi
    have_torch="$(_env_get torch <<<"$desc")"
    have_xla="$(_env_get torch_xla <<<"$desc")"
    prefix="$(_env_get prefix <<<"$desc")"
    if [[ -n "$desc" && "$prefix" == "$(cd "$venv" 2>/dev/null && pwd -P)" ]]; then
      : # it is <repo>/.venv itself (activated): handled below
    elif [[ -n "$desc" ]] && _env_matches "$have_torch" "$want_torch" &&
      _env_matches "$have_xla" "$want_xla"; then
      PYTHON="$(_env_get executable <<<"$desc")"
      export PYTHON
      _env_warn_other_pins "$PYTHON" "${pins[@]}"
      export PJRT_DEVICE="${PJRT_DEVICE:-CPU}"
      return 0
    elif ((explicit)); then
      _env_err "PYTHON=$PYTHON has torch ${have_torch:-<not installed>} and torch_xla ${have_xla:-<not installed>}; this project needs $want (pins in setup.cfg)."
      _env_err "Fix: install those pins into it, or unset PYTHON to use $venv (created automatically)."
      return 1
    elif [[ -n "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ]]; then
      _env_log "the active environment (${VIRTUAL_ENV:-${CONDA_PREFIX:-}}) has torch ${have_torch:-<not installed>}, torch_xla ${have_xla:-<not installed>}, not $want;"
      _env_log "using $venv instead (deactivate to silence this note)."
    fi
  fi

  # 3: <repo>/.venv
  local py="$venv/bin/python"
  if [[ -x "$py" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
    export PYTHON="$py"
    export PJRT_DEVICE="${PJRT_DEVICE:-CPU}"
    return 0 # fast path: checked and installed before, setup.cfg unchanged
  fi

  local creating=0
  if [[ ! -x "$py" ]]; then
    creating=1
    _env_log "creating $venv with $("$boot" -c 'import sys; print(sys.executable)') -m venv"
    "$boot" -m venv "$venv" || { _env_err "python3 -m venv $venv failed"; return 1; }
  fi
  local desc have_torch have_xla
  desc="$(_env_describe "$py")" || { _env_err "$py does not work; remove $venv and rerun."; return 1; }
  have_torch="$(_env_get torch <<<"$desc")"
  have_xla="$(_env_get torch_xla <<<"$desc")"
  if { [[ -n "$have_torch" ]] && ! _env_matches "$have_torch" "$want_torch"; } ||
    { [[ -n "$have_xla" ]] && ! _env_matches "$have_xla" "$want_xla"; }; then
    _env_err "$venv has torch ${have_torch:-<not installed>} and torch_xla ${have_xla:-<not installed>}, but setup.cfg pins $want."
    _env_err "Fix: remove it (rm -rf '$venv') and rerun to recreate it (about 3 minutes and 7 GB),"
    _env_err "     or activate/set PYTHON= to an environment that has $want (deactivate a venv you do not mean to use)."
    return 1
  fi

  if [[ -z "$have_torch" || -z "$have_xla" ]]; then
    local verb="installing"
    ((creating)) && verb="creating .venv: installing"
    _env_log "$verb torch $want_torch + torch_xla $want_xla, about 3 minutes and 7 GB"
  else
    _env_log "checking/installing the pins of setup.cfg into $venv"
  fi
  _env_log "pip install ${pins[*]}"
  "$py" -m pip install --disable-pip-version-check --progress-bar on "${pins[@]}" >&2 || {
    _env_err "pip install failed (see above); nothing was stamped, rerun to retry."
    return 1
  }

  desc="$(_env_describe "$py")"
  have_torch="$(_env_get torch <<<"$desc")"
  have_xla="$(_env_get torch_xla <<<"$desc")"
  if ! _env_matches "$have_torch" "$want_torch" || ! _env_matches "$have_xla" "$want_xla"; then
    _env_err "after pip install, $venv has torch ${have_torch:-<none>} and torch_xla ${have_xla:-<none>}, expected $want."
    return 1
  fi
  printf '%s\n' "$hash" >"$stamp"
  _env_log "$venv is ready ($want)"
  export PYTHON="$py"
  export PJRT_DEVICE="${PJRT_DEVICE:-CPU}"
}

# Warns (does not install) about pins other than torch/torch_xla that a
# user-chosen interpreter does not satisfy.  Uses pip's vendored `packaging`
# to evaluate the requirements; silently skips the check if unavailable.
_env_warn_other_pins() {
  local py="$1"
  shift
  "$py" - "$@" <<'EOF' >&2 || true
import importlib.metadata as md
import sys

try:
    from packaging.requirements import Requirement
except ImportError:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        sys.exit(0)

bad = []
for pin in sys.argv[1:]:
    req = Requirement(pin)
    if req.marker is not None and not req.marker.evaluate():
        continue
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        bad.append(f"{pin} (not installed)")
        continue
    if req.specifier and not req.specifier.contains(have, prereleases=True):
        bad.append(f"{pin} (found {have})")
if bad:
    print(f"[env] warning: {sys.executable} lacks these pins of setup.cfg:")
    for b in bad:
        print(f"[env]   {b}")
    print("[env] install them with:  " + sys.executable + " -m pip install "
          + " ".join(repr(p) if " " in p else p for p in sys.argv[1:]))
EOF
}

# Sourced from a script: `return` fails the `source` (set -e exits); from an
# interactive shell it returns without closing the shell.
# shellcheck disable=SC2317
_env_main || { return 1 2>/dev/null || exit 1; }
