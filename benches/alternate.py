"""Runs each command RUNS times, alternating run by run (posix_spawn, wall time to the
reap), and prints each one's median in milliseconds on one line.

hyperfine runs one command all its runs, then the next: on a shared machine whose speed
drifts, that moves the ratio between them.

    python3 benches/alternate.py RUNS "CMD ARGS..." "CMD ARGS..." ...
"""
import os
import shutil
import statistics
import sys
import time

runs, commands = int(sys.argv[1]), [c.split() for c in sys.argv[2:]]
commands = [[shutil.which(c[0]) or c[0]] + c[1:] for c in commands]
times = [[] for _ in commands]
for _ in range(runs):
    for i, argv in enumerate(commands):
        start = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, os.environ)
        os.waitpid(pid, 0)
        times[i].append(time.perf_counter() - start)
print(" ".join(f"{statistics.median(t) * 1000:.2f}" for t in times))
