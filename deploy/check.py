#!/usr/bin/env python3
"""Static checks of deploy/, for a machine that runs no Kubernetes, no container engine and
no systemd as init (our CI machines): what can be checked without them, against the real
tools' own definitions.

  check.py kubernetes MANIFEST OUT_DIR   schema (strict, the Kubernetes API's own), the
                                         pod's hardening, and the ConfigMap's files
                                         written to OUT_DIR for the real binary to load
  check.py args MANIFEST DOCKERFILE      the Deployment runs what the image's CMD says
  check.py dockerfile DOCKERFILE         the final stage: scratch, a numeric user not 0
  check.py command DOCKERFILE            the image's command, a word per line
  check.py syscalls STRACE_SUMMARY...    every system call the bridge made is one
                                         the unit's SystemCallFilter lets through

Each prints what it checked, and exits 1 with the reason on the first failure.
"""

import json
import re
import subprocess
import sys
from pathlib import Path


def fail(why):
    print(f"deploy/check.py: {why}", file=sys.stderr)
    sys.exit(1)


def documents(manifest):
    import yaml

    return [d for d in yaml.safe_load_all(Path(manifest).read_text()) if d]


def kubernetes(manifest, out_dir):
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", manifest],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        fail(f"{manifest} does not validate:\n{result.stdout}{result.stderr}")
    docs = documents(manifest)
    kinds = sorted(d["kind"] for d in docs)
    want = ["ConfigMap", "Deployment", "NetworkPolicy", "NetworkPolicy", "Service"]
    if kinds != want:
        fail(f"{manifest} holds {kinds}, not {want}")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    if pod.get("automountServiceAccountToken") is not False:
        fail("the bridge's pod mounts a service account token it never uses")
    if pod["securityContext"].get("runAsNonRoot") is not True:
        fail("the pod does not insist on a non-root user")
    for container in pod["containers"]:
        context = container.get("securityContext", {})
        for key, value in [
            ("allowPrivilegeEscalation", False),
            ("readOnlyRootFilesystem", True),
            ("privileged", False),
        ]:
            if context.get(key) is not value:
                fail(f"container {container['name']}: securityContext.{key} is not {value}")
        if context.get("capabilities", {}).get("drop") != ["ALL"]:
            fail(f"container {container['name']} keeps capabilities")
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    bridge_policy = [
        p
        for p in policies
        if p["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()
    ]
    if len(bridge_policy) != 1 or set(bridge_policy[0]["spec"]["policyTypes"]) != {
        "Ingress",
        "Egress",
    }:
        fail("no NetworkPolicy holds the bridge's pods to ingress and egress rules")
    runners = [p for p in policies if p not in bridge_policy]
    if len(runners) != 1 or runners[0]["spec"]["policyTypes"] != ["Egress"]:
        fail("no NetworkPolicy keeps runner pods to the bridge")
    out = Path(out_dir)
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    for name, text in config["data"].items():
        (out / name).write_text(text)
    print(
        f"kubernetes: {manifest} validates (strict) as {', '.join(want)}; "
        f"pod non-root, read-only, no capabilities, no token; "
        f"{len(config['data'])} policy files written for the bridge to load"
    )


def image_cmd(dockerfile):
    text = Path(dockerfile).read_text().replace("\\\n", " ")
    final = text.split("\nFROM ")[-1]
    cmd = re.search(r"^CMD (\[.*\])\s*$", final, re.M)
    entry = re.search(r"^ENTRYPOINT (\[.*\])\s*$", final, re.M)
    if not cmd or not entry:
        fail(f"{dockerfile}: the final stage needs ENTRYPOINT and CMD in JSON form")
    return json.loads(entry.group(1)), json.loads(cmd.group(1))


def args(manifest, dockerfile):
    deployment = next(d for d in documents(manifest) if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    entry, cmd = image_cmd(dockerfile)
    given = container["args"]
    # The Deployment may add flags (a drain timeout), never drop or change the image's.
    missing = [a for a in cmd if a not in given]
    if missing or entry != ["/netbox", "bridge"]:
        fail(f"the Deployment's args {given} drop {missing} of the image's CMD {cmd}")
    ports = {p["containerPort"] for p in container["ports"]}
    listened = {int(a.rsplit(":", 1)[1]) for a in given if a.startswith("0.0.0.0:")}
    if ports != listened:
        fail(f"the container's ports {ports} are not where the bridge listens {listened}")
    print(f"args: the Deployment runs the image's command ({' '.join(entry + given)})")


def dockerfile(path):
    text = Path(path).read_text()
    stages = re.findall(r"^FROM (\S+)", text, re.M)
    if stages[-1] != "scratch":
        fail(f"{path}: the final stage is {stages[-1]}, not scratch")
    final = text.split("\nFROM scratch")[-1]
    user = re.search(r"^USER (\d+):(\d+)\s*$", final, re.M)
    if not user or user.group(1) == "0" or user.group(2) == "0":
        fail(f"{path}: the final stage needs a numeric USER:GROUP other than root")
    if re.search(r"^ADD ", text, re.M):
        fail(f"{path}: ADD fetches and unpacks; use COPY")
    copied = [c[1] for c in re.findall(r"^COPY --from=build (\S+) (\S+)", final, re.M)]
    # check.sh lays out exactly these in the image's root.
    want = ["/netbox", "/etc/ssl/certs/ca-certificates.crt"]
    if copied != want:
        fail(f"{path}: the final stage holds {copied}, not {want}")
    print(f"dockerfile: scratch, user {user.group(1)}:{user.group(2)}, holding {copied}")


def command(path):
    """The image's ENTRYPOINT and CMD, one word per line (for check.sh)."""
    entry, cmd = image_cmd(path)
    print("\n".join(entry + cmd))


def filter_sets():
    """Every syscall group systemd knows, each expanded to its system calls."""
    text = subprocess.run(
        ["systemd-analyze", "syscall-filter"], capture_output=True, text=True, check=True
    ).stdout
    groups, current = {}, None
    for line in text.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())

    def expand(name, seen=()):
        calls = set()
        for entry in groups.get(name, []):
            if entry.startswith("@"):
                if entry not in seen:
                    calls |= expand(entry, seen + (name,))
            else:
                calls.add(entry)
        return calls

    return expand


def unit_filter(unit):
    allowed, denied = set(), set()
    expand = filter_sets()
    for line in Path(unit).read_text().splitlines():
        if not line.startswith("SystemCallFilter="):
            continue
        value = line.split("=", 1)[1]
        deny = value.startswith("~")
        names = value.lstrip("~").split()
        calls = set()
        for name in names:
            calls |= expand(name) if name.startswith("@") else {name}
        (denied if deny else allowed).update(calls)
    return allowed - denied


def syscalls(unit, summaries):
    allowed = unit_filter(unit)
    made = set()
    for summary in summaries:
        for line in Path(summary).read_text().splitlines():
            fields = line.split()
            # strace -c: "% time seconds usecs/call calls [errors] syscall"
            if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
                made.add(fields[-1])
    if len(made) < 10:
        fail(f"only {sorted(made)} in the strace summaries: the bridge was not traced")
    outside = sorted(made - allowed)
    if outside:
        fail(f"{unit}'s SystemCallFilter refuses {outside}, which the bridge made")
    print(
        f"syscalls: the {len(made)} system calls the bridge made under load, a reload and "
        f"a drain are all ones {Path(unit).name} lets through"
    )


if __name__ == "__main__":
    what, rest = sys.argv[1], sys.argv[2:]
    {
        "kubernetes": lambda: kubernetes(*rest),
        "args": lambda: args(*rest),
        "dockerfile": lambda: dockerfile(*rest),
        "command": lambda: command(*rest),
        "syscalls": lambda: syscalls(rest[0], rest[1:]),
    }[what]()
