"""term.py: drives a program in a pseudo-terminal as a person would, and
keeps a model of the screen so tests read what a person would see.

Screen is a small VT100 model: printable characters, CR, LF, BS, BEL, and
the CSI sequences a line editor uses (cursor moves A/B/C/D/G/H, erase K/J);
other escapes (modes, keypad) are parsed and ignored. It is enough for
libedit on TERM=vt100 and for the REPL's own "erase the line" sequence.
"""
import os
import pty
import re
import select
import signal
import struct
import fcntl
import termios
import time


class Screen:
    def __init__(self, rows=40, cols=100):
        self.rows, self.cols = rows, cols
        self.lines = [[" "] * cols for _ in range(rows)]
        self.r = self.c = 0
        self.pending = ""
        self.scrolled = []  # lines that went off the top

    def _scroll(self):
        self.scrolled.append("".join(self.lines.pop(0)).rstrip())
        self.lines.append([" "] * self.cols)

    def _lf(self):
        if self.r == self.rows - 1:
            self._scroll()
        else:
            self.r += 1

    def feed(self, data):
        s = self.pending + data
        self.pending = ""
        i = 0
        while i < len(s):
            ch = s[i]
            if ch == "\x1b":
                m = re.match(r"\x1b\[([?>=]?)([0-9;]*)([@-~])", s[i:])
                if m:
                    self._csi(m.group(1), m.group(2), m.group(3))
                    i += m.end()
                    continue
                if i + 1 >= len(s) or (s[i + 1] == "[" and not re.match(r"\x1b\[[?>=]?[0-9;]*[@-~]", s[i:]) and len(s) - i < 16):
                    self.pending = s[i:]  # an escape cut in two: wait for the rest
                    return
                i += 2  # ESC x: a mode change we ignore (ESC =, ESC >, ...)
                continue
            if ch == "\r":
                self.c = 0
            elif ch == "\n":
                self._lf()
            elif ch == "\t":
                self.c = min(self.cols - 1, (self.c // 8 + 1) * 8)
            elif ch == "\b":
                self.c = max(0, self.c - 1)
            elif ch == "\a" or ch == "\x00":
                pass
            elif ch >= " ":
                if self.c >= self.cols:
                    self.c = 0
                    self._lf()
                self.lines[self.r][self.c] = ch
                self.c += 1
            i += 1

    def _csi(self, private, params, final):
        if private:
            return
        nums = [int(p) if p else 0 for p in params.split(";")] if params else []
        n = nums[0] if nums and nums[0] > 0 else 1
        if final == "A":
            self.r = max(0, self.r - n)
        elif final == "B":
            self.r = min(self.rows - 1, self.r + n)
        elif final == "C":
            self.c = min(self.cols - 1, self.c + n)
        elif final == "D":
            self.c = max(0, self.c - n)
        elif final == "G":
            self.c = min(self.cols - 1, n - 1)
        elif final in "Hf":
            r = nums[0] if len(nums) > 0 and nums[0] else 1
            c = nums[1] if len(nums) > 1 and nums[1] else 1
            self.r, self.c = min(self.rows, r) - 1, min(self.cols, c) - 1
        elif final == "K":
            mode = nums[0] if nums else 0
            line = self.lines[self.r]
            lo, hi = {0: (self.c, self.cols), 1: (0, self.c + 1), 2: (0, self.cols)}[mode]
            for x in range(lo, hi):
                line[x] = " "
        elif final == "J":
            mode = nums[0] if nums else 0
            if mode == 0:
                self._csi("", "0", "K")
                for y in range(self.r + 1, self.rows):
                    self.lines[y] = [" "] * self.cols
            elif mode == 2:
                self.lines = [[" "] * self.cols for _ in range(self.rows)]
        elif final == "P":  # delete characters
            line = self.lines[self.r]
            del line[self.c:self.c + n]
            line.extend([" "] * n)
        elif final == "@":  # insert blanks
            line = self.lines[self.r]
            for _ in range(n):
                line.insert(self.c, " ")
            del line[self.cols:]

    def text(self):
        """The whole screen (and what scrolled off), trailing blanks cut."""
        out = self.scrolled + ["".join(l).rstrip() for l in self.lines]
        while out and out[-1] == "":
            out.pop()
        return "\n".join(out)

    def cursor_line(self):
        return "".join(self.lines[self.r]).rstrip()


class Session:
    """A program in a pty: type(), wait_for(), screen, close()."""

    def __init__(self, argv, env=None, rows=40, cols=100):
        self.screen = Screen(rows, cols)
        self.raw = ""
        e = dict(os.environ)
        e.update({"TERM": "vt100", "LINES": str(rows), "COLUMNS": str(cols)})
        if env:
            e.update(env)
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.execvpe(argv[0], argv, e)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.status = None

    def pump(self, timeout=0.05):
        """Reads what the program wrote within `timeout` seconds."""
        end = time.time() + timeout
        while True:
            left = end - time.time()
            if left <= 0:
                return
            r, _, _ = select.select([self.fd], [], [], left)
            if not r:
                return
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            text = data.decode("utf-8", "replace")
            self.raw += text
            self.screen.feed(text)

    def type(self, keys, delay=0.01):
        """Types keys one at a time, as a person would (slowly)."""
        for ch in keys:
            os.write(self.fd, ch.encode())
            self.pump(delay)

    def wait_for(self, pred, timeout=10.0, what=None):
        """Waits until pred(screen text) is true (or a string appears)."""
        test = pred if callable(pred) else (lambda text: pred in text)
        end = time.time() + timeout
        while time.time() < end:
            self.pump(0.05)
            if test(self.screen.text()):
                return self.screen.text()
        raise AssertionError("timed out waiting for %s; screen:\n%s\n--- raw: %r" %
                             (what or repr(pred), self.screen.text(), self.raw[-2000:]))

    def wait_exit(self, timeout=10.0):
        end = time.time() + timeout
        while time.time() < end:
            self.pump(0.05)
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.pump(0.1)
                self.status = os.waitstatus_to_exitcode(st)
                return self.status
        raise AssertionError("the program did not exit; screen:\n" + self.screen.text())

    def close(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        try:
            os.close(self.fd)
        except OSError:
            pass
