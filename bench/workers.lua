-- bench/workers.lua: W7, worker Lua states (docs/workers.md), run by
-- `luna_bench lua IMPL bench/workers.lua W7 N` with IMPL
--   lunaloop  task.workers (the pool's threads: 1..LUNA_BENCH_THREADS, or
--             1..cores), and the same jobs on the loop thread (serial);
--   luv       luv's uv.new_work on libuv's thread pool (Debian lua-luv;
--             UV_THREADPOOL_SIZE threads, set by bench/suite.sh per run).
-- Times are wall time (bench.wall: the jobs run on other threads), frames
-- are run back to back (virtual time), and each figure is one run: this is
-- a shared 2-core machine. Prints lines "w7 KEY=VALUE ..." that the suite
-- lists as they come; returns nothing for the ratio table.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
-- luv first: bench/luv.lua (the suite's luv program) would shadow it
local uv = bench.impl == "luv" and require "luv" or nil
package.path = here .. "?.lua;" .. package.path
local C = dofile(here .. "common.lua")
local bench = bench
local wall = bench.wall
local impl = bench.impl
local quick = bench.quick
local jobs = require "w7_jobs"

local function out(fmt, ...) print(string.format("w7 impl=%s " .. fmt, impl, ...)) end

local function ms(ns) return ns / 1e6 end

-- Calibrates the kernel to about 1 ms on this thread.
local function calibrate()
  local k = 10000
  while true do
    local t0 = wall()
    jobs.kernel(k)
    local dt = wall() - t0
    if dt > 2e5 then return math.floor(k * 1e6 / dt) end
    k = k * 2
  end
end

local function cores()
  local f = io.popen("nproc 2>/dev/null")
  local n = f and tonumber(f:read("*l")) or 2
  if f then f:close() end
  return n
end

-- A payload of about `bytes` bytes in the copier's encoding: integers (9
-- bytes each) in a list.
local function payload(bytes)
  local t = {}
  for i = 1, bytes // 18 do t[i] = i * 1000003 end -- key and value: 18 bytes a pair
  return t
end

-- W7_payload: the sizes (LUNA_W7_KIB="1024" for one), calls a batch (at least 32,
-- and 4 MiB each way) and batches
local PAYLOAD_KIB = {1, 64, 1024}
if os.getenv("LUNA_W7_KIB") then -- e.g. "1024": one size (to profile it)
  PAYLOAD_KIB = {}
  for k in os.getenv("LUNA_W7_KIB"):gmatch("%d+") do PAYLOAD_KIB[#PAYLOAD_KIB + 1] = tonumber(k) end
end
local PAYLOAD_BATCHES = quick and 1 or 5
local function payload_calls(kib) return quick and 2 or math.max(32, 4096 // kib) end

local function median(t)
  local c = {}
  for i = 1, #t do c[i] = t[i] end
  table.sort(c)
  return #c % 2 == 1 and c[(#c + 1) // 2] or (c[#c // 2] + c[#c // 2 + 1]) / 2
end

local W = {}

if impl == "lunaloop" then
  local task = require "lunaloop"
  local DT = C.DT

  -- Runs fn in a task and frames back to back until every task ended;
  -- with `pause` (seconds) the loop sleeps that long after each frame, as
  -- a frame-limited host does, leaving the cores to the workers.
  local function run(fn, pause)
    task.spawn(fn)
    if not pause then
      bench.run_until_idle(DT, 100000000)
      return
    end
    while bench.tasks() > 0 do
      bench.frames(1, DT)
      bench.sleep(pause)
    end
  end

  function W.W7(n)
    local njobs = quick and 16 or n
    local k = calibrate()
    local maxp = tonumber(os.getenv("LUNA_BENCH_THREADS") or "") or cores()
    out("kernel_rounds=%d jobs=%d cores=%d", k, njobs, cores())
    -- throughput: the serial baseline on the loop thread, then p = 1..maxp
    local t0 = wall()
    for _ = 1, njobs do jobs.kernel(k) end
    local t1 = wall() - t0
    out("test=throughput where=loop_thread p=0 ms=%.1f", ms(t1))
    for p = 1, maxp do
      local pool = task.workers{threads = p, queue = njobs}
      local m = pool:open("w7_jobs")
      run(function() task.await(m:call("empty")) end) -- warm: every worker loads the module lazily
      local tp
      run(function()
        local s = wall()
        local ps = {}
        for i = 1, njobs do ps[i] = m:call("kernel", k) end
        for i = 1, njobs do task.await(ps[i]) end
        tp = wall() - s
      end, 0.001)
      local speedup = t1 / tp
      local kf = p > 1 and (1 / speedup - 1 / p) / (1 - 1 / p) or 0
      out("test=throughput where=workers p=%d ms=%.1f speedup=%.2f efficiency=%.2f karp_flatt=%.3f",
        p, ms(tp), speedup, speedup / p, kf)
      pool:close()
      bench.frames(1, DT)
    end
    -- payload, round trips, allocations: on `maxp` threads
    local pool = task.workers{threads = maxp, queue = 1024}
    local m = pool:open("w7_jobs")
    run(function() for _ = 1, maxp * 2 do task.await(m:call("empty")) end end)
    for _, kib in ipairs({1, 64, 1024}) do
      local t = payload(kib * 1024)
      local reps = quick and 2 or math.max(4, 2048 // kib)
      local copy_ns, share_ns
      run(function()
        local s = wall()
        for _ = 1, reps do task.await(m:call("echo", t)) end
        copy_ns = (wall() - s) / reps
        local sh = task.workers.share(t)
        local warm = {} -- every worker decodes its copy once
        for i = 1, maxp * 4 do warm[i] = m:call("size", sh) end
        for i = 1, #warm do task.await(warm[i]) end
        s = wall()
        for _ = 1, reps do task.await(m:call("size", sh)) end
        share_ns = (wall() - s) / reps
      end)
      local str, str_ns = string.rep("x", kib * 1024)
      run(function()
        local s = wall()
        for _ = 1, reps do task.await(m:call("echo", str)) end
        str_ns = (wall() - s) / reps
      end)
      out("test=payload kib=%d table_both_ways_us=%.1f table_ns_per_kib=%.0f string_both_ways_us=%.1f string_ns_per_kib=%.0f share_us=%.1f",
        kib, copy_ns / 1e3, copy_ns / kib, str_ns / 1e3, str_ns / kib, share_ns / 1e3)
    end
    local rt = quick and 200 or 20000
    local idle_ns, piped_ns, allocs
    run(function()
      for _ = 1, 100 do task.await(m:call("empty")) end
      local a0 = bench.allocs()
      local s = wall()
      for _ = 1, rt do task.await(m:call("empty")) end
      idle_ns = (wall() - s) / rt
      allocs = (bench.allocs() - a0) / rt
      s = wall()
      local done = 0
      while done < rt do
        local ps = {}
        for i = 1, 256 do ps[i] = m:call("empty") end
        for i = 1, 256 do task.await(ps[i]) end
        done = done + 256
      end
      piped_ns = (wall() - s) / done
    end)
    out("test=roundtrip one_at_a_time_us=%.1f pipelined_256_us=%.2f lua_allocs_per_job=%.1f",
      idle_ns / 1e3, piped_ns / 1e3, allocs)
    -- frame isolation: 200 tasks doing a little work each frame; frames
    -- timed one by one with the workers idle, then saturated by 1 ms jobs
    local nframes = quick and 50 or 2000
    local function frames_with(saturate)
      local times, stop = {}, false
      local feeder
      if saturate then
        feeder = task.spawn(function()
          while not stop do
            local ps = {}
            for i = 1, maxp * 2 do ps[i] = m:call("kernel", k) end
            for i = 1, #ps do task.await(ps[i]) end
          end
        end)
      end
      local busy = {}
      for i = 1, 200 do
        busy[i] = task.spawn(function()
          while not stop do jobs.kernel(20); task.yield() end
        end)
      end
      bench.frames(10, DT)
      for i = 1, nframes do
        local s = wall()
        bench.frames(1, DT)
        times[i] = wall() - s
      end
      stop = true
      bench.run_until_idle(DT, 100000000)
      table.sort(times)
      return times[math.max(1, nframes // 2)], times[math.max(1, math.floor(nframes * 0.99))]
    end
    local i50, i99 = frames_with(false)
    local s50, s99 = frames_with(true)
    out("test=frames workers=idle p50_us=%.0f p99_us=%.0f", i50 / 1e3, i99 / 1e3)
    out("test=frames workers=saturated p50_us=%.0f p99_us=%.0f", s50 / 1e3, s99 / 1e3)
    pool:close()
    bench.frames(1, DT)
  end

  -- W7_payload: a string of 1 KiB, 64 KiB and 1 MiB echoed by a worker
  -- (argument and result), one call at a time: the median of 5 batches of
  -- `payload_calls` calls, in ns a KiB (suite.sh runs it interleaved with
  -- luv's, round by round).
  function W.W7_payload(n)
    local pool = task.workers{threads = math.max(1, n), queue = 64}
    local m = pool:open("w7_jobs")
    run(function() for _ = 1, 8 do task.await(m:call("empty")) end end)
    for _, kib in ipairs(PAYLOAD_KIB) do
      local str = string.rep("x", kib * 1024)
      local calls = payload_calls(kib)
      local batches = {}
      run(function()
        for _ = 1, 2 do task.await(m:call("echo", str)) end
        for b = 1, PAYLOAD_BATCHES do
          local s = wall()
          for _ = 1, calls do task.await(m:call("echo", str)) end
          batches[b] = (wall() - s) / calls / kib
        end
      end)
      out("test=payload_string kib=%d threads=%d ns_per_kib=%.0f", kib, n, median(batches))
    end
    pool:close()
    bench.frames(1, DT)
  end
end

if impl == "luv" then

  function W.W7(n)
    local njobs = quick and 16 or n
    local k = calibrate()
    local p = tonumber(os.getenv("UV_THREADPOOL_SIZE") or "4")
    local kernel = uv.new_work(function(k)
      local x = 0
      for i = 1, k do x = (x + i * 7) % 1000003 end
      return x
    end, function() end)
    -- throughput
    local pending = njobs
    local worker = uv.new_work(function(k)
      local x = 0
      for i = 1, k do x = (x + i * 7) % 1000003 end
      return x
    end, function() pending = pending - 1 end)
    -- warm every thread of the pool
    for _ = 1, p * 2 do uv.queue_work(kernel, 1) end
    uv.run()
    local s = wall()
    for _ = 1, njobs do uv.queue_work(worker, k) end
    uv.run()
    local tp = wall() - s
    assert(pending == 0)
    out("test=throughput where=new_work p=%d ms=%.1f", p, ms(tp))
    -- payload: luv passes no tables; the closest is a string of that size
    for _, kib in ipairs({1, 64, 1024}) do
      local str = string.rep("x", kib * 1024)
      local reps = quick and 2 or math.max(4, 2048 // kib)
      local left
      local echo = uv.new_work(function(s) return s end, function(s) left = left - 1 end)
      left = reps
      local t0 = wall()
      for _ = 1, reps do uv.queue_work(echo, str); uv.run() end
      out("test=payload kib=%d string_both_ways_us=%.1f string_ns_per_kib=%.0f", kib,
        (wall() - t0) / reps / 1e3, (wall() - t0) / reps / kib)
    end
    -- round trips
    local rt = quick and 200 or 20000
    local empty = uv.new_work(function() end, function() end)
    for _ = 1, 100 do uv.queue_work(empty); uv.run() end
    local a0 = bench.allocs()
    local t0 = wall()
    for _ = 1, rt do uv.queue_work(empty); uv.run() end
    local one = (wall() - t0) / rt
    local allocs = (bench.allocs() - a0) / rt
    t0 = wall()
    local done = 0
    while done < rt do
      for _ = 1, 256 do uv.queue_work(empty) end
      uv.run()
      done = done + 256
    end
    out("test=roundtrip one_at_a_time_us=%.1f pipelined_256_us=%.2f lua_allocs_per_job=%.1f",
      one / 1e3, (wall() - t0) / done / 1e3, allocs)
  end

  -- W7_payload (see lunaloop's): libuv's pool of UV_THREADPOOL_SIZE threads
  function W.W7_payload()
    local p = tonumber(os.getenv("UV_THREADPOOL_SIZE") or "4")
    local echo = uv.new_work(function(s) return s end, function() end)
    for _, kib in ipairs(PAYLOAD_KIB) do
      local str = string.rep("x", kib * 1024)
      local calls = payload_calls(kib)
      local batches = {}
      for _ = 1, 2 do uv.queue_work(echo, str); uv.run() end
      for b = 1, PAYLOAD_BATCHES do
        local s = wall()
        for _ = 1, calls do uv.queue_work(echo, str); uv.run() end
        batches[b] = (wall() - s) / calls / kib
      end
      out("test=payload_string kib=%d threads=%d ns_per_kib=%.0f", kib, p, median(batches))
    end
  end
end

return W
