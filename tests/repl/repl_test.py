#!/usr/bin/env python3
"""repl_test.py: `lunaloop repl` used as a person would, through a
pseudo-terminal: type, wait, read the screen (term.py keeps a model of it).

Usage: repl_test.py LUNALOOP CASE. Each case_NAME function is the ctest test
repl.NAME (label "repl"). Exit 0 on success, 1 on failure.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from term import Session  # noqa: E402

LUNALOOP = None


def start(*args, env=None):
    e = {"LUNALOOP_HISTORY": ""}
    e.update(env or {})
    s = Session([LUNALOOP, "repl"] + list(args), env=e)
    wait_prompt(s)
    return s


def last_line(text):
    lines = text.splitlines()
    return lines[-1] if lines else ""


def wait_prompt(s, prompt=">", timeout=10):
    """Waits for an empty prompt on the last line of the screen."""
    return s.wait_for(lambda t: last_line(t) == prompt, timeout, "the prompt %r" % prompt)


def enter(s, line):
    s.type(line + "\r")


def check(cond, what, s=None):
    if not cond:
        raise AssertionError(what + ("\nscreen:\n" + s.screen.text() if s else ""))


def case_expressions_and_continuation():
    """Expressions print as in `lua`; an unfinished chunk continues."""
    s = start()
    try:
        enter(s, "1 + 1")
        s.wait_for(lambda t: "> 1 + 1\n2\n>" in t)
        enter(s, "'a', nil, 3")
        s.wait_for(re.compile(r"a\s+nil\s+3").search)
        enter(s, "function f(x)")
        wait_prompt(s, ">>")
        enter(s, "  return x * 2 end")
        wait_prompt(s)
        enter(s, "f(21)")
        s.wait_for("\n42\n")
        enter(s, "error('boom')")
        s.wait_for("stdin:1: boom")
        wait_prompt(s)
        enter(s, "x = = 1")
        s.wait_for("unexpected symbol")
        wait_prompt(s)
    finally:
        s.close()


def case_top_level_await():
    """A chunk that awaits holds the prompt while the loop ticks, then
    prints and gives the prompt back."""
    s = start("--hz", "60")
    try:
        enter(s, "f0 = task.frame()")
        wait_prompt(s)
        t0 = time.time()
        enter(s, "task.delay(0.5) print('waited', task.frame() - f0)")
        s.pump(0.2)
        check(last_line(s.screen.text()) != ">", "the prompt came back before the chunk ended", s)
        text = s.wait_for(re.compile(r"\nwaited\s+\d+").search)
        elapsed = time.time() - t0
        frames = int(re.search(r"waited\s+(\d+)", text).group(1))
        check(frames >= 25, "the loop ticked while waiting (%d frames)" % frames, s)
        check(elapsed >= 0.45, "the delay took real time (%.2fs)" % elapsed, s)
        wait_prompt(s)
        enter(s, "task.delay_frame(3) return 'three frames later'")
        s.wait_for("three frames later")
        wait_prompt(s)
    finally:
        s.close()


def case_background_output_keeps_the_typed_line():
    """A background task prints while a line is being typed: its output
    appears above, and the typed line is intact below."""
    s = start()
    try:
        enter(s, "task.spawn(function() for i = 1, 3 do task.delay(0.3) print('bg', i) end end) &")
        s.wait_for(re.compile(r"^\[\d+\] ", re.M).search)
        wait_prompt(s)
        s.type("local typed = 'half a line")
        text = s.wait_for(re.compile(r"bg\s+3").search, what="bg 3")
        s.pump(0.2)
        text = s.screen.text()
        check(s.screen.cursor_line() == "> local typed = 'half a line",
              "the typed line is intact after the prints", s)
        check(last_line(text) == "> local typed = 'half a line", "it is the last line", s)
        for line in text.splitlines():
            if "bg" in line and "half" in line:
                raise AssertionError("output mixed into the typed line: %r" % line)
        bg = [l for l in text.splitlines() if re.match(r"bg\s+\d$", l)]
        check(len(bg) == 3, "three lines of background output, each alone", s)
        s.type("' print(typed)\r")
        s.wait_for("\nhalf a line\n")
        wait_prompt(s)
        enter(s, ":bg task.delay(0.1) print('from :bg')")
        s.wait_for("from :bg")
    finally:
        s.close()


def case_tasks_lists_waits_and_timings():
    s = start()
    try:
        enter(s, "sleeper = task.spawn(function() task.delay(100, 'LastUpdate') end) sleeper.name = 'sleeper'")
        wait_prompt(s)
        enter(s, "watcher = task.spawn(function() task.wait_until(function() return false end, 'PreUpdate') end)")
        wait_prompt(s)
        enter(s, "framer = task.spawn(function() task.delay_frame(600, 'FixedUpdate') end)")
        wait_prompt(s)
        enter(s, ":tasks")
        text = s.wait_for("sleeper ")
        wait_prompt(s)
        rows = {l.split()[1]: l for l in text.splitlines() if re.match(r"^\s+\d+\s", l)}
        check("id" in text and "status" in text and "timing" in text and "age" in text, "a header", s)
        sl = rows.get("sleeper", "")
        check(re.search(r"suspended\s+timer\s+LastUpdate\s+in 9\d\.\d+s scaled\s+\d+$", sl) is not None,
              "sleeper: waits on a timer at LastUpdate, due in ~100 s", s)
        w = [l for n, l in rows.items() if "predicate" in l]
        check(len(w) == 1 and "PreUpdate" in w[0], "the watcher waits on a predicate at PreUpdate", s)
        f = [l for n, l in rows.items() if "frame " in l]
        check(len(f) == 1 and "FixedUpdate" in f[0], "the frame wait shows its frame and timing", s)
        enter(s, "sleeper.id")
        sid = s.wait_for(re.compile(r"sleeper\.id\n(\d+)\n").search)
        sid = re.search(r"sleeper\.id\n(\d+)", sid).group(1)
        enter(s, ":cancel " + sid)
        s.wait_for("cancelled " + sid)
        enter(s, "sleeper:status()")
        s.wait_for("\ncancelled\n")
    finally:
        s.close()


def case_step_while_paused():
    """:pause stops the frames; :step N runs exactly N."""
    s = start()
    try:
        enter(s, ":pause")
        s.wait_for(re.compile(r"paused at frame \d+").search)
        wait_prompt(s)
        enter(s, "f0 = task.frame()")
        wait_prompt(s)
        s.pump(0.3)
        enter(s, "task.frame() - f0")
        s.wait_for("\n0\n")
        enter(s, ":step 5")
        s.wait_for(re.compile(r"paused at frame \d+\n>").search)
        enter(s, "task.frame() - f0")
        s.wait_for("\n5\n")
        wait_prompt(s)
        s.pump(0.3)
        enter(s, ":step")
        wait_prompt(s)
        enter(s, "'after step', task.frame() - f0")
        s.wait_for(re.compile(r"after step\s+6").search)
        enter(s, "task.delay_frame(1) print('resumed')")
        s.wait_for("waits while paused")
        wait_prompt(s)
        enter(s, ":resume")
        s.wait_for("resumed\n")
        enter(s, ":timescale 0.5")
        s.wait_for("time scale 0.5")
        enter(s, "task.time_scale()")
        s.wait_for("\n0.5\n")
        enter(s, ":hz 30")
        s.wait_for("30 frames per second")
    finally:
        s.close()


def case_hz_takes_the_range_and_message_of_the_option():
    """`:hz` took any rate above 0 (a rate below 1e-9 Hz gave a period the
    clocks cannot count) and refused with a message of its own, while
    `--hz` takes 1e-9 to 1e9 Hz. Both share one parser now: the limits are
    taken, what lies past them is refused with --hz's message."""
    s = start()
    try:
        enter(s, ":hz 1e9")
        s.wait_for("\n1e+09 frames per second\n")
        wait_prompt(s)
        enter(s, ":hz 2e9")
        s.wait_for("\nbad value '2e9' for :hz (expected a rate in Hz from 1e-9 to 1e9)\n")
        wait_prompt(s)
        enter(s, ":hz 1e-9")
        s.wait_for("\n1e-09 frames per second\n")
        wait_prompt(s)
        enter(s, ":hz 9e-10")
        s.wait_for("\nbad value '9e-10' for :hz (expected a rate in Hz from 1e-9 to 1e9)\n")
        wait_prompt(s)
        enter(s, ":hz 60")
        s.wait_for("\n60 frames per second\n")
        enter(s, "task.delay_frame(2) return 'frames run'")
        s.wait_for("\nframes run\n")
        wait_prompt(s)
    finally:
        s.close()


def case_ctrl_c_cancels_the_running_chunk():
    s = start()
    try:
        enter(s, "local c <close> = setmetatable({}, {__close = function() print('closed') end}) task.delay(100)")
        s.pump(0.3)
        check(last_line(s.screen.text()) != ">", "the chunk holds the prompt", s)
        s.type("\x03")
        s.wait_for("cancelled")
        s.wait_for("closed")
        wait_prompt(s)
        enter(s, "6 * 7")
        s.wait_for("\n42\n")
        check(re.search(r"\^C\nclosed\ncancelled\n>", s.screen.text()) is not None,
              "its <close> ran, then the REPL said so", s)
        # A chunk that never awaits is interrupted (and so cancelled) too.
        enter(s, "while true do end")
        s.pump(0.5)
        s.type("\x03")
        s.wait_for("while true do end\n^C\ncancelled\n>")
        wait_prompt(s)
        enter(s, "'alive'")
        s.wait_for("\nalive\n")
    finally:
        s.close()


def case_ctrl_c_clears_the_line():
    s = start()
    try:
        s.type("half typed")
        s.pump(0.1)
        s.type("\x03")
        s.wait_for(lambda t: t.endswith("half typed^C\n>"))
        enter(s, "function g()")
        wait_prompt(s, ">>")
        s.type("\x03")
        wait_prompt(s)
        enter(s, "3 * 3")
        s.wait_for("\n9\n")
    finally:
        s.close()


def case_ctrl_d_exits_after_cancelling_every_task():
    s = start()
    try:
        enter(s, "task.spawn(function() local c <close> = setmetatable({}, {__close = "
                 "function(_, e) print('to-be-closed ran', task.is_cancelled(e)) end}) task.delay(100) end) &")
        wait_prompt(s)
        s.type("\x04")
        status = s.wait_exit()
        check(status == 0, "exit status 0, got %r" % status, s)
        check(re.search(r"to-be-closed ran\s+true", s.screen.text()) is not None,
              "the background task was cancelled and its <close> ran", s)
    finally:
        s.close()


def hang_up(ignore_sighup, line=None):
    """Starts the REPL on a pty (SIGHUP ignored or not), types `line` (it
    must print something), closes the pty's master side and returns the
    REPL's wait status."""
    import pty
    import signal
    pid, fd = pty.fork()
    if pid == 0:
        if ignore_sighup:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.environ["LUNALOOP_HISTORY"] = ""
        os.execv(LUNALOOP, [LUNALOOP, "repl"])
    try:
        seen = b""
        deadline = time.time() + 10
        while not seen.rstrip().endswith(b">") and time.time() < deadline:
            seen += os.read(fd, 4096)
        check(seen.rstrip().endswith(b">"), "the prompt, got %r" % seen[-80:])
        if line is not None:
            os.write(fd, (line + "\r").encode())
            start = len(seen)
            # The prompt at the start of a line: the echo of the typed line
            # arrives in pieces, and one may end in a ">" of its own.
            while not seen[start:].rstrip().endswith(b"\n>") and time.time() < deadline:
                seen += os.read(fd, 4096)
        os.close(fd)  # hang up
        deadline = time.time() + 5
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.05)
        raise AssertionError("the REPL still runs 5 s after the hang-up")
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def case_a_hung_up_terminal_ends_the_repl():
    """The terminal goes away (its master side closed) while SIGHUP is
    ignored, as under nohup: the REPL ends as on Ctrl-D instead of polling
    a dead terminal in a busy loop."""
    status = hang_up(True)
    check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
          "exit status 0 as on Ctrl-D, got %r" % status)


def case_a_hang_up_ends_the_repl_as_sighup_does():
    """The terminal goes away while SIGHUP is not ignored: the kernel sends
    SIGHUP, which killed the REPL at once (its tasks' to-be-closed
    variables never ran). It ends as Ctrl-D does, with status 129."""
    marker = os.path.join(tempfile.mkdtemp(), "closed")
    status = hang_up(False, "task.spawn(function() local c <close> = setmetatable({}, {__close = "
                            "function() io.open(%r, 'w'):close() end}) task.delay(100) end) &"
                     % marker)
    check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 129,
          "exit status 129, got %r" % status)
    check(os.path.exists(marker), "the task's to-be-closed variable ran")


def case_history_is_kept_in_a_file():
    d = tempfile.mkdtemp()
    hist = os.path.join(d, "history")
    s = start(env={"LUNALOOP_HISTORY": hist})
    try:
        enter(s, "remembered = 1")
        wait_prompt(s)
        s.type("\x04")
        s.wait_exit()
    finally:
        s.close()
    check(os.path.exists(hist) and "remembered = 1" in open(hist, errors="replace").read().replace("\\040", " "),
          "the line is in the history file")
    s = start(env={"LUNALOOP_HISTORY": hist})
    try:
        s.type("\x1b[A")  # up arrow: the previous session's line
        s.wait_for(lambda t: last_line(t) == "> remembered = 1")
    finally:
        s.close()


def case_trace_on_and_off():
    d = tempfile.mkdtemp()
    path = os.path.join(d, "repl.json")
    s = start()
    try:
        enter(s, ":trace on " + path)
        s.wait_for("tracing to")
        enter(s, "t = task.spawn(function() for i = 1, 3 do task.yield('LastUpdate') end end) t.name = 'traced'")
        wait_prompt(s)
        enter(s, "task.delay_frame(5)")
        wait_prompt(s)
        enter(s, ":trace off")
        s.wait_for("trace written")
    finally:
        s.close()
    events = json.load(open(path))
    names = [e["name"] for e in events if e["ph"] == "X"]
    check(names.count("traced") == 3, "the three resumes at LastUpdate after naming: %r" % names)
    check(sum(1 for e in events if e["ph"] == "i" and e["name"] == "frame") >= 5, "frame markers")


def cpu_seconds(pid):
    """User + system CPU time of process pid so far, or None without /proc."""
    try:
        fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def case_a_long_typed_line():
    """Typing a line of 8,000 characters aborted the debug build
    inside libedit ("malloc(): invalid next size"). Its readline-compatible
    callback interface keeps rl_line_buffer pointing at the buffer the line
    was first encoded into, and writes through it on every key once the line
    has outgrown that buffer's 1,024 bytes (valgrind: "invalid write ... in
    rl_callback_read_char"). Each key also re-encoded the whole line twice,
    so echoing a line took time quadratic in its length. The line is typed
    key by key (a few keys a read), then run."""
    n = 8000
    s = start("--fast")
    try:
        line = "x = '" + "a" * n + "' print(#x)"
        cpu0 = cpu_seconds(s.pid)
        for i in range(0, len(line), 8):
            os.write(s.fd, line[i:i + 8].encode())
            s.pump(0.001)
        s.wait_for(lambda t: t.endswith("a' print(#x)"), 60, "the whole line echoed")
        cpu1 = cpu_seconds(s.pid)
        s.type("\r")
        s.wait_for("\n%d\n" % n, 30)
        wait_prompt(s)
        typed = s.screen.text().split("> x = '", 1)[1].split("' print(#x)", 1)[0]
        check(typed.replace("\n", "") == "a" * n, "the echoed line is the typed line", s)
        # Linear echo: 8,000 keys cost a few hundredths of a second of CPU
        # here; the quadratic echo cost about 3 s (more on a slower machine).
        if cpu0 is not None:
            check(cpu1 - cpu0 < 1.0, "echoing %d keys took %.2f s of CPU" % (len(line), cpu1 - cpu0), s)
        enter(s, "6 * 7")
        s.wait_for("\n42\n")
        wait_prompt(s)
        # The line is in the history, whole (two entries back).
        s.type("\x1b[A\x1b[A")
        s.wait_for(lambda t: t.endswith("' print(#x)") and last_line(t) != ">")
    finally:
        s.close()


def case_ctrl_c_stops_a_long_step():
    """`:step 100000000` ran every frame before looking at the
    keyboard, so Ctrl-C could not stop it. It now stops after the current
    frame, says how many ran, and the loop stays paused. That Ctrl-C does
    not interrupt the callback the frame was running (a busy one here); a
    second Ctrl-C does, for a frame that never ends."""
    s = start("--fast")
    try:
        enter(s, ":pause")
        s.wait_for(re.compile(r"paused at frame \d+").search)
        enter(s, "f0, n = task.frame(), 0 busy = task.on('Update', function() for i = 1, 2000 do n = n + 1 end end)")
        wait_prompt(s)
        enter(s, ":step 100000000")
        s.pump(0.5)
        check(last_line(s.screen.text()) != ">", "the step holds the prompt", s)
        s.type("\x03")
        text = s.wait_for(re.compile(r"\^C\nstopped after \d+ of 100000000 frames\npaused at frame \d+\n>").search,
                          10, "the step stopped by Ctrl-C")
        done = int(re.search(r"stopped after (\d+) of", text).group(1))
        check(done > 0, "some frames ran", s)
        check("interrupted" not in text, "the busy callback was left alone", s)
        enter(s, "task.frame() - f0, n == 2000 * (task.frame() - f0)")
        s.wait_for(re.compile(r"\n%d\s+true\n" % done).search, what="the frames it said, each whole")
        s.pump(0.3)
        enter(s, "'still paused', task.frame() - f0")
        s.wait_for(re.compile(r"still paused\s+%d\n" % done).search)
        # A frame that never ends: the first Ctrl-C waits for it, the second
        # interrupts it.
        enter(s, "busy:remove() task.on('Update', function() while true do end end)")
        wait_prompt(s)
        enter(s, ":step 5")
        s.pump(0.3)
        s.type("\x03")
        s.pump(0.5)
        check("stopped after" not in s.screen.text().split(":step 5", 1)[1], "the first Ctrl-C waits for the frame", s)
        s.type("\x03")
        s.wait_for(re.compile(r"interrupted(.*\n)*stopped after 1 of 5 frames\npaused at frame \d+\n>").search,
                   10, "the stuck frame interrupted")
    finally:
        s.close()


# Background work for the Ctrl-C cases below: a busy callback (frames of a
# few milliseconds, back to back at --hz 1000, so a Ctrl-C nearly always
# lands inside a frame, while that callback runs) and a task that counts
# frames.
BACKGROUND = ("busy = task.on('Update', function() local s = 0 for i = 1, 2e5 do s = s + i end end) "
              "ticks = 0 counter = task.spawn(function() while true do task.yield() ticks = ticks + 1 end end) "
              "counter.name = 'counter'")


def start_with_background():
    s = start("--hz", "1000")
    enter(s, BACKGROUND)
    wait_prompt(s)
    return s


def check_background_alive(s, ticks_before=None):
    """The busy callback and the counter survived, nothing failed."""
    enter(s, "task.stats().callbacks, counter:status(), task.stats().errors")
    s.wait_for(re.compile(r"\n1\s+suspended\s+0\n>").search, what="callback, counter and no error")
    if ticks_before is not None:
        enter(s, "ticks > %d" % ticks_before)
        s.wait_for(re.compile(r"ticks > %d\ntrue\n" % ticks_before).search, what="the counter goes on")
    enter(s, ":tasks")
    s.wait_for(re.compile(r"\n\s+\d+\s+counter\s+suspended\s+yield\s").search, what="the counter in :tasks")
    wait_prompt(s)
    check("interrupted" not in s.screen.text(), "nothing was interrupted", s)


def ticks_now(s):
    enter(s, "'ticks', ticks")
    text = s.wait_for(re.compile(r"\nticks\s+\d+\n>").search)
    return int(re.findall(r"\nticks\s+(\d+)\n", text)[-1])


def case_ctrl_c_at_the_prompt_leaves_background_work_alone():
    """Ctrl-C at the prompt interrupted whatever task or callback
    a frame ran at that instant (the busy callback here, which then failed
    and was removed). It only clears the line now."""
    s = start_with_background()
    try:
        t0 = ticks_now(s)
        for i in range(1, 9):
            s.type("x = %d" % i)
            # The terminal raises SIGINT when ^C is typed, before the REPL
            # has read the bytes typed ahead of it: wait for their echo.
            s.wait_for(lambda t: t.endswith("> x = %d" % i), what="x = %d echoed" % i)
            s.type("\x03")
            s.wait_for(lambda t: t.endswith("> x = %d^C\n>" % i), what="Ctrl-C %d cleared the line" % i)
        enter(s, "x")
        s.wait_for("> x\nnil\n>")
        check_background_alive(s, t0)
    finally:
        s.close()


def case_ctrl_c_cancels_only_the_waiting_chunk():
    """Ctrl-C while a chunk waits cancels that chunk and nothing else."""
    s = start_with_background()
    try:
        t0 = ticks_now(s)
        for i in range(3):
            enter(s, "me = task.current() task.delay(100)")
            s.pump(0.2)
            check(last_line(s.screen.text()) != ">", "the chunk holds the prompt", s)
            s.type("\x03")
            s.wait_for(lambda t: t.endswith("task.delay(100)\n^C\ncancelled\n>"), what="the chunk cancelled")
            enter(s, "me:status()")
            s.wait_for("> me:status()\ncancelled\n>")
        check_background_alive(s, t0)
    finally:
        s.close()


def case_ctrl_c_interrupts_only_the_stuck_chunk():
    """A chunk stuck in a loop is interrupted by one Ctrl-C (and so
    cancelled), both while it starts and when a frame resumes it; the
    background work is left alone."""
    s = start_with_background()
    try:
        t0 = ticks_now(s)
        enter(s, "while true do end")
        s.pump(0.3)
        s.type("\x03")
        s.wait_for(lambda t: t.endswith("while true do end\n^C\ncancelled\n>"), what="the starting chunk interrupted")
        enter(s, "me = task.current() task.yield() while true do end")
        s.pump(0.3)
        check(last_line(s.screen.text()) != ">", "the chunk holds the prompt", s)
        s.type("\x03")
        s.wait_for(lambda t: t.endswith("task.yield() while true do end\n^C\ncancelled\n>"),
                   what="the resumed chunk interrupted")
        enter(s, "me:status()")
        s.wait_for("> me:status()\ncancelled\n>")
        check_background_alive(s, t0)
    finally:
        s.close()


def case_a_stuck_background_task_takes_a_second_ctrl_c():
    """A background task stuck in a loop holds the frame, so the prompt
    does not answer. The first Ctrl-C cannot tell it from a busy frame and
    leaves it alone; a second one while the same frame runs interrupts it
    (it ends cancelled, and the REPL says which task it was)."""
    s = start_with_background()
    try:
        enter(s, ":bg task.yield() while true do end")
        text = s.wait_for(re.compile(r"\n\[(\d+)\] task\.yield\(\) while tr\.\.\.\n").search)
        stuck = re.search(r"\n\[(\d+)\] task\.yield", text).group(1)
        wait_prompt(s)
        s.pump(0.3)  # the frame that resumes it never ends
        before = s.screen.text()
        s.type("\x03")
        s.pump(0.5)
        check(s.screen.text() == before, "the first Ctrl-C changed nothing", s)
        s.type("\x03")
        s.wait_for(lambda t: t.endswith("\ninterrupted task %s, which kept the frame from ending\n> ^C\n>" % stuck),
                   what="the stuck task interrupted")
        enter(s, "task.stats().callbacks, counter:status(), task.stats().errors, task.stats().tasks")
        s.wait_for(re.compile(r"\n1\s+suspended\s+0\s+2\n>").search, what="only the stuck task went")
        enter(s, ":tasks")
        text = s.wait_for(re.compile(r"\n\s+\d+\s+counter\s+").search)
        wait_prompt(s)
        check(re.search(r"^\s+%s\s" % stuck, s.screen.text(), re.M) is None, "the stuck task is gone", s)
    finally:
        s.close()


def case_an_interrupted_callback_is_reported_once():
    """Interrupting a frame printed "lunaloop: error handler
    failed: interrupted" (the interrupt hook stayed on the thread that runs
    callbacks and the error handler), and every callback after the stuck one
    in that frame failed as well. One report now, and the other callback
    keeps running."""
    s = start("--fast")
    try:
        enter(s, ":pause")
        s.wait_for(re.compile(r"paused at frame \d+").search)
        enter(s, "stuck = task.on('Update', function() while true do end end) "
                 "n = 0 after = task.on('Update', function() n = n + 1 end)")
        wait_prompt(s)
        enter(s, ":step 3")
        s.pump(0.3)
        s.type("\x03")
        s.pump(0.3)
        s.type("\x03")
        text = s.wait_for(re.compile(r"stopped after 1 of 3 frames\npaused at frame \d+\n>").search)
        out = text.split(":step 3\n", 1)[1]
        check(re.match(r"\^C\^C\nlunaloop: callback stdin:1 failed: interrupted\nstack traceback:\n"
                       r"        stdin:1: in function <stdin:1>\n"
                       r"stopped after 1 of 3 frames\n", out) is not None,
              "one report, on its own line", s)
        check("error handler failed" not in text, "the error handler ran", s)
        enter(s, "n, task.stats().callbacks, after:active()")
        s.wait_for(re.compile(r"\n1\s+1\s+true\n>").search, what="the other callback ran and stays")
    finally:
        s.close()


def case_printing_results_is_protected():
    """A chunk's results are printed with tostring: a __tostring that
    raised aborted the REPL ("PANIC: unprotected error"), and one that
    never returned could not be stopped. The error is printed; Ctrl-C
    interrupts the loop."""
    s = start()
    try:
        enter(s, "setmetatable({}, {__tostring = function() error('no string') end})")
        s.wait_for("\nstdin:1: no string\n>")
        enter(s, "setmetatable({}, {__tostring = function() while true do end end})")
        s.pump(0.3)
        check(last_line(s.screen.text()) != ">", "the printing holds the prompt", s)
        s.type("\x03")
        s.wait_for(lambda t: t.endswith("end end})\n^C\ninterrupted\n>"), what="the loop interrupted")
        enter(s, "'alive'")
        s.wait_for("\nalive\n>")
    finally:
        s.close()


def case_bg_without_code_starts_nothing():
    """`:bg` with no code, and a lone `&`, started an empty task.
    They print a usage line and start nothing."""
    s = start()
    try:
        enter(s, "a = task.spawn(function() end).id")
        wait_prompt(s)
        enter(s, ":bg")
        s.wait_for("\nusage: :bg CODE\n>")
        enter(s, ":bg   &")
        s.wait_for(re.compile(r"(usage: :bg CODE\n(.*\n)*){2}>").search)
        enter(s, "&")
        s.wait_for("\nusage: CODE & (runs CODE in the background)\n>")
        enter(s, "   &  ")
        s.wait_for(re.compile(r"(usage: CODE &.*\n(.*\n)*){2}>").search)
        # Two tasks since `a`: this chunk's and the one it spawns.
        enter(s, "task.spawn(function() end).id - a")
        s.wait_for("\n2\n")
        check(re.search(r"^\[\d+\]", s.screen.text(), re.M) is None, "no background task was started", s)
    finally:
        s.close()


# The start of a traceback as the screen shows it (a tab is 8 columns).
TB = "stack traceback:\n        [C]: in function 'error'\n"


def case_error_reports_name_the_task_or_callback():
    """A new user's report: the REPL's error reports did not follow the
    default report of docs/api.md, which `lunaloop run` prints. A background
    task's failure read "task Task(bgtask, failed) failed: ..." (no
    "lunaloop:" prefix, and the task's tostring instead of its name), a
    callback's "a callback failed: ..." (no source or line), and a chunk
    that failed before its first await was reported as a background task
    ("task Task(error('boom'), failed) failed: ...") instead of as the stock
    `lua` shows the error of what was typed. They read as `lunaloop run`
    prints them now: the task's name, or "<source>:<line>" of its function
    or of the callback."""
    s = start()
    try:
        enter(s, "t = task.spawn(function() task.delay(0.2) error('late') end) t.name = 'bgtask'")
        s.wait_for(lambda t: t.endswith(
            "t.name = 'bgtask'\nlunaloop: task bgtask failed: stdin:1: late\n" + TB +
            "        stdin:1: in function <stdin:1>\n>"), what="the named task's report")
        enter(s, "error('boom')")
        s.wait_for(lambda t: t.endswith(
            "\n> error('boom')\nstdin:1: boom\n" + TB + "        stdin:1: in main chunk\n>"),
            what="the chunk's error, as the stock lua shows it")
        enter(s, "task.delay(0.1) error('late chunk')")
        s.wait_for(lambda t: t.endswith(
            "\n> task.delay(0.1) error('late chunk')\nstdin:1: late chunk\n" + TB +
            "        stdin:1: in main chunk\n>"), what="the same after an await")
        enter(s, "u = task.spawn(function() task.delay(0.1) error('anon') end) u = nil")
        s.wait_for(lambda t: t.endswith(
            "u = nil\nlunaloop: task stdin:1 failed: stdin:1: anon\n" + TB +
            "        stdin:1: in function <stdin:1>\n>"), what="an unnamed task by its function")
        enter(s, "h = task.on(function() error('x') end)")
        s.wait_for(lambda t: t.endswith(
            "\n> h = task.on(function() error('x') end)\nlunaloop: callback stdin:1 failed: stdin:1: x\n" +
            TB + "        stdin:1: in function <stdin:1>\n>"), what="the callback's report")
        # A global function: the traceback names it, the report says where
        # it was defined (line 1), as the default report does.
        enter(s, "function cb()")
        wait_prompt(s, ">>")
        enter(s, "  error('y') end h = task.on(cb)")
        s.wait_for(lambda t: t.endswith(
            "\n>>   error('y') end h = task.on(cb)\nlunaloop: callback stdin:1 failed: stdin:2: y\n" +
            TB + "        stdin:2: in function 'cb'\n>"), what="the named callback's report")
        # A background chunk is a task named after its first characters.
        enter(s, "task.delay(0.1) error('bg') &")
        s.wait_for(re.compile(r"\n> task\.delay\(0\.1\) error\('bg'\) &\n\[\d+\] task\.delay\(0\.1\) error\.\.\.\n"
                              r"lunaloop: task task\.delay\(0\.1\) error\.\.\. failed: stdin:1: bg\n"
                              + re.escape(TB) + r"        stdin:1: in main chunk\n>$").search,
                   what="the background chunk's report")
        enter(s, "task.stats().errors")
        s.wait_for("\n> task.stats().errors\n7\n>")
    finally:
        s.close()


def case_task_exit_does_not_say_cancelled():
    """`task.exit(7)` typed at the prompt exited 7, but first printed
    "cancelled" for the chunk that called it (task.exit cancels its caller).
    The REPL now ends without a word, before an await and after one."""
    for line, code in (("task.exit(7)", 7), ("task.delay(0.1) task.exit(3)", 3)):
        s = start()
        try:
            enter(s, line)
            status = s.wait_exit()
            check(status == code, "exit status %r, not %d" % (status, code), s)
            check(s.screen.text().endswith("\n> " + line), "nothing printed after the line", s)
        finally:
            s.close()


def case_load_in_the_background_says_its_id_first():
    """`:load FILE &` of a file that fails before its first await printed
    the failure above the "[N] FILE" line that announces the task. The id
    line comes first now, as for any background chunk, then what the task
    printed, then its report. `...` is empty and `arg` unset in a loaded
    file (docs/repl.md)."""
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)  # a short path: the task is named after it
        with open("bad.lua", "w") as f:
            f.write("print('args', select('#', ...), arg)\nerror('at load')\n")
        s = start()
        try:
            enter(s, ":load bad.lua &")
            s.wait_for(re.compile(r"\n> :load bad\.lua &\n\[\d+\] bad\.lua\nargs    0       nil\n"
                                  r"lunaloop: task bad\.lua failed: bad\.lua:2: at load\n" + re.escape(TB) +
                                  r"        bad\.lua:2: in main chunk\n>$").search,
                       what="the id line, the output, the report")
            # In the foreground, the error shows as a chunk's does.
            enter(s, ":load bad.lua")
            s.wait_for(lambda t: t.endswith(
                "\n> :load bad.lua\nargs    0       nil\nbad.lua:2: at load\n" + TB +
                "        bad.lua:2: in main chunk\n>"), what="the foreground load's error")
        finally:
            s.close()


def case_load_names_the_task_after_the_end_of_a_long_path():
    """A task loaded from a path longer than a name (24 characters) was
    named after the path's first characters, the same directories for
    every file. It keeps the end now, where the file's name is."""
    with tempfile.TemporaryDirectory() as d:
        sub = os.path.join(d, "a_rather_long_directory", "mods")
        os.makedirs(sub)
        path = os.path.join(sub, "enemy_ai.lua")
        with open(path, "w") as f:
            f.write("task.delay(60)\n")
        s = start()
        try:
            enter(s, ":load %s &" % path)
            s.wait_for(lambda t: "\n[1] ...ory/mods/enemy_ai.lua\n" in t,
                       what="the id line with the end of the path")
            enter(s, "print(task.list()[1].name)")
            s.wait_for(lambda t: t.endswith("\n...ory/mods/enemy_ai.lua\n>"),
                       what="the task's name")
        finally:
            s.close()


def case_ctrl_c_stops_a_background_chunk_that_never_waits():
    """A background chunk runs at once until its first await, as
    task.spawn does; one that never gets there holds the prompt, and Ctrl-C
    (it is the chunk just entered) stops it. It was removed without a
    word; the REPL says so now, and a self-cancelled one too."""
    s = start()
    try:
        enter(s, "while true do end &")
        s.wait_for("[1] while true do end &")
        s.pump(0.3)
        check(last_line(s.screen.text()) != ">", "the chunk holds the prompt", s)
        s.type("\x03")
        s.wait_for("[1] while true do end &\n^C\n[1] cancelled\n>")
        wait_prompt(s)
        enter(s, "task.cancel(task.current()) &")
        s.wait_for("\n[2] task.cancel(task.curr...\n[2] cancelled\n>")
        enter(s, "6 * 7")
        s.wait_for("\n42\n")
    finally:
        s.close()


def case_error_values_show_as_stock_lua_shows_them():
    """A raised value that is not a string showed as `table: 0x...`; the
    stock lua says what kind of value it was (with the traceback), and
    shows a __tostring message alone."""
    script = ("error({})\n"
              "error(setmetatable({}, {__tostring = function() return 'custom' end}))\n"
              "error(42)\n"
              "error(setmetatable({}, {__tostring = function() return 42 end}))\n"
              "error(setmetatable({}, {__tostring = function() error('ts', 0) end}))\n")
    p = subprocess.run([LUNALOOP, "repl", "--fast"], input=script, capture_output=True,
                       text=True, timeout=30)
    tb = "stack traceback:\n\t[C]: in function 'error'\n\tstdin:%d: in main chunk\n"
    expected = ("(error object is a table value)\n" + tb % 1 +
                "custom\n" +
                "42\n" + tb % 1 +
                "(error object is a table value)\n" + tb % 1 +
                "ts\n" + tb % 1)
    check(p.stderr == expected, "stderr: %r" % p.stderr)


def case_utf8_keys():
    """Keys are decoded in the locale's encoding and the line reaches Lua
    in it: two UTF-8 characters typed are five bytes in the string."""
    s = start(env={"LC_ALL": "C.UTF-8"})
    try:
        s.type("s = '\u00e9\u20ac'\r")
        wait_prompt(s)
        enter(s, "#s, s")
        s.wait_for(re.compile("\n5\\s+\u00e9\u20ac\n").search)
    finally:
        s.close()


def case_names_are_cut_between_utf8_characters():
    """:tasks cut a long name at byte 17, inside a character (invalid
    UTF-8), and padded by bytes, so the columns no longer lined up. A
    background chunk's name from a long first line was cut the same way."""
    script = ("a = task.spawn(function() task.delay(60) end) a.name = ('\u00e9'):rep(25)\n"
              "b = task.spawn(function() task.delay(60) end) b.name = 'plain'\n"
              ":tasks\n"
              "x = '" + "\u00e9" * 30 + "' task.delay(0) &\n"
              "y = '" + "\u00e9" * 30 + "'\n"
              "print(task.list()[3].name)\n")
    p = subprocess.run([LUNALOOP, "repl", "--fast"], input=script.encode(), capture_output=True,
                       timeout=30)
    out = p.stdout.decode("utf-8")  # raises on invalid UTF-8
    rows = [l for l in out.splitlines() if re.match(r"^\s+\d+\s", l)]
    check(len(rows) == 2, "two task rows: %r" % out)
    check(rows[0].split()[1] == "\u00e9" * 17 + "...", "the name cut after 17 characters: %r" % rows[0])
    check(rows[0].index("suspended") == rows[1].index("suspended"), "aligned columns: %r" % rows)
    names = [l for l in out.splitlines() if l.endswith("...") and l.startswith("x = '\u00e9")]
    check(len(names) == 1, "the chunk's name, cut short: %r" % out)


def case_piped_input_that_failed_exits_1():
    """A replayed session ended with exit 0 whatever failed in it; it now
    ends as a script does: 1 when an error was reported (a chunk, a task)
    or a chunk did not compile, 0 otherwise, task.exit's code first."""
    def replay(script):
        p = subprocess.run([LUNALOOP, "repl", "--fast"], input=script, capture_output=True,
                           text=True, timeout=30)
        return p.returncode, p.stdout
    for script, want in [("print(1)\nerror('x')\nprint(2)\n", 1),
                         ("task.spawn(function() error('in a task') end)\nprint(2)\n", 1),
                         (")\nprint(2)\n", 1),
                         ("error('x')\ntask.exit(0)\n", 0),
                         ("print(1)\nprint(2)\n", 0)]:
        code, out = replay(script)
        check(code == want, "exit %d, expected %d for %r" % (code, want, script))
        check(want == 0 and "task.exit" in script or out.rstrip().endswith("2"),
              "the lines after the error ran: %r" % out)


def case_piped_input_runs_line_by_line():
    """Without a terminal: no prompt, no libedit; each chunk still finishes
    before the next line runs, and the end of input exits 0."""
    script = "print('first')\ntask.delay(0.2)\nprint('after', task.frame() > 0)\n:tasks\n1+2\n"
    p = subprocess.run([LUNALOOP, "repl", "--fast"], input=script, capture_output=True,
                       text=True, timeout=30)
    check(p.returncode == 0, "exit 0: %r %r" % (p.returncode, p.stderr))
    check(p.stdout == "first\nafter\ttrue\nno tasks\n3\n", "output: %r" % p.stdout)

# The editing keys as a terminal sends them (TERM=vt100).
BACKSPACE, DELETE = "\x7f", "\x1b[3~"
LEFT, RIGHT, UP, DOWN = "\x1b[D", "\x1b[C", "\x1b[A", "\x1b[B"
CTRL_A, CTRL_E, CTRL_K, CTRL_U, CTRL_W = "\x01", "\x05", "\x0b", "\x15", "\x17"


def alive(s):
    """True while the REPL has not exited."""
    s.pump(0.1)
    pid, _ = os.waitpid(s.pid, os.WNOHANG)
    return pid == 0


def case_edits_that_empty_the_line_keep_the_session():
    """The REPL took every edit that left the line empty for the end of
    input and exited 0, every task cancelled: libedit's unbuffered mode
    returns no line whenever the line is empty. Only Ctrl-D on an empty
    line ends the session; these edits, on the prompt and on a `>>`
    continuation line, must not."""
    s = start()
    try:
        enter(s, "task.spawn(function() task.delay(1000) end) &")
        wait_prompt(s)
        edits = [("x", BACKSPACE), ("", BACKSPACE), ("abc", CTRL_U), ("", CTRL_U),
                 ("abc", CTRL_W), ("", CTRL_W), ("abc", CTRL_A + CTRL_K), ("", CTRL_K),
                 ("x", LEFT + DELETE), ("", DELETE)]
        for text, keys in edits:
            s.type(text + keys)
            check(alive(s), "the REPL exited after %r then %r" % (text, keys), s)
            check(last_line(s.screen.text()) == ">", "an empty prompt after %r" % keys, s)
        enter(s, "function f()")
        wait_prompt(s, ">>")
        for text, keys in edits:
            s.type(text + keys)
            check(alive(s), "the REPL exited on a >> line after %r then %r" % (text, keys), s)
        enter(s, "return #task.list() end")
        wait_prompt(s)
        enter(s, "f()")
        s.wait_for("\n2\n>", what="the background task (and this chunk) still alive")
        s.type("\x04")
        check(s.wait_exit() == 0, "Ctrl-D on an empty line still ends it", s)
    finally:
        s.close()


def case_editing_keys_edit_the_line():
    """Every editing key a person uses, and what the edited line gives:
    Backspace, Delete, Ctrl-A/E/K/U/W, the arrows and the history."""
    s = start()
    try:
        for keys, want in [("1+2" + BACKSPACE + "5", "6"),
                           ("2*3" + CTRL_A + "1", "36"),
                           ("10+" + CTRL_A + CTRL_E + "1", "11"),
                           ("7+8" + LEFT + LEFT + DELETE + "-", "-1"),
                           ("1+" + LEFT + "3" + RIGHT + "4", "17"),
                           ("100 + 99" + CTRL_W + "1", "101"),
                           ("1+1 junk" + LEFT * 5 + CTRL_K, "2"),
                           ("garbage" + CTRL_U + "3*3", "9"),
                           ("11*1", "11"),
                           ("22*1", "22"),
                           (UP + UP + DOWN, "22"),
                           (UP + UP + UP, "11")]:
            before = s.screen.text().count("\n" + want + "\n")
            s.type(keys + "\r")
            s.wait_for(lambda t: t.count("\n" + want + "\n") > before and last_line(t) == ">",
                       what="%r to give %s" % (keys, want))
    finally:
        s.close()


def case_a_literal_ctrl_d_is_not_the_end_of_input():
    """A ^D typed literally (Ctrl-V or Insert, then Ctrl-D) as the only
    character of a line ended the session with status 0, every task
    cancelled: in unbuffered mode libedit returns that line and Ctrl-D on
    an empty line alike, as the one character ^D. Only the Ctrl-D key on an
    empty line ends the session; inside a line Ctrl-D deletes the character
    under the cursor."""
    s = start()
    try:
        enter(s, "task.spawn(function() task.delay(1000) end) &")
        wait_prompt(s)
        for quote in ["\x16", "\x1b[2~"]:
            s.type(quote + "\x04")
            check(alive(s), "the REPL exited on %r then Ctrl-D" % quote, s)
            s.type(BACKSPACE)
            check(alive(s), "the REPL exited after deleting the literal ^D", s)
        s.type("12" + CTRL_A + "\x04\r")
        s.wait_for("\n2\n>", what="Ctrl-D inside a line to delete the character under the cursor")
        enter(s, "#task.list() * 10")
        s.wait_for("\n20\n>", what="the background task still alive")
        s.type("\x04")
        check(s.wait_exit() == 0, "Ctrl-D on an empty line still ends it", s)
    finally:
        s.close()


def case_frames_charts_the_last_profiled_frames():
    """:frames draws one row per profiled frame, oldest first, the longest
    frame's bar full width; without profiled frames it says how to record
    them, and a count below 1 is refused as :step refuses it."""
    s = start()
    try:
        enter(s, ":pause")
        wait_prompt(s)
        enter(s, ":frames")
        s.wait_for("no profiled frames (task.debug{profile = true} records them)\n>")
        enter(s, "_ = task.debug{profile = true}")
        wait_prompt(s)
        enter(s, ":step 3")
        s.wait_for(re.compile(r"paused at frame \d+\n>").search)
        enter(s, ":frames")
        text = s.wait_for(re.compile(
            r"last 3 profiled frames, ms of CPU time, oldest first:\n"
            r"((?: +\d+\.\d{3} \|#+\n){3})>").search)
        rows = re.search(r"oldest first:\n((?:.*\n){3})", text).group(1).splitlines()
        bars = [len(r.split("|")[1]) for r in rows]
        check(max(bars) == 40 and min(bars) >= 1, "bars %r" % bars, s)
        enter(s, ":frames 2")
        s.wait_for(re.compile(r"last 2 profiled frames.*\n(?: +\d+\.\d{3} \|#+\n){2}>").search)
        enter(s, ":frames 0")
        s.wait_for("expected")
        wait_prompt(s)
    finally:
        s.close()


def case_waits_lists_what_each_task_waits_on():
    """:waits prints what each live task waits on and the line of its
    await (what SIGQUIT prints on stderr)."""
    script = ("ch = task.channel()\n"
              "rx = task.spawn(function() local v = ch:receive(); return v end) rx.name = 'rx'\n"
              "aw = task.spawn(function() local v = task.await(rx); return v end)\n"
              ":waits\n")
    p = subprocess.run([LUNALOOP, "repl", "--fast"], input=script, capture_output=True,
                       text=True, timeout=30)
    lines = p.stdout.splitlines()
    check(p.returncode == 0, "exit 0: %r" % p.stderr)
    check(any(re.match(r"^lunaloop: tasks at frame \d+:$", l) for l in lines), "the header: %r" % lines)
    check("  task rx (#3) waits on channel:receive at stdin:1" in lines, "rx: %r" % lines)
    check("  task #5 waits on task rx (#3) at stdin:1" in lines, "aw: %r" % lines)


def case_piped_input_ending_in_an_unfinished_chunk_fails():
    """A replayed session that ended inside an unfinished chunk printed
    nothing and exited 0; as `lua5.4 -`, it reports the chunk's syntax
    error and exits 1 (what came before it ran)."""
    for script in ["print(1\n", "print(0)\nprint(1\n", "function f()\n  return 1\n"]:
        p = subprocess.run([LUNALOOP, "repl", "--fast"], input=script, capture_output=True,
                           text=True, timeout=30)
        check(p.returncode == 1, "exit 1 for %r, got %d" % (script, p.returncode))
        check(re.search(r"^stdin:\d+: .* near <eof>$", p.stderr, re.M) is not None,
              "the syntax error for %r: %r" % (script, p.stderr))
        check(p.stdout == ("0\n" if script.startswith("print(0)") else ""),
              "output for %r: %r" % (script, p.stdout))


def case_ctrl_backslash_lists_the_tasks_and_keeps_the_line():
    """Ctrl-\\ (SIGQUIT) dumped core; it prints what each task waits on,
    above the line being typed, which stays as it was."""
    s = start()
    try:
        enter(s, "task.spawn(function() task.delay(100) end) &")
        wait_prompt(s)
        s.type("1 +")
        s.type("\x1c")
        s.wait_for(re.compile(r"^  task #2 waits until [0-9.]+ s on the scaled clock \(Update\) at stdin:1$",
                              re.M).search, what="the task list")
        check(re.search(r"^lunaloop: tasks at frame \d+ \(SIGQUIT\):$", s.screen.text(), re.M) is not None,
              "the header", s)
        s.type(" 2\r")
        s.wait_for("\n3\n>", what="the kept line to run")
    finally:
        s.close()


def main():
    global LUNALOOP
    if len(sys.argv) != 3:
        print("usage: repl_test.py LUNALOOP CASE", file=sys.stderr)
        return 2
    LUNALOOP = os.path.abspath(sys.argv[1])
    fn = globals().get("case_" + sys.argv[2])
    if fn is None:
        print("no case " + sys.argv[2], file=sys.stderr)
        return 2
    try:
        fn()
    except AssertionError as e:
        print("FAILED: %s" % e, file=sys.stderr)
        return 1
    print("ok " + sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
