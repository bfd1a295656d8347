#!/usr/bin/env bash
# The documents stay readable and their links hold: no line past 400 characters (a table
# cell that long is a section's worth of text), every relative link names a file or folder
# that exists (and a heading of it where it names one), and so does every repository path
# the text names.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import re, subprocess, sys, os
files = [f for f in subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True,
         check=True).stdout.split() if not f.startswith("fuzz/corpus/")]
def anchors(path):
    text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)
    out = set()
    for h in re.findall(r"^#+ (.+)$", text, flags=re.M):
        a = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        out.add(a)
    return out
bad = []
for f in files:
    text = open(f, encoding="utf-8").read()
    for n, line in enumerate(text.split("\n"), 1):
        if len(line) > 400:
            bad.append(f"{f}:{n}: a line of {len(line)} characters (at most 400)")
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"^[a-z]+:", target):
            continue  # a URL, not a file of the repository
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(full):
            bad.append(f"{f}: a link to {target}, which does not exist")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            bad.append(f"{f}: a link to {target}, whose heading does not exist")
    # A file of the repository named in code type (`bridge/src/egress/fetch.rs`) exists.
    for named in re.findall(r"`((?:bridge|netbox|tests|benches|deploy|fuzz|examples)/[\w./-]+)`", text):
        if not os.path.exists(named.rstrip("/")) and "*" not in named and not re.search(r"[A-Z]{3,}", named):
            bad.append(f"{f}: names {named}, which does not exist")
if bad:
    print("tests/docs_check.sh:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"{len(files)} documents: no line past 400 characters, every link and path holds")
PY
