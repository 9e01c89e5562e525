#!/usr/bin/env python3
"""trace_test.py: `lunaloop run --trace FILE` writes a valid Chrome trace
event JSON with the expected events: the 16 timing tracks named, one slice
per task resume on the track of its timing, a frame marker per frame.

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

    slices = [e for e in events if e["ph"] == "X"]
    for e in slices:
        assert e["dur"] >= 0 and e["ts"] >= 0 and e["cat"] == "task"
    by_task = {}
    for e in slices:
        by_task.setdefault(e["name"], []).append(TIMINGS[e["tid"]] if e["tid"] < 16 else "host")
    assert by_task.get("main") == ["host"], by_task
    assert sorted(by_task.get("fixed", [])) == sorted(["Update"] + ["FixedUpdate"] * 3), by_task
    assert by_task.get("late") == ["Update", "LastPostLateUpdate", "Initialization"], by_task
    assert len(slices) == 8, "one slice per resume, no more: %r" % by_task

    frames = [e["args"]["frame"] for e in events if e["ph"] == "i" and e["name"] == "frame"]
    assert frames == list(range(1, len(frames) + 1)) and len(frames) >= 4, frames
    counters = [e for e in events if e["ph"] == "C" and e["name"] == "tasks"]
    assert len(counters) == len(frames)
    # Slices carry the frame they ran in: "late" ends in the frame after its
    # delay_frame(2) resumed.
    late = [e["args"]["frame"] for e in slices if e["name"] == "late"]
    assert late[1] == late[0] + 2 and late[2] == late[1] + 1, late
    print("ok: %d events, %d slices, %d frames" % (len(events), len(slices), len(frames)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAILED: %s" % e, file=sys.stderr)
        sys.exit(1)
