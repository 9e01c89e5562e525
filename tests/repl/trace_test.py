#!/usr/bin/env python3
"""trace_test.py: `lunaloop run --trace FILE` writes a valid Chrome trace
event JSON with the expected events: the 16 timing tracks named, one slice
per task resume on the track of its timing, a flow arrow from each task to
the tasks it created, a frame marker, a frame slice and the spare time
between frames, the counters, the budget's deferrals; and a trace stops at
its size limit, still valid JSON.

Usage: trace_test.py LUNALOOP SCRIPT
"""
import json
import os
import subprocess
import sys
import tempfile

TIMINGS = ["Initialization", "LastInitialization", "EarlyUpdate", "LastEarlyUpdate",
           "FixedUpdate", "LastFixedUpdate", "PreUpdate", "LastPreUpdate", "Update",
           "LastUpdate", "PreLateUpdate", "LastPreLateUpdate", "PostLateUpdate",
           "LastPostLateUpdate", "TimeUpdate", "LastTimeUpdate"]


def main():
    lunaloop, script = sys.argv[1], sys.argv[2]
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    p = subprocess.run([lunaloop, "run", "--fast", "--trace", path, script],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, "run failed: %r" % p.stderr
    with open(path) as f:
        events = json.load(f)  # valid JSON, or this raises
    assert isinstance(events, list)

    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    for tid, timing in enumerate(TIMINGS):
        assert names.get(tid) == timing, "track %d is named %r" % (tid, names.get(tid))
    assert names.get(17) == "frames" and names.get(18) == "collector", names

    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0, e
    slices = [e for e in events if e["ph"] == "X" and e["cat"] == "task"]
    by_task = {}
    for e in slices:
        by_task.setdefault(e["name"], []).append(TIMINGS[e["tid"]] if e["tid"] < 16 else "host")
    assert by_task.get("main") == ["host"], by_task
    assert sorted(by_task.get("fixed", [])) == sorted(["Update"] + ["FixedUpdate"] * 3), by_task
    assert by_task.get("late") == ["Update", "LastPostLateUpdate", "Initialization"], by_task
    assert by_task.get("parent") == ["Update"] and by_task.get("child") == ["Update"], by_task
    assert by_task.get("remover") == ["Update", "Initialization"], by_task
    assert by_task.get("waiter") == ["Update", "Initialization"], by_task
    assert len(slices) == 14, "one slice per resume, no more: %r" % by_task
    check_flows(events, slices)

    frames = [e["args"]["frame"] for e in events if e["ph"] == "i" and e["name"] == "frame"]
    assert frames == list(range(1, len(frames) + 1)) and len(frames) >= 4, frames
    counters = [e for e in events if e["ph"] == "C" and e["name"] == "tasks"]
    assert len(counters) == len(frames)
    check_frames(events, len(frames))
    # Slices carry the frame they ran in: "late" ends in the frame after its
    # delay_frame(2) resumed.
    late = [e["args"]["frame"] for e in slices if e["name"] == "late"]
    assert late[1] == late[0] + 2 and late[2] == late[1] + 1, late
    print("ok: %d events, %d slices, %d frames" % (len(events), len(slices), len(frames)))
    check_size_limit(lunaloop)
    return 0


def check_flows(events, slices):
    """One spawn arrow from the main chunk (host track) to each task it
    created, ids 2 to 6, and one from parent to child (id 7) on the Update
    track; each ends at the first resume of its task, inside that slice.
    One wake arrow (id 2^40 + 1) from late's end to waiter's second slice,
    both on the Initialization track: a task settles after its last resume,
    so the arrow starts at a "woken" instant just after late's slice."""
    flows = [e for e in events if e["ph"] in "sf"]
    for e in flows:
        assert e["cat"] in ("spawn", "wake") and e["name"] == e["cat"], e
        assert (e["ph"] == "f") == (e.get("bp") == "e"), e
    spawn = [e for e in flows if e["cat"] == "spawn"]
    starts = sorted((e["id"], e["tid"]) for e in spawn if e["ph"] == "s")
    ends = sorted((e["id"], e["tid"]) for e in spawn if e["ph"] == "f")
    assert starts == [(2, 16), (3, 16), (4, 16), (5, 16), (6, 16), (7, 8)], starts
    assert ends == [(2, 8), (3, 8), (4, 8), (5, 8), (6, 8), (7, 8)], ends
    first = {}
    for e in sorted(slices, key=lambda e: e["ts"]):
        first.setdefault(e["args"]["id"], e)
    for e in spawn:
        if e["ph"] == "f":
            s = first[e["id"]]
            assert s["ts"] <= e["ts"] <= s["ts"] + s["dur"], (e, s)
    wake = [(e["ph"], e["id"], e["tid"]) for e in flows if e["cat"] == "wake"]
    assert wake == [("s", 2**40 + 1, 0), ("f", 2**40 + 1, 0)], wake
    s, f = [e for e in flows if e["cat"] == "wake"]
    late, waiter = [[x for x in slices if x["name"] == n][-1] for n in ("late", "waiter")]
    assert late["ts"] + late["dur"] <= s["ts"] <= f["ts"], (s, late)
    woken = [(e["tid"], e["ts"]) for e in events if e["ph"] == "i" and e["name"] == "woken"]
    assert woken == [(0, s["ts"])], woken
    assert waiter["ts"] <= f["ts"] <= waiter["ts"] + waiter["dur"], (f, waiter)


def check_frames(events, nframes):
    """A slice per frame and the spare time between two on the frames track
    (tid 17); heap and callbacks counters after each frame; the Update
    budget put off 2 callbacks in the first frame only."""
    frame_slices = [e["name"] for e in events if e["ph"] == "X" and e["cat"] == "frame"]
    assert frame_slices == ["frame %d" % (i + 1) for i in range(nframes)], frame_slices
    spare = [e for e in events if e["ph"] == "X" and e["cat"] == "spare"]
    assert len(spare) == nframes - 1, len(spare)
    assert all(e["tid"] == 17 for e in events if e["ph"] == "X" and e["cat"] in ("frame", "spare"))
    heap = [e["args"]["heap"] for e in events if e["ph"] == "C" and e["name"] == "heap"]
    assert len(heap) == nframes and all(h > 0 for h in heap), heap
    callbacks = [e["args"]["callbacks"] for e in events
                 if e["ph"] == "C" and e["name"] == "callbacks"]
    assert callbacks == [3] + [0] * (nframes - 1), callbacks
    run = [e["args"]["callbacks_run"] for e in events
           if e["ph"] == "C" and e["name"] == "callbacks_run"]
    assert run == [1] + [0] * (nframes - 1), run
    deferred = [(e["tid"], e["args"]["callbacks"]) for e in events
                if e["ph"] == "i" and e["name"] == "deferred"]
    assert deferred == [(8, 2)], deferred
    gc = [e for e in events if e["ph"] == "X" and e["cat"] == "gc"]
    assert gc and all(e["tid"] == 18 and e["name"] == "gc" and e["args"]["steps"] >= 1
                      for e in gc), gc
    assert len(gc) <= nframes, gc


def check_size_limit(lunaloop):
    """A trace stops recording at its size limit (LUNALOOP_TRACE_LIMIT bytes
    here; 1 GiB by default), says so once, and is still valid JSON."""
    tmp = tempfile.mkdtemp()
    script = os.path.join(tmp, "forever.lua")
    with open(script, "w") as f:
        f.write("task.spawn(function() while true do task.yield() end end)\n")
    path = os.path.join(tmp, "capped.json")
    limit = 100000
    env = dict(os.environ, LUNALOOP_TRACE_LIMIT=str(limit))
    p = subprocess.run([lunaloop, "run", "--fast", "--frames", "3000", "--trace", path, script],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, "capped run failed: %r" % p.stderr
    lines = [l for l in p.stderr.splitlines() if "later events are not recorded" in l]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("lunaloop: the trace %s reached " % path), lines[0]
    size = os.path.getsize(path)
    assert limit <= size < limit + 1000, "size %d for a limit of %d" % (size, limit)
    with open(path) as f:
        events = json.load(f)
    frames = [e["args"]["frame"] for e in events if e["ph"] == "i" and e["name"] == "frame"]
    assert 0 < len(frames) < 3000, len(frames)
    print("ok: capped at %d bytes, %d frames recorded of 3000" % (size, len(frames)))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAILED: %s" % e, file=sys.stderr)
        sys.exit(1)
