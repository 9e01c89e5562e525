#!/usr/bin/env bash
# tests/package/package_test.sh BUILD SOURCE VERSION CASE: what the release
# ships besides the libraries: one version everywhere, the rockspecs and a
# LuaRocks install, the man page and the bash completion. Each `case_NAME`
# function below is registered by CMakeLists.txt as the ctest test
# package.NAME (label "package"); add a function to add a test. The Debian
# packages are tried by scripts/package, which installs them on the system.
set -euo pipefail

BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
VERSION=$3
CASE=$4
LUNALOOP=$BUILD/lunaloop
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL package.$CASE: $*"
  exit 1
}

# same WHAT VALUE: VALUE is the project version.
same() {
  [ "$2" = "$VERSION" ] || fail "$1 says '$2', CMakeLists.txt says '$VERSION'"
}

# Every place that states the version says the project version of
# CMakeLists.txt: they are all generated from it, and a hand-written copy
# anywhere would drift at the next release.
case_version_agrees() {
  local h=$BUILD/include/lunaloop/version.h
  same "version.h" "$(awk '/^#define LUNA_VERSION_(MAJOR|MINOR|PATCH) / { v = v sep $3; sep = "." } END { print v }' "$h")"
  same "lunaloop --version" "$("$LUNALOOP" --version | sed -E 's/^lunaloop ([^ ]+) .*/\1/')"
  same "task.version in lua5.4" "$(LUA_CPATH="$BUILD/?.so" lua5.4 -e 'io.write(require("lunaloop").version)')"
  same "task.version in lunaloop run" "$(printf 'io.write(task.version)\n' >"$TMP/v.lua" && "$LUNALOOP" run --fast "$TMP/v.lua")"
  same "lunaloop.pc" "$(sed -n 's/^Version: //p' "$BUILD/lunaloop.pc")"
  same "lunaloopConfigVersion.cmake" "$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' "$BUILD/lunaloopConfigVersion.cmake")"
  same "the Debian packages (CPackConfig.cmake)" "$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$BUILD/CPackConfig.cmake")"
  local spec=$SRC/rockspecs/lunaloop-$VERSION-1.rockspec
  [ -f "$spec" ] || fail "no rockspec for this version: $spec"
  same "$spec" "$(sed -n 's/^version = "\(.*\)-1"$/\1/p' "$spec")"
  [ "$(sed -n 's/^version = "\(.*\)"$/\1/p' "$SRC/lunaloop-scm-1.rockspec")" = scm-1 ] ||
    fail "lunaloop-scm-1.rockspec does not say version scm-1"
}

# The two rockspecs are what cmake/lunaloop.rockspec.in gives for this
# version (so they differ only in version and source), no rockspec of
# another version lies around, and `luarocks lint` accepts them.
case_rockspecs_current() {
  cmake -DVERSION="$VERSION" "-DDESCRIPTION=$(sed -n 's/^Description: //p' "$BUILD/lunaloop.pc")" \
    -DHOMEPAGE="$(sed -n 's/^set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "\(.*\)")$/\1/p' "$BUILD/CPackConfig.cmake")" \
    "-DLICENSE=$(sed -n 's/^set(LUNA_LICENSE "\(.*\)")$/\1/p' "$SRC/cmake/package.cmake")" \
    -DOUTPUT_DIR="$TMP" -DCHECK_DIR="$SRC" -P "$SRC/cmake/rockspecs.cmake" ||
    fail "the rockspecs are not current (above)"
  if command -v luarocks >/dev/null; then
    for spec in "$SRC/lunaloop-scm-1.rockspec" "$SRC/rockspecs/lunaloop-$VERSION-1.rockspec"; do
      luarocks lint "$spec" || fail "luarocks lint $spec (above)"
    done
  fi
}

# `luarocks make` of the scm rockspec in a clean copy of the sources (what a
# clone holds: the tracked files, as they are in the working tree), into a
# tree under the build folder; then a stock lua5.4, in an environment with
# nothing but what `luarocks path` gives, requires the module from that tree
# and runs tasks on it.
case_luarocks() {
  local copy=$TMP/src tree=$BUILD/rocktree commit
  mkdir -p "$copy"
  if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
    # A commit of the working tree as it is, made without touching the index
    # or any branch (empty when nothing changed: then HEAD).
    commit=$(git -C "$SRC" stash create)
    git -C "$SRC" archive "${commit:-HEAD}" | tar -x -C "$copy"
  else
    tar -C "$SRC" --exclude=./build -c . | tar -x -C "$copy"
  fi
  rm -rf "$tree"
  (cd "$copy" && luarocks --lua-version 5.4 make --tree "$tree" lunaloop-scm-1.rockspec) \
    >"$TMP/luarocks.log" 2>&1 || { cat "$TMP/luarocks.log"; fail "luarocks make"; }
  [ -f "$(find "$tree" -path '*/lunaloop/scm-1/share/lunaloop/types.lua')" ] ||
    fail "the rock lacks the LuaLS definitions share/lunaloop/types.lua"
  local paths
  paths=$(luarocks --lua-version 5.4 path --tree "$tree")
  env -i PATH=/usr/bin:/bin bash -c "$paths"'
    TREE='"$tree"' VERSION='"$VERSION"' lua5.4 - <<"LUA"
local task = require "lunaloop"
local found = package.searchpath("lunaloop", package.cpath)
assert(found == os.getenv("TREE") .. "/lib/lua/5.4/lunaloop.so", "found " .. tostring(found))
assert(task.version == os.getenv("VERSION"), task.version)
local log = {}
task.spawn(function() task.delay(0.2); log[#log + 1] = "delay@" .. task.frame() end)
task.spawn(function() task.yield("LastUpdate"); log[#log + 1] = "yield@" .. task.frame() end)
assert(task.run{fast = true, hz = 10} == 0)
assert(table.concat(log, " ") == "yield@1 delay@2", table.concat(log, " "))
LUA' || fail "lua5.4 with the rock's paths"
}

# The long options that a --help text lists, one a line.
options_of() {
  grep -oE -- '(^|[ ,])--?[a-z][-a-z]*' | sed -E 's/^[ ,]//' | sort -u
}

# The options that a --help text lists for the command $1: those under the
# headings "Options of ...:" that name it.
options_for() {
  awk -v c="$1" '
    /^Options of / { on = ($0 ~ (" " c "[,: ]")); next }
    /^[^ ]/ { on = 0 }
    on' | options_of
}

# The man page renders without a warning (groff -ww, and man itself), and
# every option of --help and of mods --help is in it.
case_man_page() {
  local page=$BUILD/lunaloop.1 text
  [ -f "$page" ] || fail "no $page (is help2man installed?)"
  [ -f "$page.gz" ] && cmp -s "$page" <(gzip -dc "$page.gz") || fail "lunaloop.1.gz is not lunaloop.1"
  groff -man -ww -z "$page" 2>"$TMP/groff.err" || fail "groff failed: $(cat "$TMP/groff.err")"
  [ ! -s "$TMP/groff.err" ] || fail "groff warns: $(cat "$TMP/groff.err")"
  text=$(MANWIDTH=80 man --warnings -l "$page" 2>"$TMP/man.err")
  [ ! -s "$TMP/man.err" ] || fail "man warns: $(cat "$TMP/man.err")"
  grep -q '^SYNOPSIS' <<<"$text" || fail "the page has no SYNOPSIS"
  local o n=0
  while read -r o; do
    grep -qF -- "$o" <<<"$text" || fail "$o is in --help but not in the man page"
    n=$((n + 1))
  done < <({ "$LUNALOOP" --help; "$LUNALOOP" mods --help; } | options_of)
  [ "$n" -ge 14 ] || fail "only $n options found in --help"
  for cmd in run repl mods; do
    grep -qE "lunaloop $cmd" <<<"$text" || fail "the page has no synopsis for $cmd"
  done
}

# The help text, the one source of the man page and the completion, is true
# to the parsers: every option a getopt table of src/cli declares is in
# --help, and every option --help lists under a command is one that the
# command takes (with a value when the help shows one: `CMD --opt 1 --help`
# exits 0 where an unknown option would exit 2).
case_help_matches_parsers() {
  local help o cmd
  help=$("$LUNALOOP" --help)
  while read -r o; do
    grep -qE -- "(^| )--$o( |,|$)" <<<"$help" || fail "--$o is parsed (src/cli) but not in --help"
  done < <(grep -ohE '\{"[a-z][-a-z]*", (no|required|optional)_argument' "$SRC"/src/cli/*.c |
    sed -E 's/^\{"([^"]*)".*/\1/' | sort -u)
  for cmd in run repl mods; do
    while read -r o; do
      local value=()
      grep -qE -- "^  (-h, )?$o [A-Z]" <<<"$help" && value=(1)
      "$LUNALOOP" "$cmd" "$o" "${value[@]}" --help >/dev/null 2>"$TMP/err" ||
        fail "--help lists $o for $cmd, but $cmd refuses it: $(cat "$TMP/err")"
    done < <(options_for "$cmd" <<<"$help")
  done
}

# complete: COMPREPLY for the command line "$@" (the cursor on the last word).
complete_words() {
  (cd "$TMP/files" && bash -c '
    . "$1"; shift
    COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _lunaloop
    ((${#COMPREPLY[@]} == 0)) || printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' _ "$BUILD/lunaloop.bash" "$@")
}

# expect_completion "WANT" WORD...: completing the words gives WANT (sorted,
# space-separated).
expect_completion() {
  local want=$1 got
  shift
  got=$(complete_words "$@")
  [ "$got" = "$want" ] || fail "completing '$*' gave '$got', expected '$want'"
}

# The bash completion completes the commands, each command's own options
# (repl has no --frames, only mods has --watch), nothing after an option that
# takes a number, files for run's SCRIPT, its arguments and --trace, folders
# for mods; and it offers exactly the options --help lists.
case_completion() {
  local f=$BUILD/lunaloop.bash
  [ -f "$f" ] || fail "no $f"
  [ "$(bash -c '. "$1"; complete -p lunaloop' _ "$f")" = "complete -F _lunaloop lunaloop" ] ||
    fail "complete -p lunaloop: $(bash -c '. "$1"; complete -p lunaloop' _ "$f" 2>&1)"
  mkdir -p "$TMP/files/mods.d"
  touch "$TMP/files/game.lua" "$TMP/files/my level*.lua"
  expect_completion "--help --version -h mods repl run " lunaloop ""
  expect_completion "repl run " lunaloop r
  expect_completion "--fast --fixed-hz --frames " lunaloop run --f
  expect_completion "--fast --fixed-hz " lunaloop repl --f
  expect_completion "--fast --fixed-hz --frames " lunaloop --help mods --f
  expect_completion "--watch " lunaloop mods --w
  expect_completion "" lunaloop repl --w
  expect_completion "" lunaloop run --hz ""
  expect_completion "game.lua mods.d my level*.lua " lunaloop run --hz 30 ""
  expect_completion "my level*.lua " lunaloop run my
  expect_completion "game.lua mods.d my level*.lua " lunaloop run --trace ""
  expect_completion "game.lua mods.d my level*.lua " lunaloop run game.lua ""
  expect_completion "" lunaloop run game.lua --f
  expect_completion "mods.d " lunaloop mods --memory 1m ""
  expect_completion "" lunaloop mods mods.d ""
  expect_completion "" lunaloop frobnicate --
  local cmd want got
  for cmd in run repl mods; do
    got=$(complete_words lunaloop "$cmd" - | tr ' ' '\n' | grep . | sort -u)
    want=$("$LUNALOOP" --help | options_for "$cmd")
    [ "$got" = "$want" ] || fail "$cmd: completion offers $(echo $got), --help lists $(echo $want)"
  done
}

"case_$CASE"
echo "ok package.$CASE"
