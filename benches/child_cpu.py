"""Runs a command and says on stderr, as its last line `child-cpu SECONDS`, the CPU time
it and this wrapper spent: benches/proxies.py runs clients inside `netbox -- …` through
this, to tell netbox's own CPU from the client's. Exits with the command's status."""

import resource
import subprocess
import sys

status = subprocess.run(sys.argv[1:]).returncode
spent = 0.0
for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
    usage = resource.getrusage(who)
    spent += usage.ru_utime + usage.ru_stime
print(f"child-cpu {spent:.6f}", file=sys.stderr, flush=True)
sys.exit(status if status >= 0 else 128 - status)
