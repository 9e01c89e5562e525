#!/usr/bin/env bash
# bench/suite.sh [OPTIONS] LUNA_BENCH: runs the workloads of the benchmark
# suite with the luna_bench program given and prints one line per
# measurement (see bench/bench.h), then, for each collector mode
# (generational first, as stock lua5.4 runs, then incremental), the ratios
# against the floors as min median max over the rounds, the targets met or
# missed, (full runs) the scaling of W1 and W2_frame with the number of
# tasks, and W8 frame stability (each frame timed on its own: p50, p99,
# p99.9 and max against the issue's targets). docs/performance.md explains
# the output.
#
# Every ratio comes from measurements interleaved round by round: within a
# round, the floor, lunaloop and each peer of a workload run one after the
# other (a fresh process each, in an order that rotates from round to
# round), so a ratio's two sides see the same machine; times are process CPU
# time. The spread over the rounds is what the load did to the ratio.
#
# Options:
#   --quick         small sizes and 1 round, for scripts/test (ctest label
#                   "bench"): checks that every benchmark still runs and
#                   asserts nothing about time;
#   --no-scaling    without the sweep from 1,000 to 1,000,000 tasks;
#   --rounds R      rounds per measurement (default 5);
#   --gc MODES      "generational", "incremental" or both (the default),
#                   comma-separated;
#   --instructions  instead of times, callgrind's instruction counts per
#                   operation, from two sizes of each workload differenced
#                   (so setup cost cancels); the machine's load does not
#                   change them;
#   --only REGEX    only the workloads whose name matches (grep -E);
#   --report FILE   measure nothing: the report of the measurement lines
#                   in FILE (a saved output of this suite, or a part of one);
#   --compare OLD   OLD is another luna_bench (the build before a change):
#                   the lunaloop workloads of both programs interleaved
#                   round by round, and the ratio new/old of each (with
#                   --instructions: the instruction counts of both).
# A peer whose Lua module is missing (luv, cqueues) is skipped with a note.
# Exits 1 when a measurement failed (after the report of the others).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() {
  echo "usage: bench/suite.sh [--quick] [--no-scaling] [--rounds R] [--gc MODES] [--instructions] [--only REGEX] [--report FILE] [--compare OLD_LUNA_BENCH] LUNA_BENCH" >&2
  exit 2
}
quick=0 scaling=1 rounds= gcs=generational,incremental instructions=0 old= only= report=
while [ $# -gt 1 ]; do
  case "$1" in
    --quick) quick=1; scaling=0 ;;
    --no-scaling) scaling=0 ;;
    --rounds) [ $# -gt 2 ] || usage; rounds=$2; shift ;;
    --gc) [ $# -gt 2 ] || usage; gcs=$2; shift ;;
    --instructions) instructions=1; scaling=0 ;;
    --compare) [ $# -gt 2 ] || usage; old=$2; shift ;;
    --only) [ $# -gt 2 ] || usage; only=$2; shift ;;
    --report) [ $# -gt 2 ] || usage; report=$2; shift ;;
    *) usage ;;
  esac
  shift
done
[ $# -eq 1 ] || usage
bin=$1
for b in "$bin" ${old:+"$old"}; do
  [ -x "$b" ] || { echo "bench/suite.sh: $b is not an executable" >&2; exit 2; }
done
[ -n "$rounds" ] || rounds=$((quick ? 1 : 5))
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || usage
IFS=, read -r -a gc_modes <<<"$gcs"
for gc in "${gc_modes[@]}"; do
  case "$gc" in generational|incremental) ;; *) usage ;; esac
done
if [ "$instructions" -eq 1 ] && ! command -v valgrind >/dev/null 2>&1; then
  echo "bench/suite.sh: --instructions needs valgrind (Debian: valgrind)" >&2
  exit 2
fi

note() { printf 'bench: %s\n' "$*" >&2; }

# Sizes: the full ones, or small ones for the quick mode.
if [ "$quick" -eq 1 ]; then
  N_W1=200 N_W2=1000 N_STEADY=200 N_FRAME=1000 N_W3=5000 N_TICK=2000 N_W4=1000 N_W5=10000 N_W6=200
  N_HOSTILE=5 N_W8=500 N_W9=1000 N_W10=200 N_SIM="1000 5 1" N_W7=16
else
  N_W1=10000 N_W2=100000 N_STEADY=10000 N_FRAME=100000 N_W3=1000000 N_TICK=100000 N_W4=100000
  N_W5=1000000 N_W6=10000 N_HOSTILE=120 N_W8=20000 N_W9=10000 N_W10=10000 N_SIM="1000 200 $rounds" N_W7=256
fi
scale_ns=(1000 10000 100000 1000000)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results

peers=(purelua)
for peer in luv cqueues; do
  if "$bin" probe "$peer" 2>/dev/null; then
    peers+=("$peer")
  else
    note "note: the Lua 5.4 module '$peer' is not installed (Debian: lua-$peer): $peer skipped"
  fi
done
has_peer() { [[ " ${peers[*]} " == *" $1 "* ]]; }
# peer IMPL...: those of the implementations whose family is installed.
peer() {
  local impl
  for impl in "$@"; do if has_peer "${impl%%_*}"; then printf '%s ' "$impl"; fi; done
}

# The plan: one row per workload and size, "WORKLOAD N IMPL...". The floors
# come first (limit, limit_deadline, limit_task; mutex for W5).
plan=(
  "W1_yield $N_W1 limit lunaloop $(peer purelua luv cqueues)"
  "W2_sleepers $N_W2 limit limit_deadline limit_task lunaloop $(peer purelua luv cqueues)"
  "W2_steady $N_STEADY limit lunaloop $(peer purelua luv cqueues)"
  "W2_frame $N_FRAME lunaloop $(peer purelua luv cqueues)"
  "W2_frame $((2 * N_FRAME)) lunaloop $(peer purelua luv cqueues)"
  "W3_churn $N_W3 limit limit_task lunaloop lunaloop_defer $(peer purelua luv cqueues)"
  "W3_tick $N_TICK limit lunaloop lunaloop_defer $(peer purelua purelua_defer luv luv_timer luv_wrap cqueues)"
  "W4_memory $N_W4 limit limit_task lunaloop $(peer purelua luv cqueues)"
  "W5_inbox $N_W5 mutex lunaloop"
  "W6_update $N_W6 limit lunaloop lunaloop_tasks $(peer purelua purelua_pcall luv)"
  "W9_group_cancel $N_W9 lunaloop lunaloop_each"
  "W10_signal $N_W10 lunaloop_on lunaloop"
)
if [ "$quick" -eq 0 ]; then
  plan+=("W9_group_cancel 1000 lunaloop lunaloop_each" "W9_group_cancel 100000 lunaloop lunaloop_each")
fi
if [ "$scaling" -eq 1 ]; then
  for n in "${scale_ns[@]}"; do
    [ "$n" -eq "$N_W1" ] || plan+=("W1_yield $n limit lunaloop")
    [ "$n" -eq "$N_FRAME" ] || plan+=("W2_frame $n lunaloop")
  done
fi

# Instruction mode: what size doubles ("tasks": N; "frames": the measured
# rounds, N fixed) and the smaller size, small enough for callgrind and
# large enough that the difference dwarfs the run-to-run jitter of the
# setup (Lua seeds its string hashes from the time and addresses, which
# moves a run's count by about 0.1%).
# W4 (bytes) and W5 (three threads, which callgrind serializes) are left
# out, as is W2_steady of the real-time peers (their window is in seconds,
# not in frames).
icount_size() {
  case "$1" in
    W1_yield) echo "frames 1000 10" ;;
    W2_sleepers) echo "tasks 5000" ;;
    W2_steady) echo "frames 1000 20" ;;
    W2_frame) echo "frames 1000 2000" ;;
    W3_churn) echo "tasks 10000" ;;
    W3_tick) echo "tasks 5000" ;;
    W6_update) echo "frames 1000 10" ;;
    W9_group_cancel) echo "tasks 5000" ;;
    W10_signal) echo "frames 1000 10" ;;
    *) echo "-" ;;
  esac
}

# bench_args IMPL WORKLOAD N: luna_bench's arguments for one measurement.
bench_args() {
  local impl=$1 w=$2 n=$3 q=()
  [ "$quick" -eq 0 ] || q=(--quick)
  case "$impl" in
    limit*) echo "--reps 1 ${q[*]} $impl $w $n" ;;
    mutex) echo "--reps 1 ${q[*]} inbox mutex $n" ;;
    *) if [ "$w" = W5_inbox ]; then echo "--reps 1 ${q[*]} inbox $impl $n"
       else echo "--reps 1 ${q[*]} lua $impl $here/${impl%%_*}.lua $w $n"; fi ;;
  esac
}

# old_cannot TAG WHAT: true (after a note) when the binary that failed is
# the old one of --compare: a workload or implementation added since the
# old build is not a failure of the new one; its row shows "-" for old.
old_cannot() {
  [ "$1" = old ] || return 1
  note "the old build cannot run $2 (added since?): no comparison for it"
}

# measure TAG BIN GC ROUND IMPL WORKLOAD N: one timed measurement; its line,
# tagged "gc=GC round=ROUND bin=TAG", goes to stdout and to the results.
measure() {
  local tag=$1 b=$2 gc=$3 round=$4 line
  # shellcheck disable=SC2046
  line=$(LUNA_BENCH_GC=$gc "$b" $(bench_args "$5" "$6" "$7")) || {
    old_cannot "$tag" "$5 $6" && return 0
    note "failed: luna_bench $(bench_args "$5" "$6" "$7")"; failed=1; return 0; }
  [ -n "$line" ] || return 0
  printf 'gc=%s round=%s bin=%s %s\n' "$gc" "$round" "$tag" "$line" | tee -a "$results"
}

# icount TAG BIN GC IMPL WORKLOAD: instructions per operation by callgrind,
# (I(2s) - I(s)) / (ops(2s) - ops(s)), as a line for the results.
icount() {
  local tag=$1 b=$2 gc=$3 impl=$4 w=$5 kind n s size i ir=() ops=()
  read -r kind n s <<<"$(icount_size "$w")"
  [ "$kind" != "-" ] || return 0
  for size in 1 2; do
    rm -f "$tmp/ops" "$tmp/cg.out"
    if [ "$kind" = tasks ]; then i=$((n * size)); else i=$n; fi
    # shellcheck disable=SC2046
    if ! env LUNA_BENCH_GC="$gc" LUNA_BENCH_OPS="$tmp/ops" ${s:+LUNA_BENCH_ROUNDS=$((s * size))} \
         valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" --log-file=/dev/null \
         "$b" $(bench_args "$impl" "$w" "$i") >/dev/null; then
      old_cannot "$tag" "$impl $w" && return 0
      note "failed under callgrind: luna_bench $(bench_args "$impl" "$w" "$i")"
      failed=1
      return 0
    fi
    ir+=("$(awk '/^summary:/ { print $2 }' "$tmp/cg.out")")
    ops+=("$(cat "$tmp/ops" 2>/dev/null || echo 0)")
  done
  if [ "${ops[1]}" -le "${ops[0]}" ]; then
    note "$impl $w: the op count did not grow with the size: no instruction count"
    return 0
  fi
  printf 'gc=%s round=1 bin=%s workload=%s impl=%s n=%s ir_per_op=%.1f\n' "$gc" "$tag" "$w" "$impl" "$n" \
    "$(awk -v a="${ir[0]}" -v b="${ir[1]}" -v x="${ops[0]}" -v y="${ops[1]}" 'BEGIN { print (b - a) / (y - x) }')" |
    tee -a "$results"
}

# rotate K WORD...: the words, starting at the (K mod count)-th.
rotate() {
  local k=$1
  shift
  local words=("$@") i
  for ((i = 0; i < ${#words[@]}; i++)); do
    printf '%s ' "${words[$(((i + k) % ${#words[@]}))]}"
  done
}

started=$(date +%s)
failed=0
: >"$results"
[ -z "$report" ] || { grep '^gc=' "$report" >"$results" || true; gc_modes=(); }
for gc in ${gc_modes[@]+"${gc_modes[@]}"}; do
  counted=
  for row in "${plan[@]}"; do
    read -r w n impls <<<"$row"
    read -r -a impls <<<"$impls"
    [ -z "$only" ] || grep -qE -- "$only" <<<"$w" || continue
    if [ -n "$old" ]; then # the lunaloop implementations only, both binaries
      mine=()
      for impl in "${impls[@]}"; do
        [[ "$impl" != lunaloop* || "$w" = W5_inbox ]] || mine+=("$impl")
      done
      impls=(${mine[@]+"${mine[@]}"})
    fi
    [ "${#impls[@]}" -gt 0 ] || continue
    if [ "$instructions" -eq 1 ]; then
      # One size per workload: W2_frame's second row would measure the same.
      [[ " ${counted:-} " != *" $w "* ]] || continue
      counted="${counted:-} $w"
      for impl in "${impls[@]}"; do
        case "$w $impl" in "W2_steady luv"* | "W2_steady cqueues"*) continue ;; esac
        icount new "$bin" "$gc" "$impl" "$w"
        [ -z "$old" ] || icount old "$old" "$gc" "$impl" "$w"
      done
      continue
    fi
    for ((r = 1; r <= rounds; r++)); do
      for impl in $(rotate $((r - 1)) "${impls[@]}"); do
        if [ -n "$old" ] && [ $((r % 2)) -eq 0 ]; then
          measure old "$old" "$gc" "$r" "$impl" "$w" "$n"
          measure new "$bin" "$gc" "$r" "$impl" "$w" "$n"
        else
          measure new "$bin" "$gc" "$r" "$impl" "$w" "$n"
          [ -z "$old" ] || measure old "$old" "$gc" "$r" "$impl" "$w" "$n"
        fi
      done
    done
  done
done
hostile=
if [ -z "$old" ] && [ "$instructions" -eq 0 ] && [ -z "$report" ] && { [ -z "$only" ] || grep -qE -- "$only" <<<hostile; }; then
  # Hostile mods (bench/hostile.c): wall-clock frames against a wall-clock
  # budget, not a ratio; listed again at the end.
  hostile=$("$bin" hostile "$N_HOSTILE") || { note "failed: luna_bench hostile $N_HOSTILE"; failed=1; }
  printf '%s\n' "$hostile"
fi
simroll=
if [ -z "$old" ] && [ "$instructions" -eq 0 ] && [ -z "$report" ] && { [ -z "$only" ] || grep -qE -- "$only" <<<S1_rollback; }; then
  # The simulation's rollback (bench/sim.c): per frame a tick, a load 8
  # ticks back and 8 ticks again, each saved, over 1,000 registered
  # entities, against the same copies by hand in plain Lua in the same run.
  # shellcheck disable=SC2086
  simroll=$("$bin" sim $N_SIM) || { note "failed: luna_bench sim $N_SIM"; failed=1; }
  printf '%s\n' "$simroll"
fi
frames=
if [ -z "$old" ] && [ "$instructions" -eq 0 ] && [ -z "$report" ] && { [ -z "$only" ] || grep -qE -- "$only" <<<W8_frames; }; then
  # W8 frame stability: each frame timed on its own, so a distribution, not
  # a ratio: lunaloop with the collector paced, lunaloop with the stock
  # collector and the plain-Lua scheduler, one process each, in the stock
  # (generational) mode; listed at the end.
  for impl in lunaloop_paced lunaloop purelua; do
    # shellcheck disable=SC2046
    out=$(LUNA_BENCH_GC=generational "$bin" $(bench_args "$impl" W8_frames "$N_W8")) ||
      { note "failed: luna_bench $(bench_args "$impl" W8_frames "$N_W8")"; failed=1; continue; }
    frames+=$(grep '^frames ' <<<"$out")$'\n'
  done
fi
workers= payload=
if [ -z "$old" ] && [ "$instructions" -eq 0 ] && [ -z "$report" ] && { [ -z "$only" ] || grep -qE -- "$only" <<<W7_workers; }; then
  # W7 worker Lua states (bench/workers.lua): wall time, one run each, not
  # a ratio: task.workers on 1..cores threads with the serial baseline on
  # the loop thread in the same process, then luv's new_work with libuv's
  # pool of 1..cores threads (one process each: UV_THREADPOOL_SIZE is read
  # once); listed at the end.
  q=()
  [ "$quick" -eq 0 ] || q=(--quick)
  workers=$(LUNA_BENCH_GC=generational "$bin" ${q[@]+"${q[@]}"} lua lunaloop "$here/workers.lua" W7 "$N_W7" | grep '^w7 ') ||
    { note "failed: luna_bench lua lunaloop bench/workers.lua W7 $N_W7"; failed=1; }
  if has_peer luv; then
    for ((p = 1; p <= $(nproc); p++)); do
      workers+=$'\n'$(UV_THREADPOOL_SIZE=$p LUNA_BENCH_GC=generational "$bin" ${q[@]+"${q[@]}"} lua luv "$here/workers.lua" W7 "$N_W7" | grep '^w7 ') ||
        { note "failed: luna_bench lua luv bench/workers.lua W7 $N_W7"; failed=1; }
    done
  fi
  # W7_payload: string echoes of 1 KiB, 64 KiB and 1 MiB, lunaloop (one
  # worker) and luv (each pool size) interleaved round by round
  if has_peer luv; then
    for ((r = 1; r <= rounds; r++)); do
      payload+=$(LUNA_BENCH_GC=generational "$bin" ${q[@]+"${q[@]}"} lua lunaloop "$here/workers.lua" W7_payload 1 | grep '^w7 ')$'\n' ||
        { note "failed: luna_bench lua lunaloop bench/workers.lua W7_payload 1"; failed=1; }
      for ((p = 1; p <= $(nproc); p++)); do
        payload+=$(UV_THREADPOOL_SIZE=$p LUNA_BENCH_GC=generational "$bin" ${q[@]+"${q[@]}"} lua luv "$here/workers.lua" W7_payload 1 | grep '^w7 ')$'\n' ||
          { note "failed: luna_bench lua luv bench/workers.lua W7_payload 1"; failed=1; }
      done
    done
  fi
fi
elapsed=$(($(date +%s) - started))

# ---- the report ------------------------------------------------------------------
awk -v mode="$([ -n "$old" ] && echo compare || echo suite)" -v icount="$instructions" \
    -v rounds="$rounds" -v scaling="$scaling" '
  function field(name,   i, kv) {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
    return ""
  }
  # The value a measurement is judged by.
  function value(w) {
    if (icount) return field("ir_per_op")
    return (w == "W4_memory") ? field("bytes_per_task") : field("ns_per_op")
  }
  {
    gc = field("gc"); w = field("workload"); im = field("impl"); n = field("n")
    b = field("bin"); r = field("round"); row = w " " n
    if (!(gc in seen_gc)) { seen_gc[gc] = 1; gcs[++ngc] = gc }
    if (!((gc, row) in seen_row)) { seen_row[gc, row] = 1; rows[gc, ++nrow[gc]] = row }
    if (!((gc, row, im) in seen_im)) { seen_im[gc, row, im] = 1; ims[gc, row, ++nim[gc, row]] = im }
    v = value(w)
    if (v != "" && v != "-") { val[gc, row, im, b, r] = v; has_round[r] = 1 }
    al = field("allocs_per_op")
    if (al != "" && al != "-" && (!((gc, row, im) in allocs) || al + 0 > allocs[gc, row, im])) allocs[gc, row, im] = al + 0
  }
  # spread(gc, row, a, ba, c, bc): min, median and max over the rounds of
  # value(a in binary ba) / value(c in binary bc); sets med; "" if no round.
  function spread(gc, row, a, ba, c, bc,   r, k, x, i, j, t) {
    k = 0
    for (r in has_round)
      if (((gc, row, a, ba, r) in val) && ((gc, row, c, bc, r) in val) && val[gc, row, c, bc, r] + 0 != 0)
        x[++k] = val[gc, row, a, ba, r] / val[gc, row, c, bc, r]
    if (k == 0) { med = ""; return "" }
    for (i = 2; i <= k; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
    med = (k % 2) ? x[(k + 1) / 2] : (x[k / 2] + x[k / 2 + 1]) / 2
    if (k == 1) return sprintf("%6.2f", med)
    return sprintf("%6.2f %6.2f %6.2f", x[1], med, x[k])
  }
  # median(gc, row, im, b): the median value itself (through spread over 1).
  function median(gc, row, im, b,   r, k, x, i, j, t) {
    k = 0
    for (r in has_round) if ((gc, row, im, b, r) in val) x[++k] = val[gc, row, im, b, r] + 0
    if (k == 0) return ""
    for (i = 2; i <= k; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
    return (k % 2) ? x[(k + 1) / 2] : (x[k / 2] + x[k / 2 + 1]) / 2
  }
  function unit(w) { return icount ? "Ir" : (w == "W4_memory") ? "B" : "ns" }
  function is_floor(im) { return im ~ /^limit/ || im == "mutex" }
  function is_luna(im) { return im ~ /^lunaloop/ }
  function verdict(ok) { return ok ? "met" : "MISSED" }
  function has(gc, row, im) { return (gc, row, im) in seen_im }
  # target(gc, row, a, c, limit, text): the median ratio a/c against limit.
  function target(gc, row, a, c, limit, text,   s) {
    if (!has(gc, row, a) || !has(gc, row, c)) return
    s = spread(gc, row, a, "new", c, "new")
    if (s == "") return
    printf "  %-22s %-30s %s (target <= %.2f): %s\n", row, a "/" c, s, limit, verdict(med <= limit)
  }
  function zero_allocs(gc, row, what) {
    if (!((gc, row, "lunaloop") in allocs)) return
    printf "  %-22s %s allocations per %s (target 0): %s\n", row, allocs[gc, row, "lunaloop"], what, verdict(allocs[gc, row, "lunaloop"] == 0)
  }
  function suite_report(gc,   fn, k, row, split_row, w, j, im, c, s, header, f1, f2, f1m, f2m, line, ok, p, peer, m, lm, nl, lunas) {
    printf "\n== %s collector: %s ==\n", gc, icount ? "instructions per operation (callgrind, the difference of two sizes)" : sprintf("ratios over %d rounds, min median max (lower is better)", rounds)
    printf "%-22s %-16s %-16s %-20s %s\n", "workload N", "impl", "against", icount ? "ratio" : "min median max", "median value"
    for (k = 1; k <= nrow[gc]; k++) {
      row = rows[gc, k]; split(row, split_row, " "); w = split_row[1]
      for (j = 1; j <= nim[gc, row]; j++) {
        im = ims[gc, row, j]
        m = median(gc, row, im, "new")
        if (m == "") continue
        header = 0
        for (c = 1; c <= nim[gc, row]; c++) {
          # A floor against the limit (what it adds); the rest against each floor.
          if (!is_floor(ims[gc, row, c]) || ims[gc, row, c] == im || im == "limit" || im == "mutex") continue
          if (is_floor(im) && ims[gc, row, c] != "limit") continue
          s = spread(gc, row, im, "new", ims[gc, row, c], "new")
          if (s == "") continue
          printf "%-22s %-16s %-16s %-20s %.1f %s\n", header ? "" : row, header ? "" : im, "/ " ims[gc, row, c], s, m, unit(w)
          header = 1
        }
        if (!header) printf "%-22s %-16s %-16s %-20s %.1f %s\n", row, im, "", "", m, unit(w)
      }
    }
    printf "\ntargets (%s):\n", gc
    target(gc, "W1_yield " first_n("W1_yield", gc), "lunaloop", "limit", icount ? 1.25 : 1.3)
    if (!icount) target(gc, "W1_yield 1000000", "lunaloop", "limit", 1.5)
    target(gc, "W2_sleepers " first_n("W2_sleepers", gc), "lunaloop", "limit_deadline", 1.1)
    for (k = 1; k <= nrow[gc]; k++) {
      row = rows[gc, k]; split(row, split_row, " "); w = split_row[1]
      if (w == "W3_churn" || w == "W3_tick") {
        target(gc, row, "lunaloop", "limit", 1.2)
        target(gc, row, "lunaloop_defer", "limit", 1.5)
      }
    }
    target(gc, "W4_memory " first_n("W4_memory", gc), "lunaloop", "limit", 1.12)
    target(gc, "W4_memory " first_n("W4_memory", gc), "lunaloop", "purelua", 1.0)
    target(gc, "W5_inbox " first_n("W5_inbox", gc), "lunaloop", "mutex", 1.0)
    if (!icount) {
      fn = first_n("W2_frame", gc)
      f1m = median(gc, "W2_frame " fn, "lunaloop", "new"); f2m = median(gc, "W2_frame " 2 * fn, "lunaloop", "new")
      if (f1m != "" && f2m != "")
        printf "  %-22s twice the sleepers: %.2fx the frame (target flat, < 1.25x): %s\n", "W2_frame " fn, f2m / f1m, verdict(f2m / f1m < 1.25)
      f1m = median(gc, "W2_frame 1000000", "lunaloop", "new")
      if (f1m != "") printf "  %-22s %.3f us a frame (target <= 0.5 us): %s\n", "W2_frame 1000000", f1m / 1000, verdict(f1m <= 500)
      zero_allocs(gc, "W1_yield " first_n("W1_yield", gc), "yield round trip")
      zero_allocs(gc, "W2_steady " first_n("W2_steady", gc), "delay round trip")
      zero_allocs(gc, "W2_frame " fn, "empty frame")
      zero_allocs(gc, "W5_inbox " first_n("W5_inbox", gc), "post")
    }
    # Faster than every peer: peer / lunaloop > 1 (median), for each variant.
    for (k = 1; k <= nrow[gc]; k++) {
      row = rows[gc, k]; split(row, split_row, " "); w = split_row[1]
      if (w == "W5_inbox") continue
      nl = 0
      for (j = 1; j <= nim[gc, row]; j++) if (is_luna(ims[gc, row, j]) && ims[gc, row, j] != "lunaloop_tasks") lunas[++nl] = ims[gc, row, j]
      for (lm = 1; lm <= nl; lm++) {
        line = ""; ok = 1
        for (j = 1; j <= nim[gc, row]; j++) {
          peer = ims[gc, row, j]
          if (is_floor(peer) || is_luna(peer)) continue
          s = spread(gc, row, peer, "new", lunas[lm], "new")
          if (s == "") continue
          line = line sprintf(" %s %.2fx", peer, med)
          if (med <= 1) ok = 0
        }
        if (line != "") printf "  %-22s peers / %s:%s (target > 1 each): %s\n", row, lunas[lm], line, verdict(ok)
      }
    }
    if (scaling && !icount) {
      printf "\nscaling with the number of tasks N (%s, medians; bar length ~ log2 of ns):\n", gc
      split("W1_yield,limit,ns_per_resume W1_yield,lunaloop,ns_per_resume W2_frame,lunaloop,ns_per_frame", sc, " ")
      for (k = 1; k <= 3; k++) {
        split(sc[k], wi, ",")
        printf "%s %s (%s)\n", wi[1], wi[2], wi[3]
        for (j = 1000; j <= 1000000; j *= 10) {
          m = median(gc, wi[1] " " j, wi[2], "new")
          if (m == "") continue
          printf "  N=%-8s %9.1f %s\n", j, m, bar(m)
        }
      }
    }
  }
  function bar(x,   k, s) { s = ""; for (k = 0; k < int(log(x) / log(2) * 3 + 0.5); k++) s = s "#"; return s }
  function first_n(w, gc,   k, split_row) {
    for (k = 1; k <= nrow[gc]; k++) { split(rows[gc, k], split_row, " "); if (split_row[1] == w) return split_row[2] }
    return ""
  }
  function compare_report(gc,   k, row, split_row, j, im, s, mn, mo) {
    printf "\n== %s collector: new / old, %s ==\n", gc, icount ? "instructions per operation (callgrind, the difference of two sizes)" : sprintf("CPU time over %d rounds, min median max (lower is better)", rounds)
    printf "%-22s %-16s %-20s %12s %12s\n", "workload N", "impl", icount ? "ratio" : "min median max", "new", "old"
    for (k = 1; k <= nrow[gc]; k++) {
      row = rows[gc, k]; split(row, split_row, " ")
      for (j = 1; j <= nim[gc, row]; j++) {
        im = ims[gc, row, j]
        s = spread(gc, row, im, "new", im, "old")
        mn = median(gc, row, im, "new"); mo = median(gc, row, im, "old")
        if (mn == "") continue
        if (mo == "") { printf "%-22s %-16s %-20s %9.1f %-2s %9s\n", row, im, "-", mn, unit(split_row[1]), "-"; continue }
        printf "%-22s %-16s %-20s %9.1f %-2s %9.1f %-2s\n", row, im, s, mn, unit(split_row[1]), mo, unit(split_row[1])
      }
    }
  }
  END {
    for (g = 1; g <= ngc; g++)
      if (mode == "compare") compare_report(gcs[g]); else suite_report(gcs[g])
  }' "$results"

if [ -n "$hostile" ]; then
  echo
  echo "hostile mods (bench/hostile.c): the longest frame with four attacking mods, against"
  echo "bound_ms = 4 x the per-mod time budget (each may also finish the C call under way):"
  printf '%s\n' "$hostile" | sed 's/^/  /'
fi
if [ -n "$simroll" ]; then
  echo
  echo "simulation rollback (bench/sim.c): save + load + 8 resimulated ticks of 1,000 entities"
  echo "a frame, best of the rounds; purelua copies by hand, ticks is the simulation alone:"
  printf '%s\n' "$simroll" | sed 's/^/  /'
fi
if [ -n "$frames" ]; then
  echo
  # The targets: with pacing, p99 <= 1.5 x p50, max <= 2.5 x p50, a mean
  # within 10% of the stock collector's, the peak of live bytes within the
  # ceiling; the stock collector and the plain-Lua scheduler beside them.
  printf '%s' "$frames" | awk -v n="$N_W8" '
    function field(name,   i, kv) {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
      return ""
    }
    /^frames / {
      im = field("impl"); order[++k] = im
      if ($0 ~ /pacing: not available/) { na[im] = 1; next }
      for (j = 1; j <= split("p50_ns p99_ns p999_ns max_ns mean_ns resumes_per_s peak_bytes ceiling_bytes frames budget_s frame_s", f, " "); j++)
        v[im, f[j]] = field(f[j])
    }
    function judge(ok) { return ok ? "met" : "missed" }
    END {
      printf "W8 frame stability: %d tasks, mixed awaits, small allocations per resume, %s frames;\n", n, v["lunaloop", "frames"]
      printf "frame CPU time in ms (generational mode unless paced):\n"
      printf "  %-16s %8s %8s %8s %8s %8s %12s %10s\n", "impl", "p50", "p99", "p99.9", "max", "mean", "resumes/s", "peak MiB"
      for (i = 1; i <= k; i++) {
        im = order[i]
        if (im in na) { printf "  %-16s pacing: not available (no task.gc in this build)\n", im; continue }
        printf "  %-16s %8.2f %8.2f %8.2f %8.2f %8.2f %12.0f %10.1f\n", im, v[im, "p50_ns"] / 1e6, v[im, "p99_ns"] / 1e6,
          v[im, "p999_ns"] / 1e6, v[im, "max_ns"] / 1e6, v[im, "mean_ns"] / 1e6, v[im, "resumes_per_s"], v[im, "peak_bytes"] / 1048576
      }
      p = "lunaloop_paced"
      if (p in na || !((p, "p50_ns") in v)) { print "  targets: not judged (pacing not available)"; exit }
      p50 = v[p, "p50_ns"]
      if ((p, "budget_s") in v && v[p, "budget_s"] != "")
        printf "  paced with task.gc{budget = %s, frame = %s, stop_auto = true, ceiling = %.1f MiB}\n", v[p, "budget_s"], v[p, "frame_s"], v[p, "ceiling_bytes"] / 1048576
      printf "  target p99 <= 1.5x p50 (paced): %s (%.2fx; stock %.2fx)\n", judge(v[p, "p99_ns"] <= 1.5 * p50), v[p, "p99_ns"] / p50, v["lunaloop", "p99_ns"] / v["lunaloop", "p50_ns"]
      printf "  target max <= 2.5x p50 (paced): %s (%.2fx; stock %.2fx)\n", judge(v[p, "max_ns"] <= 2.5 * p50), v[p, "max_ns"] / p50, v["lunaloop", "max_ns"] / v["lunaloop", "p50_ns"]
      printf "  target mean within 10%% of stock: %s (%.2fx)\n", judge(v[p, "mean_ns"] <= 1.1 * v["lunaloop", "mean_ns"]), v[p, "mean_ns"] / v["lunaloop", "mean_ns"]
      printf "  target peak heap within the ceiling: %s (%.1f of %.1f MiB)\n", judge(v[p, "peak_bytes"] <= v[p, "ceiling_bytes"]), v[p, "peak_bytes"] / 1048576, v[p, "ceiling_bytes"] / 1048576
    }'
fi
if [ -n "$workers" ]; then
  echo
  echo "W7 worker Lua states (bench/workers.lua): wall time, one run each, $N_W7 jobs of ~1 ms;"
  echo "speedup and efficiency against the same jobs on the loop thread; luv passes strings only:"
  printf '%s\n' "$workers" | sed 's/^w7 /  /'
fi
if [ -n "$payload" ]; then
  echo
  echo "W7_payload: echo of a string, one call at a time (ns a KiB both ways; each figure the median"
  echo "of 5 batches in one process, 1 with --quick), $rounds interleaved rounds: min median max"
  printf '%s\n' "$payload" | awk '
    function field(name,   i, kv) {
      for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
      return ""
    }
    function med(k, n,   i, j, t, a) {
      for (i = 1; i <= n; i++) a[i] = v[k, i]
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      lo[k] = a[1]; hi[k] = a[n]
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    /test=payload_string/ {
      k = field("impl") (field("impl") == "luv" ? "_" field("threads") "thr" : "") SUBSEP field("kib")
      v[k, ++n[k]] = field("ns_per_kib")
      if (!((field("kib")) in seen)) { seen[field("kib")] = 1; sizes[++ns] = field("kib") }
      split(k, parts, SUBSEP); if (!(parts[1] in iseen)) { iseen[parts[1]] = 1; impls[++ni] = parts[1] }
    }
    END {
      for (s = 1; s <= ns; s++) {
        best = ""
        for (i = 1; i <= ni; i++) {
          k = impls[i] SUBSEP sizes[s]
          if (!(k in n)) continue
          m = med(k, n[k])
          printf "  %5s KiB  %-14s %8.0f %8.0f %8.0f\n", sizes[s], impls[i], lo[k], m, hi[k]
          if (impls[i] == "lunaloop") ours = m
          else if (best == "" || m < best) { best = m; bi = impls[i] }
        }
        if (best != "")
          printf "  %5s KiB  target faster than luv at its best pool size (%s): %s (%.2fx)\n", sizes[s], bi,
            ours < best ? "met" : "MISSED", ours / best
      }
    }'
fi
echo
note "suite finished in ${elapsed}s"
[ "$failed" -eq 0 ] || { note "some measurements failed (see above)"; exit 1; }
