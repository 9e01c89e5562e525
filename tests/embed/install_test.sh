#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR: installs the build into a temporary
# prefix with `cmake --install`, checks the installed files, builds the tiny
# consumer of tests/embed/consumer out of tree with CMake (find_package,
# shared and static) and with pkg-config, runs them, and runs a stock lua5.4
# that requires the installed module, spawns tasks and drives frames.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
say() { printf 'install_test: %s\n' "$*"; }
fail() { say "FAIL: $*"; exit 1; }

say "cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "install"; }
for f in include/lunaloop.h include/lunaloop_lua.h include/lunaloop/promise.h \
         include/lunaloop/version.h lib/liblunaloop.a lib/liblunaloop.so \
         lib/lua/5.4/lunaloop.so lib/pkgconfig/lunaloop.pc bin/lunaloop \
         lib/cmake/lunaloop/lunaloopConfig.cmake lib/cmake/lunaloop/lunaloopConfigVersion.cmake \
         share/lunaloop/types.lua share/bash-completion/completions/lunaloop; do
  [ -e "$prefix/$f" ] || fail "missing $f"
done
# The man page is built when help2man is there (cmake/docs.cmake).
if [ -e "$build/lunaloop.1.gz" ]; then
  [ -e "$prefix/share/man/man1/lunaloop.1.gz" ] || fail "missing share/man/man1/lunaloop.1.gz"
  [ "$(MANPATH="$prefix/share/man" man -w lunaloop)" = "$prefix/share/man/man1/lunaloop.1.gz" ] ||
    fail "man does not find the installed page in $prefix/share/man"
fi
# The shared library exports the public API only (the two module openers,
# lunaloop and lunaloop.roblox, and luna_*).
if nm -D --defined-only "$prefix/lib/liblunaloop.so" | awk '{print $3}' | grep -vE '^(luna_|luaopen_lunaloop$|luaopen_lunaloop_roblox$)'; then
  fail "liblunaloop.so exports symbols outside the public API (above)"
fi

say "CMake consumer (find_package(lunaloop), shared and static)"
cmake -S "$src/tests/embed/consumer" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "configure the CMake consumer"; }
cmake --build "$tmp/cmake" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build the CMake consumer"; }
"$tmp/cmake/consumer_shared"
"$tmp/cmake/consumer_static"
# (grep -q on a pipe can stop reading early; under pipefail the writer's
# SIGPIPE would then fail the test at random: read the whole output first)
grep -q "$prefix/lib/liblunaloop.so" <<<"$(ldd "$tmp/cmake/consumer_shared")" || fail "consumer_shared does not use the installed liblunaloop.so"
if grep -q liblunaloop <<<"$(ldd "$tmp/cmake/consumer_static")"; then fail "consumer_static links liblunaloop.so"; fi

say "pkg-config consumer"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion lunaloop)" = "$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/lunaloop.pc")" ] || fail "pkg-config --modversion"
# shellcheck disable=SC2046
cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -o "$tmp/consumer_pc" \
  "$src/tests/embed/consumer/consumer.c" $(pkg-config --cflags --libs lunaloop) -lpthread \
  -Wl,-rpath,"$(pkg-config --variable=libdir lunaloop)" || fail "build with pkg-config"
"$tmp/consumer_pc"

say "stock lua5.4 with the installed module"
# With the prefix /usr/local, lua5.4's default package.cpath finds the module:
# the same path, with the temporary prefix in place of /usr/local.
lua5.4 -e "assert(package.cpath:find('/usr/local/lib/lua/5.4/?.so', 1, true), 'lua5.4 does not search /usr/local/lib/lua/5.4')"
LUNA_PREFIX="$prefix" lua5.4 - <<'LUA'
package.cpath = package.cpath:gsub("/usr/local/", os.getenv("LUNA_PREFIX") .. "/")
package.cpath = package.cpath:gsub("%./%?%.so;?", "")
local task = require "lunaloop"
assert(package.searchpath("lunaloop", package.cpath):find(os.getenv("LUNA_PREFIX"), 1, true))
local log = {}
for i = 1, 3 do
  task.spawn(function() task.delay(0.1 * i); log[#log + 1] = i .. "@" .. task.frame() end)
end
local code = task.run{fast = true, hz = 10}
assert(code == 0, "task.run returned " .. tostring(code))
assert(table.concat(log, " ") == "1@1 2@2 3@3", table.concat(log, " "))
print("install_test: lua5.4 required lunaloop " .. task.version .. ", ran " .. #log .. " tasks")
LUA
say "ok"
