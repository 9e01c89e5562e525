#!/usr/bin/env bash
# bench/suite.sh [--quick] [--no-scaling] LUNA_BENCH: runs every workload of
# the benchmark suite with the luna_bench program given, prints one line per
# measurement (see bench/bench.h), then the table of ratios against the limit
# measured in this same run, the targets of issue #5 met or missed, and (full
# runs) the scaling of W1 and W2_frame with the number of tasks.
#
# --quick: small sizes and one repetition, for scripts/test (ctest label
# "bench"); it checks that every benchmark still runs and asserts nothing
# about time. scripts/bench runs the full suite on a Release build.
#
# A peer whose Lua module is missing (luv, cqueues) is skipped with a note.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
quick=0
scaling=1
while [ $# -gt 1 ]; do
  case "$1" in
    --quick) quick=1; scaling=0 ;;
    --no-scaling) scaling=0 ;;
    *) echo "usage: bench/suite.sh [--quick] [--no-scaling] LUNA_BENCH" >&2; exit 2 ;;
  esac
  shift
done
[ $# -eq 1 ] || { echo "usage: bench/suite.sh [--quick] [--no-scaling] LUNA_BENCH" >&2; exit 2; }
bin=$1
[ -x "$bin" ] || { echo "bench/suite.sh: $bin is not an executable" >&2; exit 2; }

note() { printf 'bench: %s\n' "$*" >&2; }

# Sizes: the issue's, or small ones for the quick mode.
if [ "$quick" -eq 1 ]; then
  reps=(--quick --reps 1)
  N_W1=200 N_W2=1000 N_STEADY=200 N_FRAME=1000 N_W3=5000 N_W4=1000 N_W5=10000 N_W6=200
  N_HOSTILE=5
else
  reps=(--reps 3)
  N_W1=10000 N_W2=100000 N_STEADY=10000 N_FRAME=100000 N_W3=1000000 N_W4=100000 N_W5=1000000 N_W6=10000
  N_HOSTILE=120
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT

# run ARGS...: one measurement; its line goes to stdout and to the results.
run() {
  local line
  line=$("$bin" "$@") || { note "failed: luna_bench $*"; return 1; }
  [ -n "$line" ] || return 0
  printf '%s\n' "$line" | tee -a "$results"
}

impls=(lunaloop purelua)
for peer in luv cqueues; do
  if "$bin" probe "$peer" 2>/dev/null; then
    impls+=("$peer")
  else
    note "note: the Lua 5.4 module '$peer' is not installed (Debian: lua-$peer): $peer skipped"
  fi
done

# lua_impl IMPL WORKLOAD N: the Lua-side implementation IMPL (its script is
# bench/<family>.lua, the family being IMPL up to its first '_').
lua_impl() {
  local impl=$1 family=${1%%_*}
  run "${reps[@]}" lua "$impl" "$here/$family.lua" "$2" "$3"
}

# workload NAME N [EXTRA_IMPLS...]: the limit and every implementation.
workload() {
  local name=$1 n=$2 impl
  shift 2
  run "${reps[@]}" limit "$name" "$n"
  for impl in "${impls[@]}" "$@"; do
    lua_impl "$impl" "$name" "$n"
  done
}

started=$(date +%s)
workload W1_yield "$N_W1"
workload W2_sleepers "$N_W2"
run "${reps[@]}" limit_task W2_sleepers "$N_W2"
workload W2_steady "$N_STEADY"
for n in "$N_FRAME" $((2 * N_FRAME)); do
  for impl in "${impls[@]}"; do lua_impl "$impl" W2_frame "$n"; done
done
workload W3_churn "$N_W3"
run "${reps[@]}" limit_task W3_churn "$N_W3"
workload W4_memory "$N_W4"
run "${reps[@]}" limit_task W4_memory "$N_W4"
run "${reps[@]}" inbox lunaloop "$N_W5"
run "${reps[@]}" inbox mutex "$N_W5"
workload W6_update "$N_W6" lunaloop_tasks purelua_pcall
# Hostile mods (bench/hostile.c): not a ratio against the limit; listed
# again after the targets.
hostile=$("$bin" hostile "$N_HOSTILE") ||
  note "failed: luna_bench hostile $N_HOSTILE"
printf '%s\n' "$hostile"

# Scaling: W1 (limit and lunaloop) and W2_frame (lunaloop) against N.
scale_ns=(1000 10000 100000 1000000)
scaling_out=$(mktemp)
trap 'rm -f "$results" "$scaling_out"' EXIT
if [ "$scaling" -eq 1 ]; then
  for n in "${scale_ns[@]}"; do
    # Best of 3, but a single run at 1,000,000 tasks (seconds each).
    r=3
    [ "$n" -lt 1000000 ] || r=1
    "$bin" --reps "$r" limit W1_yield "$n" | sed 's/^/scaling: /' | tee -a "$scaling_out"
    "$bin" --reps "$r" lua lunaloop "$here/lunaloop.lua" W1_yield "$n" | sed 's/^/scaling: /' | tee -a "$scaling_out"
    "$bin" --reps "$r" lua lunaloop "$here/lunaloop.lua" W2_frame "$n" | sed 's/^/scaling: /' | tee -a "$scaling_out"
  done
fi
elapsed=$(( $(date +%s) - started ))

# ---- the table -----------------------------------------------------------------
echo
echo "ratios against the limit, measured in this run (ns_per_op; W4: bytes_per_task;"
echo "W5: against the mutex queue; lower is better; '-': does not map)"
awk -v frame_n="$N_FRAME" '
  function field(name,   i, kv) {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
    return "-"
  }
  {
    w = field("workload"); im = field("impl"); n = field("n")
    v = (w == "W4_memory") ? field("bytes_per_task") : field("ns_per_op")
    if (w == "W2_frame") { frame[n "," im] = v; frame_ns[n] = 1; fimpl[im] = 1; next }
    val[w "," im] = v
    if (!(w in seen_w)) { seen_w[w] = 1; order[++nw] = w }
    if (!(im in seen_i)) { seen_i[im] = 1; impls[++ni] = im }
  }
  END {
    printf "%-12s", "workload"
    for (j = 1; j <= ni; j++) printf " %14s", impls[j]
    printf "\n"
    for (k = 1; k <= nw; k++) {
      w = order[k]
      ref = (w == "W5_inbox") ? val[w ",mutex"] : val[w ",limit"]
      printf "%-12s", w
      for (j = 1; j <= ni; j++) {
        v = val[w "," impls[j]]
        if (v == "" || v == "-" || ref == "" || ref == "-" || ref + 0 == 0) printf " %14s", "-"
        else printf " %14.2f", v / ref
      }
      printf "\n"
    }
    printf "\nW2_frame: one frame with N tasks asleep and none due, in microseconds\n"
    for (n in frame_ns) {
      printf "  N=%-8s", n
      for (im in fimpl) if ((n "," im) in frame) printf "  %s %.3f", im, frame[n "," im] / 1000
      printf "\n"
    }
  }' "$results"

# ---- the targets of issue #5 ----------------------------------------------------------
echo
echo "targets (issue #5):"
awk -v frame_n="$N_FRAME" '
  function field(name,   i, kv) {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
    return "-"
  }
  {
    w = field("workload"); im = field("impl"); n = field("n")
    ns[w "," im "," n] = field("ns_per_op"); by[w "," im "," n] = field("bytes_per_task")
    al[w "," im "," n] = field("allocs_per_op")
    if (!(w in nof)) nof[w] = n
    present[im] = 1
  }
  function get(a, w, im) { return a[w "," im "," nof[w]] }
  function cost(w, im) { return (w == "W4_memory") ? get(by, w, im) : get(ns, w, im) }
  function verdict(ok) { return ok ? "met" : "MISSED" }
  function ratio(w, lim, tgt,   r) {
    if (get(ns, w, "lunaloop") == "" || get(ns, w, lim) == "") return
    r = get(ns, w, "lunaloop") / get(ns, w, lim)
    printf "  %-11s lunaloop/%s = %.2f (target <= %.2f): %s\n", w, lim, r, tgt, verdict(r <= tgt)
  }
  END {
    ratio("W1_yield", "limit", 1.5)
    f1 = ns["W2_frame,lunaloop," frame_n]; f2 = ns["W2_frame,lunaloop," 2 * frame_n]
    if (f1 != "") {
      printf "  %-11s %.3f us at N=%d (target <= 2 us): %s\n", "W2_frame", f1 / 1000, frame_n, verdict(f1 <= 2000)
      if (f2 != "")
        printf "  %-11s %.3f us at N=%d, %.2fx the N cost (target < 2x): %s\n", "W2_frame", f2 / 1000, 2 * frame_n, f2 / f1, verdict(f2 / f1 < 2)
    }
    ratio("W2_sleepers", "limit", 1.5)
    ratio("W3_churn", "limit", 1.5)
    if (get(by, "W4_memory", "lunaloop") != "" && get(by, "W4_memory", "limit") != "") {
      r = get(by, "W4_memory", "lunaloop") / get(by, "W4_memory", "limit")
      printf "  %-11s lunaloop/limit = %.2f bytes (target <= 1.15): %s\n", "W4_memory", r, verdict(r <= 1.15)
    }
    # Not targets: the floor once each coroutine has a task object (limit.c).
    split("W2_sleepers W3_churn W4_memory", tw, " ")
    for (k = 1; k <= 3; k++) {
      w = tw[k]; lt = cost(w, "limit_task"); l = cost(w, "limit"); me = cost(w, "lunaloop")
      if (lt == "" || l == "" || me == "") continue
      printf "  %-11s (not a target) limit_task/limit = %.2f, lunaloop/limit_task = %.2f\n", w, lt / l, me / lt
    }
    if (get(ns, "W5_inbox", "lunaloop") != "" && get(ns, "W5_inbox", "mutex") != "") {
      r = get(ns, "W5_inbox", "mutex") / get(ns, "W5_inbox", "lunaloop")
      printf "  %-11s throughput lunaloop/mutex = %.2f (target >= 1): %s\n", "W5_inbox", r, verdict(r >= 1)
      a = get(al, "W5_inbox", "lunaloop")
      printf "  %-11s %s allocations per post with a warm pool (target 0): %s\n", "W5_inbox", a, verdict(a + 0 == 0)
    }
    split("W1_yield W2_steady", zw, " ")
    for (k = 1; k <= 2; k++) {
      a = get(al, zw[k], "lunaloop")
      if (a != "")
        printf "  %-11s %s allocations per %s round trip, steady state (target 0): %s\n", zw[k], a, (k == 1 ? "yield" : "delay"), verdict(a + 0 == 0)
    }
    split("W1_yield W2_sleepers W2_steady W3_churn W4_memory W6_update", pw, " ")
    for (k = 1; k <= 6; k++) {
      w = pw[k]; field_a = (w == "W4_memory") ? "by" : "ns"
      mine = (field_a == "by") ? get(by, w, "lunaloop") : get(ns, w, "lunaloop")
      if (mine == "" || mine == "-") continue
      line = ""; ok = 1
      split("purelua purelua_pcall luv cqueues", peers, " ")
      for (p = 1; p <= 4; p++) {
        other = (field_a == "by") ? get(by, w, peers[p]) : get(ns, w, peers[p])
        if (other == "" || other == "-") continue
        line = line sprintf(" %s %.2fx", peers[p], other / mine)
        if (other + 0 < mine + 0) ok = 0
      }
      if (line != "") printf "  %-11s peers / lunaloop:%s (target > 1 each): %s\n", w, line, verdict(ok)
    }
    f1 = ns["W2_frame,lunaloop," frame_n]
    line = ""; ok = 1
    split("purelua luv cqueues", peers, " ")
    for (p = 1; p <= 3; p++) {
      other = ns["W2_frame," peers[p] "," frame_n]
      if (other == "" || f1 == "") continue
      line = line sprintf(" %s %.2fx", peers[p], other / f1)
      if (other + 0 < f1 + 0) ok = 0
    }
    if (line != "") printf "  %-11s peers / lunaloop:%s (target > 1 each): %s\n", "W2_frame", line, verdict(ok)
  }' "$results"

# ---- scaling chart ------------------------------------------------------------------
if [ "$scaling" -eq 1 ]; then
  echo
  echo "scaling with the number of tasks N (best of 3, one run at 1,000,000; bar length ~ log2 of ns):"
  awk '
    function field(name,   i, kv) {
      for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
      return "-"
    }
    { v[field("workload") "," field("impl") "," field("n")] = field("ns_per_op"); ns_[field("n")] = 1 }
    function bar(x,   k, s) { s = ""; for (k = 0; k < int(log(x) / log(2) * 3 + 0.5); k++) s = s "#"; return s }
    END {
      split("W1_yield,limit W1_yield,lunaloop W2_frame,lunaloop", rows, " ")
      split("1000 10000 100000 1000000", ns, " ")
      for (r = 1; r <= 3; r++) {
        split(rows[r], wi, ",")
        printf "%s %s (%s)\n", wi[1], wi[2], (wi[1] == "W2_frame" ? "ns per frame" : "ns per resume")
        for (k = 1; k <= 4; k++) {
          x = v[rows[r] "," ns[k]]
          if (x == "" || x == "-") continue
          printf "  N=%-8s %9.1f %s\n", ns[k], x, bar(x)
        }
      }
    }' <(sed 's/^scaling: //' "$scaling_out")
fi
if [ -n "${hostile:-}" ]; then
  echo
  echo "hostile mods (bench/hostile.c): the longest frame with four attacking mods, against"
  echo "bound_ms = 4 x the per-mod time budget (each may also finish the C call under way):"
  printf '%s\n' "$hostile" | sed 's/^/  /'
fi
echo
note "suite finished in ${elapsed}s"
