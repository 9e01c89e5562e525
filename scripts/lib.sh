# scripts/lib.sh: helpers shared by the scripts in this folder. Source it:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Everything here prints to stderr, so that `scripts/run`'s stdout is only the
# script's own output.

LUNA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The Debian packages a build and a full test run need.
# help2man makes the man page, man-db reads it in tests/package; luarocks,
# lintian, bash-completion and file (which CPack needs for dpkg-shlibdeps)
# are for tests/package and scripts/package (dpkg-dev, for dpkg-shlibdeps,
# comes with build-essential).
LUNA_DEPS=(liblua5.4-dev lua5.4 libcmocka-dev cmake pkg-config build-essential libedit-dev libcjson-dev
           help2man man-db luarocks lintian bash-completion file)

luna_say() { printf 'scripts/%s: %s\n' "${0##*/}" "$*" >&2; }
luna_die() { luna_say "$*"; exit 1; }

# Prints the packages of LUNA_DEPS that are not installed, one a line.
luna_missing_deps() {
  local pkg
  for pkg in "${LUNA_DEPS[@]}"; do
    if ! grep -q ' installed$' <<<"$(dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null)"; then
      echo "$pkg"
    fi
  done
}

# Installs whatever of LUNA_DEPS is missing; does nothing (and never touches
# apt) when all are there. Uses sudo only when not root.
luna_deps() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    luna_say "not a Debian system: make sure these are installed: ${LUNA_DEPS[*]}"
    return 0
  fi
  local missing
  mapfile -t missing < <(luna_missing_deps)
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || luna_die "missing ${missing[*]}, and not root and no sudo to install them"
    sudo=(sudo)
  fi
  luna_say "installing ${missing[*]}"
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# luna_build KIND [TARGET]: configures and builds build/KIND (debug, asan,
# tsan, release, or package: a release build for /usr without tests, what
# scripts/package makes the Debian packages from) with CMake, quietly: the
# compiler's output is shown only when the build fails, or its warnings when
# it succeeds.
luna_build() {
  local kind=${1:-debug} target=${2:-} flags
  case "$kind" in
    debug) flags=(-DCMAKE_BUILD_TYPE=Debug -DLUNA_SANITIZE=) ;;
    asan) flags=(-DCMAKE_BUILD_TYPE=Debug -DLUNA_SANITIZE=address) ;;
    tsan) flags=(-DCMAKE_BUILD_TYPE=Debug -DLUNA_SANITIZE=thread) ;;
    release) flags=(-DCMAKE_BUILD_TYPE=Release -DLUNA_SANITIZE=) ;;
    package) flags=(-DCMAKE_BUILD_TYPE=Release -DLUNA_SANITIZE= -DCMAKE_INSTALL_PREFIX=/usr
                    -DLUNA_TESTS=OFF -DLUNA_BENCH=OFF) ;;
    *) luna_die "unknown build kind '$kind' (expected debug, asan, tsan, release or package)" ;;
  esac
  local dir="$LUNA_ROOT/build/$kind" log
  log=$(mktemp)
  if ! cmake -S "$LUNA_ROOT" -B "$dir" "${flags[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    luna_say "configuring build/$kind failed"
    return 1
  fi
  if ! cmake --build "$dir" -j2 ${target:+--target "$target"} >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    luna_say "building build/$kind failed"
    return 1
  fi
  grep -i -A3 'warning:' "$log" >&2 || true
  rm -f "$log"
}
