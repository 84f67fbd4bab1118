#!/usr/bin/env python3
"""gui.exited: freeway-inspect keeps the last state of a process that exits.

Starts freeway-demo (telemetry on) for a short run, attaches
`freeway-inspect PID --screenshot F.png --frames N` under Xvfb for longer than
the demo lives, and checks: exit 0, the screenshot line says the process
exited, and the image still shows span states (the last snapshot, not a blank
window or the picker).

usage: exited.py FREEWAY_INSPECT FREEWAY_DEMO   (env FW_XVFB_RUN, FW_CHECK_SCREENSHOT)
"""
import os, shutil, subprocess, sys, tempfile, time

inspect, demo = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="fw_gui_exited.")
env = dict(os.environ, FREEWAY_TELEMETRY="1")
child = subprocess.Popen([demo, "--seconds", "9", "--threads", "2", "--quiet"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
first = child.stdout.readline()  # "[time] freeway demo: pid N, ..."
try:
    pid = int(first.split("pid ")[1].split(",")[0])
except (IndexError, ValueError):
    child.kill()
    sys.exit(f"FAIL: no pid in freeway-demo's first line: {first!r}")
# Attach 3 s into the demo's 9 s: the inspector (xvfb-run, Xvfb, a GL context)
# may take seconds to start on a loaded machine, and must attach before the demo exits.
time.sleep(3)
png = os.path.join(tmp, "exited.png")
# 160 frames at the demo's 20 Hz: 8 s from the attach, the demo lives at most 6 s more.
p = subprocess.run([os.environ["FW_XVFB_RUN"], "-a", "-s", "-screen 0 1280x800x24", inspect, str(pid),
                    "--screenshot", png, "--frames", "160", "--size", "1280x800"],
                   capture_output=True, text=True, timeout=120)
child.stdout.read()
if child.wait(timeout=60) != 0:
    sys.exit(f"FAIL: freeway-demo exited with status {child.returncode}")
print(p.stdout.strip())
if p.returncode != 0 or "the process exited" not in p.stdout:
    sys.exit(f"FAIL: exit {p.returncode}, stdout {p.stdout!r}, stderr {p.stderr!r}")
c = subprocess.run([os.environ["FW_CHECK_SCREENSHOT"], png, "2", "400"], capture_output=True, text=True, timeout=60)
print(c.stdout.strip())
if c.returncode != 0:
    sys.exit(f"FAIL: screenshot after exit: {c.stdout} {c.stderr}")
shutil.rmtree(tmp, ignore_errors=True)
print("PASS gui.exited")
