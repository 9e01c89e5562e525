#!/usr/bin/env bash
# tests/mods/mods_cli_test.sh LUNALOOP ROOT CASE: `lunaloop mods`
# (docs/modding.md). Each `case_NAME` function is the ctest test
# mods.cli.NAME (registered by CMakeLists.txt).
set -euo pipefail

LUNALOOP=$1
ROOT=$2
CASE=$3
OUT=$(mktemp)
ERR=$(mktemp)
TMP=$(mktemp -d)
trap 'rm -rf "$OUT" "$ERR" "$TMP"' EXIT

ll() {
  status=0
  "$LUNALOOP" "$@" >"$OUT" 2>"$ERR" </dev/null || status=$?
}

fail() {
  echo "FAIL mods.cli.$CASE: $*"
  echo "--- stdout"; cat "$OUT"
  echo "--- stderr"; cat "$ERR"
  exit 1
}

expect_status() { [ "$status" -eq "$1" ] || fail "exit status $status, expected $1"; }
expect_out() { grep -qE -- "$1" "$OUT" || fail "stdout has no line matching /$1/"; }
expect_err() { grep -qE -- "$1" "$ERR" || fail "stderr has no line matching /$1/"; }
expect_no_err() { ! grep -qE -- "$1" "$ERR" || fail "stderr has a line matching /$1/"; }

# examples/mods: the game and the mod that depends on it run to their end;
# the endless loop and the memory hog are stopped, reported and disabled;
# the run ends by itself, exit 1 since errors were reported.
case_examples() {
  ll mods --fast --memory 16m --budget 2000000 --time-budget 60000 "$ROOT/examples/mods"
  expect_status 1
  expect_out '^\[core\] core 1\.0\.0 starts at frame 0$'
  expect_out '^\[hud\] hud ready; core loaded: true$'
  expect_out '^\[hud\] wave 3: 4 enemies$'
  expect_out '^\[core\] game over, final score 200$'
  expect_out '^\[hud\] core says core\.over: score 200 \(hud showed 200\)$'
  expect_err "^lunaloop: mod 'spinner': task spinner/mod\.lua:5 failed: spinner/mod\.lua:10: instruction budget exceeded \(2000000 instructions\)$"
  expect_err "^lunaloop: mod 'spinner': disabled after 3 overruns"
  expect_err "^lunaloop: mod 'hog': task #2 failed: not enough memory$"
  expect_err "^lunaloop: mod 'hog': disabled after 3 overruns"
  expect_err '^  core 1\.0\.0: loaded, 0 errors'
  expect_err '^  hud 0\.3\.0: loaded, 0 errors'
  expect_err '^  spinner 0\.1\.0: disabled'
  expect_err '^  hog 0\.1\.0: disabled'
}

# The same run twice with --fast and --seed prints the same.
case_repeatable() {
  mkdir -p "$TMP/r"
  printf 'for i = 1, 3 do print(math.random(1000)); task.yield() end\n' >"$TMP/r/mod.lua"
  ll mods --fast --time-budget 60000 --seed 7 "$TMP"
  expect_status 0
  cp "$OUT" "$TMP/first"
  ll mods --fast --time-budget 60000 --seed 7 "$TMP"
  diff -u "$TMP/first" "$OUT" || fail "two runs differ"
  [ "$(wc -l <"$OUT")" -eq 3 ] || fail "expected 3 lines"
}

# --frames stops a mod that would run for ever; exit 0 without errors.
case_frames() {
  mkdir -p "$TMP/f"
  printf 'n = 0\ntask.on(function() n = n + 1 end)\nmods.on_unload(function() print("never") end)\n' >"$TMP/f/mod.lua"
  ll mods --fast --time-budget 60000 --frames 5 "$TMP"
  expect_status 0
  expect_err '^  f 0: loaded, 0 errors'
}

# Two tasks of a mod passing values over a channel for ever: each turn is
# a resume of its own (a fresh budget), so the first frame never ended and
# the host never got control back. A drain of wake-ups stops after
# 100,000 resumes, so the frames end and --frames stops the run, even
# without a time budget (which would end each frame's drain sooner).
case_channel_ping_pong_lets_frames_end() {
  mkdir -p "$TMP/p"
  printf '%s\n' 'local ch = task.channel(1)' \
    'task.spawn(function() while true do ch:send(1) end end)' \
    'task.on("LastUpdate", function() print("frame", task.frame()) end)' \
    'while true do ch:receive() end' >"$TMP/p/mod.lua"
  status=0
  timeout 120 "$LUNALOOP" mods --fast --budget 200000 --time-budget 0 --frames 3 "$TMP" >"$OUT" 2>"$ERR" </dev/null ||
    status=$?
  expect_status 0
  expect_out '^\[p\] frame	3$'
  expect_err '^  p 0: loaded, 0 errors'
}

# Errors raised while the mods unload at the end (their tasks cancelled:
# a __close that runs out of memory or over its budget) are reported before
# the summary, counted in it, and give exit status 1.
case_shutdown_errors() {
  mkdir -p "$TMP/b" "$TMP/m"
  printf '%s\n' 'task.spawn(function()' \
    '  local r <close> = setmetatable({}, {__close = function() while true do end end})' \
    '  task.delay(1000)' 'end)' >"$TMP/b/mod.lua"
  printf '%s\n' 'task.spawn(function()' \
    '  local r <close> = setmetatable({}, {__close = function()' \
    '    local t = {}; for i = 1, 100 do t[i] = string.rep("x", 100000) .. i end' \
    '  end})' \
    '  task.delay(1000)' 'end)' >"$TMP/m/mod.lua"
  ll mods --fast --frames 2 --budget 100000 --time-budget 60000 --memory 1m "$TMP"
  expect_status 1
  expect_err "^lunaloop: mod 'b': to-be-closed variable of task b/mod\.lua:1 failed: b/mod\.lua:2: instruction budget exceeded"
  expect_err "^lunaloop: mod 'm': to-be-closed variable of task m/mod\.lua:1 failed: not enough memory$"
  expect_err '^  b 0: loaded, 1 error,'
  expect_err '^  m 0: loaded, 1 error,'
  grep -q '^lunaloop: mods:$' <<<"$(tail -n 3 "$ERR" | head -n 1)" ||
    fail "the summary is not the last thing on stderr"
}

# After Ctrl-C the mods' tasks are cancelled with an interrupt still
# pending: an ordinary error in an xpcall of a __close handler must get its
# message handler (review: the sandbox's xpcall skipped every handler while
# the interrupt was pending). Only the stop's own error skips it.
case_interrupt_then_xpcall_in_close_handler() {
  mkdir -p "$TMP/x"
  printf '%s\n' 'task.spawn(function()' \
    '  local r <close> = setmetatable({}, {__close = function()' \
    '    print("close", xpcall(error, function(e) return "handled " .. e end, "cx", 0))' \
    '  end})' \
    '  print("waiting")' \
    '  task.delay(100)' 'end)' >"$TMP/x/mod.lua"
  status=0
  timeout --foreground --preserve-status -s INT 1 "$LUNALOOP" mods --time-budget 60000 "$TMP" >"$OUT" 2>"$ERR" </dev/null ||
    status=$?
  expect_status 130
  expect_out '^\[x\] waiting$'
  expect_out '^\[x\] close	false	handled cx$'
}

case_usage_errors() {
  ll mods
  expect_status 2
  expect_err 'missing DIR'
  ll mods --budget 0 "$ROOT/examples/mods"
  expect_status 2
  expect_err "bad value '0' for --budget"
  ll mods --memory lots "$ROOT/examples/mods"
  expect_status 2
  ll mods --time-budget -5 "$ROOT/examples/mods"
  expect_status 2
  expect_err "bad value '-5' for --time-budget \(expected a whole number of milliseconds >= 0\)"
  # the options shared with run are parsed by the same code (options.c)
  ll mods --time-scale 1e300 "$ROOT/examples/mods"
  expect_status 2
  expect_err "bad value '1e300' for --time-scale \(expected a number from 0 to 1e6\)"
  ll mods "$TMP/does-not-exist"
  expect_status 2
  expect_err "cannot read"
  ll mods "$TMP"
  expect_status 2
  expect_err "no mods in"
  ll mods --help
  expect_status 0
  expect_out -- '--max-overruns'
  ll --help
  expect_out 'mods \[options\] DIR'
}

# A dependency cycle is reported naming the mods; the rest runs.
case_cycle() {
  mkdir -p "$TMP/a" "$TMP/b" "$TMP/c"
  printf 'return {name = "a", depends = {"b"}}\n' >"$TMP/a/manifest.lua"
  printf 'return {name = "b", depends = {"a"}}\n' >"$TMP/b/manifest.lua"
  printf 'print("a")\n' >"$TMP/a/mod.lua"
  printf 'print("b")\n' >"$TMP/b/mod.lua"
  printf 'print("c runs")\n' >"$TMP/c/mod.lua"
  ll mods --fast --time-budget 60000 "$TMP"
  expect_status 1
  expect_out '^\[c\] c runs$'
  expect_err "^lunaloop: mod 'a': not loaded: dependency cycle: a -> b -> a$"
}

# What a mod prints and the reports that quote it reach the terminal with
# control characters escaped: a newline or ESC in a print or an error
# message forged "lunaloop: mod ..." lines and sent terminal escapes.
case_control_characters_are_escaped() {
  mkdir -p "$TMP/e"
  printf '%s\n' "print('a\\nlunaloop: mod \\'x\\': forged\\27[2J')" \
    "error('b\\n  x 0: loaded\\27[0m', 0)" >"$TMP/e/mod.lua"
  ll mods --fast "$TMP"
  expect_status 1
  expect_out '^\[e\] a\\nlunaloop: mod '"'x'"': forged\\x1b\[2J$'
  expect_err "^lunaloop: mod 'e': task main failed: b\\\\n  x 0: loaded\\\\x1b\\[0m$"
  ! grep -q $'\x1b' "$OUT" "$ERR" || fail "an ESC reached the output"
  ! grep -q '^lunaloop: mod .x.: forged' "$OUT" || fail "a forged line"
  ! grep -q '^  x 0: loaded' "$ERR" || fail "a forged summary line"
}

"case_$CASE"
