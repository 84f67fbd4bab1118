#!/usr/bin/env python3
"""End-to-end tests of freeway-inspect (CLI and GUI) against a live process.

usage: e2e.py INSPECT CHILD LIBFREEWAY CASE

INSPECT is freeway-inspect, CHILD is telemetry_child (not linked with
freeway), LIBFREEWAY is libfreeway.so, preloaded into CHILD with
FREEWAY_TELEMETRY=1. CASE is one of the functions named case_* below; each
is its own ctest test. Standard library only.

The GUI cases (case_gui_*) also need FW_XVFB_RUN (xvfb-run) and
FW_CHECK_SCREENSHOT (tests/gui/check_screenshot) in the environment.

Tolerance of the figures compared with fw_stats: none. The child is
single-threaded and idle when it prints fw_stats, so every snapshot published
after that carries exactly the same counters; a difference is a bug.
"""
import atexit
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

INSPECT, CHILD, LIB, CASE = sys.argv[1:5]
TMP = tempfile.mkdtemp(prefix="fw-e2e-")
atexit.register(shutil.rmtree, TMP, True)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(*args, expect=None):
    """Runs freeway-inspect ARGS; returns (code, stdout, stderr)."""
    p = subprocess.run([INSPECT, *map(str, args)], capture_output=True, text=True, timeout=60)
    if expect is not None and p.returncode != expect:
        fail(f"freeway-inspect {' '.join(map(str, args))}: exit {p.returncode}, expected {expect}\n"
             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p.returncode, p.stdout, p.stderr


def one_line_error(args, must_contain):
    """A bad request: exit 2, nothing on stdout, one line on stderr naming the problem."""
    code, out, err = run(*args)
    if code != 2:
        fail(f"{args}: exit {code}, expected 2 (stderr: {err!r})")
    lines = err.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("freeway-inspect: "):
        fail(f"{args}: expected one line 'freeway-inspect: ...' on stderr, got {err!r}")
    if must_contain.lower() not in lines[0].lower():
        fail(f"{args}: error {lines[0]!r} does not mention {must_contain!r}")
    print(f"ok: {' '.join(map(str, args))} -> exit 2: {lines[0]}")


class Child:
    """telemetry_child under LD_PRELOAD, publishing at 50 Hz."""

    def __init__(self, telemetry=True):
        env = dict(os.environ, LD_PRELOAD=LIB, FREEWAY_TELEMETRY="1" if telemetry else "0",
                   FREEWAY_TELEMETRY_HZ="50")
        self.p = subprocess.Popen([CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        first = self.p.stdout.readline().split()
        if len(first) != 2 or first[0] != "ready":
            fail(f"child did not start: {first}")
        self.pid = int(first[1])
        if telemetry:
            self.wait_segment()

    def wait_segment(self):
        path = f"/dev/shm/freeway.{self.pid}"
        for _ in range(200):
            if os.path.exists(path):
                return
            time.sleep(0.01)
        fail(f"{path} did not appear")

    def ask(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def stats(self):
        words = self.ask("stats").split()
        if not words or words[0] != "stats":
            fail(f"bad stats line {words}")
        return {k: int(v) for k, v in (w.split("=") for w in words[1:])}

    def settle(self):
        """Waits until snapshots published after the last command exist (50 Hz: 20 ms each)."""
        time.sleep(0.3)

    def exit(self):
        """Asks the child to free everything and exit; fails the case unless it
        exits 0 (a crash while freeing its heap under freeway is a failure)."""
        if self.p.poll() is None:
            self.p.stdin.write("exit\n")
            self.p.stdin.flush()
            self.p.wait(timeout=30)
        if self.p.returncode != 0:
            fail(f"the child exited with status {self.p.returncode}")


def snapshot_json(src):
    _, out, _ = run("snapshot", src, "--json", expect=0)
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        fail(f"snapshot --json is not JSON ({e}): {out[:400]}")


def case_snapshot_matches_fw_stats():
    c = Child()
    s = c.stats()
    # A snapshot published after the stats call: two more than the first one
    # seen after it (the publisher may be starved on a loaded machine).
    first = snapshot_json(c.pid)["snapshots"]
    for _ in range(500):
        j = snapshot_json(c.pid)
        if j["snapshots"] >= first + 2:
            break
        time.sleep(0.01)
    else:
        fail(f"no new snapshot within 5 s (still {j['snapshots']})")
    if j.get("schema") != "freeway-inspect/snapshot/1":
        fail(f"schema {j.get('schema')}")
    if j["pid"] != c.pid:
        fail(f"pid {j['pid']} != {c.pid}")
    pairs = [("live", "live"), ("committed", "committed"), ("reserved", "reserved"), ("peak_live", "peak_live"),
             ("peak_committed", "peak_committed")]
    for jk, sk in pairs:
        if j[jk] != s[sk]:
            fail(f"{jk}: inspector {j[jk]} != fw_stats {s[sk]} (tolerance 0)")
    for jk, sk in [("hot", "hot"), ("full", "full"), ("partial", "partial")]:
        if j["spans"][jk] != s[sk]:
            fail(f"spans.{jk}: inspector {j['spans'][jk]} != fw_stats {s[sk]}")
    if j["live"] < 30 << 20:
        fail(f"live {j['live']} is smaller than what the child holds")
    want_blowup = j["committed"] / j["live"]
    if abs(j["blowup"] - want_blowup) > 1e-3:
        fail(f"blowup {j['blowup']} != committed/live {want_blowup}")
    if not j["size_class"] or sum(c_["live_bytes"] for c_ in j["size_class"]) <= 0:
        fail("size_class array empty")
    if j["span_violations"]:
        fail(f"span equations violated: {j['span_violations'][:5]}")
    print(f"ok: live {j['live']} committed {j['committed']} reserved {j['reserved']} "
          f"hot/full/partial {j['spans']['hot']}/{j['spans']['full']}/{j['spans']['partial']} equal fw_stats; "
          f"{len(j['size_class'])} classes")
    # The text form names the same figures.
    _, out, _ = run("snapshot", c.pid, expect=0)
    if f"process {c.pid}" not in out or "blowup" not in out:
        fail(f"text snapshot: {out[:300]}")
    # list shows it alive (--keep-stale: other tests' stale segments are theirs to check).
    _, out, _ = run("list", "--json", "--keep-stale", expect=0)
    if not any(e["pid"] == c.pid and e["alive"] for e in json.loads(out)):
        fail(f"list --json does not show {c.pid}: {out}")
    c.exit()
    if os.path.exists(f"/dev/shm/freeway.{c.pid}"):
        fail("segment left after exit")
    one_line_error(["snapshot", c.pid], "no process")


def case_check():
    c = Child()
    c.settle()
    code, out, _ = run("check", c.pid, "--max-blowup", "1000", "--max-committed", "1T", "--max-dropped", "1000000")
    if code != 0 or not out.startswith("ok:"):
        fail(f"check on a healthy process: exit {code}: {out}")
    print("ok: healthy:", out.strip())
    code, out, _ = run("check", c.pid, "--max-committed", "1M")
    if code != 1 or "committed" not in out or "FAIL" not in out:
        fail(f"check --max-committed 1M: exit {code}: {out}")
    print("ok: over committed:", out.strip())
    code, out, _ = run("check", c.pid, "--max-blowup", "1")
    if code != 1 or "blowup" not in out:
        fail(f"check --max-blowup 1: exit {code}: {out}")
    print("ok: over blowup:", out.strip())
    one_line_error(["check", c.pid, "--max-committed", "lots"], "--max-committed")
    one_line_error(["check", c.pid, "--max-blowup", "-1"], "--max-blowup")
    one_line_error(["check", c.pid, "--frobnicate"], "unknown option")
    c.exit()


def case_record_replay_diff():
    c = Child()
    c.settle()
    a = os.path.join(TMP, "a.fws")
    b = os.path.join(TMP, "b.fws")
    rec = os.path.join(TMP, "r.fwr")
    run("snapshot", c.pid, "-o", a, expect=0)
    p = subprocess.Popen([INSPECT, "record", str(c.pid), "-o", rec, "--hz", "20", "--seconds", "2"],
                         stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    if c.ask("grow") != "grown":
        fail("grow")
    p.wait(timeout=30)
    err = p.stderr.read()
    if p.returncode != 0 or "per minute" not in err:
        fail(f"record: exit {p.returncode}: {err}")
    print("ok:", err.strip().splitlines()[-1])
    c.settle()
    run("snapshot", c.pid, "-o", b, expect=0)
    _, out, _ = run("replay", rec, "--json", expect=0)
    frames = [json.loads(line) for line in out.splitlines() if line.strip()]
    if not 25 <= len(frames) <= 45:
        fail(f"replay: {len(frames)} frames for 2 s at 20 Hz")
    lives = [f["live"] for f in frames]
    if max(lives) - min(lives) < 60 << 20:
        fail(f"replay does not show the 64 MiB growth: live from {min(lives)} to {max(lives)}")
    print(f"ok: replay {len(frames)} frames, live {min(lives)} -> {max(lives)}")
    _, out, _ = run("diff", a, b, "--json", expect=0)
    d = json.loads(out)
    grew = d["live"][1] - d["live"][0]
    if not (64 << 20) <= grew <= (64 << 20) + (1 << 20):
        fail(f"diff: live grew by {grew}, expected 64 MiB")
    if not any(x["live_bytes"][1] - x["live_bytes"][0] >= 60 << 20 for x in d["size_class"]) and \
            d["spans"]["large"][1] <= d["spans"]["large"][0]:
        fail(f"diff shows no class or large span growth: {out[:600]}")
    _, out, _ = run("diff", a, b, expect=0)
    if "live" not in out or "spans by state" not in out:
        fail(f"diff text: {out[:300]}")
    print(f"ok: diff live +{grew}")
    # The last frame of the recording is a source for snapshot and check too.
    run("check", rec, "--max-blowup", "1000", expect=0)
    c.exit()
    # Damaged files: a clear error, never a crash.
    bad = os.path.join(TMP, "bad.fwr")
    with open(rec, "rb") as f:
        data = f.read()
    with open(bad, "wb") as f:
        f.write(data[: len(data) // 2])
    code, _, err = run("replay", bad)
    if code != 2 or not err.startswith("freeway-inspect: "):
        fail(f"replay of a truncated file: exit {code}: {err}")
    print("ok: truncated recording ->", err.strip())
    with open(bad, "wb") as f:
        f.write(b"not a recording at all" * 10)
    one_line_error(["replay", bad], "")
    one_line_error(["diff", a, os.path.join(TMP, "missing.fws")], "neither a process id nor a file")
    # A FIFO where a file is expected: refused at once (opening it for
    # reading must not wait for a writer); run() times out on a hang.
    fifo = os.path.join(TMP, "fifo.fwr")
    os.mkfifo(fifo)
    one_line_error(["replay", fifo], "not a regular file")
    one_line_error(["snapshot", fifo], "not a regular file")
    # A recording whose program name holds control characters (an escape
    # sequence, the same length as the name it replaces): printed as '?'.
    name = b"telemetry_child"
    if name not in data:
        fail("the recording does not hold the program's name")
    with open(bad, "wb") as f:
        f.write(data.replace(name, b"telemetry\x1b[2Jld"))
    for cmd in (["snapshot", bad], ["check", bad, "--max-blowup", "1000"], ["diff", bad, a]):
        code, out, err = run(*cmd)
        if code != 0 or "\x1b" in out + err or "telemetry?[2Jld" not in out:
            fail(f"{cmd}: exit {code}, control characters not replaced: {(out + err)[:300]!r}")
    print("ok: a FIFO is refused; control characters in a recorded name are printed as '?'")
    # A name that is not UTF-8 (cut mid-character, or another encoding): the
    # JSON stays valid UTF-8, the bad byte a U+FFFD.
    with open(bad, "wb") as f:
        f.write(data.replace(name, b"telemetry\xffchild"))
    q = subprocess.run([INSPECT, "snapshot", bad, "--json"], capture_output=True, timeout=60)
    try:
        doc = json.loads(q.stdout.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"snapshot --json of a non-UTF-8 name is not valid JSON in UTF-8: {e}")
    if not str(doc.get("exe")).endswith("telemetry\ufffdchild"):
        fail(f"snapshot --json exe {doc.get('exe')!r}")
    print("ok: a non-UTF-8 program name gives valid JSON:", doc["exe"])


def case_bad_sources():
    # A pid that does not run.
    p = subprocess.Popen(["true"])
    p.wait()
    one_line_error(["snapshot", p.pid], "no process")
    one_line_error(["watch", p.pid], "no process")
    one_line_error(["record", p.pid, "-o", os.path.join(TMP, "x.fwr")], "no process")
    # A process without telemetry (freeway preloaded, telemetry off).
    c = Child(telemetry=False)
    one_line_error(["snapshot", c.pid], "publishes no telemetry")
    one_line_error(["check", c.pid], "publishes no telemetry")
    c.exit()
    # Not a pid, not a file.
    one_line_error(["snapshot", "not-a-pid"], "neither a process id nor a file")
    one_line_error(["watch", "12abc"], "not a process id")
    one_line_error(["snapshot"], "expected 1")
    one_line_error(["record", "1"], "-o FILE")
    # A segment of another major version, at the name of a live process.
    s = subprocess.Popen(["sleep", "30"])
    path = f"/dev/shm/freeway.{s.pid}"
    try:
        header = struct.pack("<QHHI", 0x4D454C4554574600, 2, 0, 504) + bytes(504 - 16)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, header)
        os.close(fd)
        one_line_error(["snapshot", s.pid], "format 2.0")
        # Garbage at the name.
        with open(path, "wb") as f:
            f.write(os.urandom(4096))
        one_line_error(["snapshot", s.pid], "not a freeway telemetry segment")
    finally:
        s.kill()
        s.wait()
        if os.path.exists(path):
            os.unlink(path)


def case_stale_pruned():
    c = Child()
    path = f"/dev/shm/freeway.{c.pid}"
    c.p.send_signal(signal.SIGKILL)
    c.p.wait()
    if not os.path.exists(path):
        fail("SIGKILL should leave the segment (nothing runs at exit)")
    one_line_error(["snapshot", c.pid], "")
    _, out, _ = run("list", "--keep-stale", "--json", expect=0)
    if not any(e["pid"] == c.pid and not e["alive"] for e in json.loads(out)):
        fail(f"list --keep-stale does not show the stale segment: {out}")
    _, out, _ = run("list", "--json", expect=0)
    if any(e["pid"] == c.pid for e in json.loads(out)):
        fail(f"list shows the stale segment: {out}")
    if os.path.exists(path):
        fail("list did not prune the stale segment")
    print("ok: stale segment listed with --keep-stale, pruned by list")


def case_exec_without_freeway():
    """A process that publishes, then execs a program without freeway, keeps
    its pid and start time but no longer maps its segment: not alive."""
    env = dict(os.environ, LD_PRELOAD=LIB, FREEWAY_TELEMETRY="1")
    p = subprocess.Popen(["env", "-u", "LD_PRELOAD", "sleep", "30"], env=env)
    try:
        path = f"/dev/shm/freeway.{p.pid}"
        for _ in range(200):
            if os.path.exists(path):
                break
            time.sleep(0.01)
        if not os.path.exists(path):
            fail(f"{path} did not appear (env publishes before its exec)")
        for _ in range(200):  # until the exec is done: /proc/PID/exe is sleep
            if os.path.basename(os.readlink(f"/proc/{p.pid}/exe")) == "sleep":
                break
            time.sleep(0.01)
        one_line_error(["snapshot", p.pid], "no longer maps it")
        _, out, _ = run("list", "--keep-stale", "--json", expect=0)
        if any(e["pid"] == p.pid and e["alive"] for e in json.loads(out)):
            fail(f"list calls the exec'd process's segment alive: {out}")
        print("ok: after exec without freeway the segment is stale:", p.pid)
    finally:
        p.kill()
        p.wait()
        if os.path.exists(f"/dev/shm/freeway.{p.pid}"):
            os.unlink(f"/dev/shm/freeway.{p.pid}")


def case_watch():
    c = Child()
    c.settle()
    _, out, _ = run("watch", c.pid, "--count", "3", "--hz", "10", expect=0)
    if out.count(f"process {c.pid}") != 3:
        fail(f"watch --count 3 printed {out.count(f'process {c.pid}')} views")
    # Every view lists the latest events (the child's start made some), not
    # only the view in which they arrived.
    views = out.split("recent events:")[1:]
    def events_listed(v):
        n = 0
        for line in v.splitlines()[1:]:  # the rest of the "recent events:" line first
            if not line.startswith("    "):
                break
            n += 1
        return n
    listed = [events_listed(v) for v in views]
    if len(listed) != 3 or min(listed) == 0:
        fail(f"watch: events listed per view {listed}, expected some in each of 3: {out[-600:]}")
    # watch follows the process to its end and says so.
    p = subprocess.Popen([INSPECT, "watch", str(c.pid), "--hz", "10"], stdout=subprocess.PIPE, text=True)
    first = p.stdout.readline()  # attached and showing (a fixed sleep raced a slow start)
    if not first:
        fail("watch printed nothing before the child exited")
    c.exit()
    out, _ = p.communicate(timeout=20)
    out = first + out
    if p.returncode != 0 or "has exited" not in out:
        fail(f"watch after the process exited: exit {p.returncode}: {out[-300:]}")
    print("ok: watch (3 views; reports the exit)")
    one_line_error(["watch", "1", "--count", "0"], "--count")


def case_orphaned_leader():
    """A process whose main thread called pthread_exit while another thread
    runs on is alive: its leader shows as a zombie in /proc/PID/stat."""
    c = Child()
    path = f"/dev/shm/freeway.{c.pid}"
    if c.ask("orphan") != "orphaned":
        fail("orphan")
    for _ in range(200):  # until the main thread is gone
        with open(f"/proc/{c.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    else:
        fail("the main thread did not exit")
    c.settle()
    _, out, _ = run("list", "--json", expect=0)
    if not any(e["pid"] == c.pid and e["alive"] for e in json.loads(out)):
        fail(f"list does not call the process alive: {out}")
    if not os.path.exists(path):
        fail("list pruned the live process's segment")
    live = c.stats()["live"]
    c.settle()
    if snapshot_json(c.pid)["live"] != live:
        fail("snapshot of the orphaned process differs from fw_stats")
    run("watch", c.pid, "--count", "2", "--hz", "10", expect=0)
    c.exit()
    print("ok: a process with a zombie main thread is alive; list keeps its segment")


XVFB_CLEANUP_FAILED = "xvfb-run: error: problem while cleaning up temporary directory"


def xvfb(*args, timeout=90):
    """freeway-inspect ARGS in a fresh Xvfb display; returns (code, stdout, stderr).

    When xvfb-run itself fails to remove its temporary directory it exits 5
    in place of freeway-inspect's status (seen once in a clean clone's CI,
    Stop 85): that is xvfb-run's error, so the command runs once more."""
    cmd = [os.environ["FW_XVFB_RUN"], "-a", "-s", "-screen 0 1280x800x24", INSPECT, *map(str, args)]
    for _ in range(2):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if not (p.returncode == 5 and XVFB_CLEANUP_FAILED in p.stderr):
            break
        print("note: xvfb-run failed to clean up its temporary directory; running again")
    return p.returncode, p.stdout, p.stderr


def check_png(path, min_states, min_pixels=400):
    p = subprocess.run([os.environ["FW_CHECK_SCREENSHOT"], path, str(min_states), str(min_pixels)],
                       capture_output=True, text=True, timeout=60)
    print(p.stdout.strip())
    if p.returncode != 0:
        fail(f"screenshot {path}: {p.stdout} {p.stderr}")


def case_gui_live_screenshot():
    c = Child()
    c.settle()
    png = os.path.join(TMP, "live.png")
    code, out, err = xvfb(c.pid, "--screenshot", png, "--frames", "12", "--size", "1280x800")
    if code != 0 or "start to first frame" not in out:
        fail(f"GUI screenshot: exit {code}\nstdout: {out}\nstderr: {err}")
    print("ok:", out.strip())
    # The child's heap has small spans in several states, large runs and
    # unused address space: at least three state colours, each in 400+ pixels.
    check_png(png, 3)
    # A screenshot that cannot be written whole (a full device): an error and
    # exit 2, not a success line over a truncated file.
    code, out, err = xvfb(c.pid, "--screenshot", "/dev/full", "--frames", "2", "--size", "640x400")
    if code != 2 or "cannot write /dev/full" not in err or "start to first frame" in out:
        fail(f"screenshot to /dev/full: exit {code}\nstdout: {out}\nstderr: {err}")
    print("ok: screenshot to a full device ->", err.strip().splitlines()[-1])
    c.exit()


def replay_screenshot(rec, name, what):
    """The GUI on recording rec, 5 frames into TMP/name: exit 0, and at least
    three span-state colours in 400+ pixels each."""
    png = os.path.join(TMP, name)
    code, out, err = xvfb("--replay", rec, "--screenshot", png, "--frames", "5", "--size", "1280x800")
    if code != 0:
        fail(f"{what}: exit {code}\nstdout: {out}\nstderr: {err}")
    print("ok:", out.strip())
    check_png(png, 3)


def case_gui_replay_screenshot():
    c = Child()
    c.settle()
    rec = os.path.join(TMP, "r.fwr")
    run("record", c.pid, "-o", rec, "--hz", "20", "--seconds", "1", expect=0)
    c.exit()
    replay_screenshot(rec, "replay.png", "GUI replay screenshot")


def case_gui_windows_recording():
    """A recording made on Windows (freeway-inspect.exe record, under wine, of
    tests/windows/test_windows.exe --child publish; `make test-windows` makes
    such recordings and replays them there) replays here, in the CLI and the GUI."""
    rec = os.path.join(os.path.dirname(os.path.abspath(__file__)), "windows.fwrec")
    _, out, _ = run("replay", rec, expect=0)
    if "40 frames" not in out:
        fail(f"replay of the Windows recording: {out[-300:]}")
    _, js, _ = run("replay", "--json", rec, expect=0)
    if "test_windows.exe" not in js:
        fail("replay --json of the Windows recording does not name test_windows.exe")
    replay_screenshot(rec, "windows.png", "GUI replay of the Windows recording")


def case_gui_errors():
    p = subprocess.Popen(["true"])
    p.wait()
    one_line_error([p.pid], "no process")
    one_line_error(["--replay", os.path.join(TMP, "missing.fwr")], "cannot open")
    one_line_error(["--frames", "0"], "--frames")
    one_line_error(["--screenshot", os.path.join(TMP, "x.png")], "needs a PID")
    # No display at all: one line, exit 2 (tools/demo then falls back to `watch`).
    c = Child()
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    q = subprocess.run([INSPECT, str(c.pid)], capture_output=True, text=True, timeout=60, env=env)
    lines = q.stderr.strip().splitlines()
    if q.returncode != 2 or len(lines) != 1 or "cannot open a window" not in lines[0]:
        fail(f"GUI without a display: exit {q.returncode}, stderr {q.stderr!r}")
    print("ok: no display ->", lines[0])
    c.exit()


globals()["case_" + CASE]()
print("PASS", CASE)
