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
  check.py sandbox-pod MANIFEST          the pod that runs netbox's sandbox: schema
                                         (strict), and the settings netbox needs
  check.py seccomp PROFILE...            each profile allows netbox's calls outright
                                         (deploy/seccomp/make-profile's list) and
                                         leaves the rest to the engine's rules

Each prints what it checked, and exits 1 with the reason on the first failure.
"""

import json
import re
import subprocess
import sys
from pathlib import Path


def validate(manifest):
    """The manifest against the Kubernetes API's schema, strictly (unknown fields fail)."""
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", manifest],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        fail(f"{manifest} does not validate:\n{result.stdout}{result.stderr}")


def sandbox_pod(manifest):
    validate(manifest)
    (pod,) = documents(manifest)
    spec = pod["spec"]
    if spec.get("hostUsers") is not False:
        fail("the sandbox pod shares the node's users (hostUsers must be false)")
    context = spec["securityContext"]
    if context.get("runAsNonRoot") is not True:
        fail("the sandbox pod may run as root (netbox as root needs CAP_SETFCAP)")
    if "seccompProfile" in context or "appArmorProfile" in context:
        fail("the sandbox pod widens every container's profiles, not the job's alone")
    for container in spec["containers"]:
        csc = container.get("securityContext", {})
        profile = csc.get("seccompProfile", {})
        if profile != {"type": "Localhost", "localhostProfile": "netbox.json"}:
            fail(f"container {container['name']}: seccomp profile {profile}, not netbox's")
        if csc.get("procMount") != "Unmasked":
            fail(f"container {container['name']}: /proc stays masked")
        if csc.get("capabilities", {}).get("drop") != ["ALL"]:
            fail(f"container {container['name']} keeps capabilities it does not need")
        if csc.get("privileged") is not False or csc.get("allowPrivilegeEscalation") is not False:
            fail(f"container {container['name']} may be privileged")
        if container["command"][0] != "netbox":
            fail(f"container {container['name']} does not run netbox")
    print(f"deploy/check.py: {manifest}: valid; user namespace, unmasked /proc, netbox's seccomp profile, no capability")


def seccomp(profiles):
    needed = None
    for line in Path(__file__).with_name("seccomp").joinpath("make-profile").read_text().splitlines():
        if line.startswith("NEEDED = ["):
            needed = []
        elif needed is not None and line.strip() == "]":
            break
        elif needed is not None:
            needed.append(line.strip().strip(",").strip('"'))
    if not needed:
        fail("make-profile names no calls")
    for path in profiles:
        profile = json.loads(Path(path).read_text())
        allow = [
            r
            for r in profile["syscalls"]
            if set(needed) <= set(r.get("names", []))
            and r["action"] == "SCMP_ACT_ALLOW"
            and not r.get("args")
            and not r.get("includes")
            and not r.get("excludes")
        ]
        if len(allow) != 1:
            fail(f"{path}: no one unconditional rule allows {needed}")
        for rule in profile["syscalls"]:
            if rule is not allow[0] and set(needed) & set(rule.get("names", [rule.get("name")])):
                fail(f"{path}: another rule also decides {sorted(set(needed) & set(rule['names']))}")
        print(f"deploy/check.py: {path}: netbox's {len(needed)} calls allowed by one rule, {len(profile['syscalls']) - 1} of the engine's rules kept")


def fail(why):
    print(f"deploy/check.py: {why}", file=sys.stderr)
    sys.exit(1)


def documents(manifest):
    import yaml

    return [d for d in yaml.safe_load_all(Path(manifest).read_text()) if d]


def kubernetes(manifest, out_dir):
    validate(manifest)
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
    if len(bridge_policy) != 1:
        fail("no one NetworkPolicy selects the bridge's pods")
    bridge_rules(bridge_policy[0]["spec"], labels)
    runners = [p for p in policies if p not in bridge_policy]
    if len(runners) != 1:
        fail("no NetworkPolicy keeps runner pods to the bridge")
    runner_rules(runners[0]["spec"], labels)
    service = next(d for d in docs if d["kind"] == "Service")
    ports = [(p["name"], p["port"]) for p in service["spec"]["ports"]]
    if service["spec"].get("type", "ClusterIP") != "ClusterIP" or ports != [("proxy", 3128)]:
        fail(f"the Service must be a ClusterIP publishing the proxy port alone, not {ports}")
    out = Path(out_dir)
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    for name, text in config["data"].items():
        (out / name).write_text(text)
    print(
        f"kubernetes: {manifest} validates (strict) as {', '.join(want)}; "
        f"pod non-root, read-only, no capabilities, no token; "
        f"{len(config['data'])} policy files written for the bridge to load"
    )


RUNNER_LABEL = {"netbox.dev/egress": "bridge"}
KUBE_DNS = {"k8s-app": "kube-dns"}
PRIVATE_V4 = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"}
PRIVATE_V6 = {"fc00::/7", "fe80::/10", "64:ff9b::/96"}


def ports_of(rule):
    return sorted((p.get("protocol", "TCP"), p["port"]) for p in rule.get("ports", []))


def is_dns(peer, rule):
    return (
        peer.get("podSelector", {}).get("matchLabels") == KUBE_DNS
        and ports_of(rule) == [("TCP", 53), ("UDP", 53)]
    )


def bridge_rules(spec, labels):
    if set(spec["policyTypes"]) != {"Ingress", "Egress"}:
        fail("the bridge's NetworkPolicy must hold both ingress and egress")
    for rule in spec["ingress"]:
        peers, ports = rule.get("from", []), ports_of(rule)
        if not peers or not ports:
            fail(f"a bridge ingress rule opens every peer or every port: {rule}")
        if ports == [("TCP", 3128)]:
            if any(p.get("podSelector", {}).get("matchLabels") != RUNNER_LABEL for p in peers):
                fail(f"the proxy port takes clients other than runner pods: {rule}")
        elif ports == [("TCP", 9090)]:
            if any("podSelector" in p or "ipBlock" in p for p in peers):
                fail(f"the admin port is open to more than a namespace: {rule}")
        else:
            fail(f"a bridge ingress rule opens {ports}")
    for rule in spec["egress"]:
        peers = rule.get("to", [])
        if not peers:
            fail(f"a bridge egress rule opens every destination: {rule}")
        for peer in peers:
            block = peer.get("ipBlock")
            if block is None:
                if not is_dns(peer, rule):
                    fail(f"the bridge reaches pods other than cluster DNS: {rule}")
                continue
            kept = set(block.get("except", []))
            if block["cidr"] == "0.0.0.0/0" and not PRIVATE_V4 <= kept:
                fail(f"the bridge's IPv4 egress does not leave out {sorted(PRIVATE_V4 - kept)}")
            if block["cidr"] == "::/0" and not PRIVATE_V6 <= kept:
                fail(f"the bridge's IPv6 egress does not leave out {sorted(PRIVATE_V6 - kept)}")
            if block["cidr"] not in ("0.0.0.0/0", "::/0"):
                fail(f"an egress block other than the internet: {block}")


def runner_rules(spec, labels):
    if spec["podSelector"].get("matchLabels") != RUNNER_LABEL or spec["policyTypes"] != ["Egress"]:
        fail("the runners' NetworkPolicy must select runner pods and hold their egress")
    for rule in spec["egress"]:
        peers = rule.get("to", [])
        if not peers or not rule.get("ports"):
            fail(f"a runner egress rule opens every destination or port: {rule}")
        for peer in peers:
            bridge = peer.get("podSelector", {}).get("matchLabels", {})
            to_bridge = bridge and bridge.items() <= labels.items()
            if to_bridge and ports_of(rule) == [("TCP", 3128)]:
                continue
            if not is_dns(peer, rule):
                fail(f"runner pods reach more than the bridge's proxy port and DNS: {rule}")


def flags(words):
    """`--flag value` pairs and lone `--flag`s, as a dict."""
    out, i = {}, 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            fail(f"{word!r} follows no flag")
        takes_value = i + 1 < len(words) and not words[i + 1].startswith("--")
        out[word] = words[i + 1] if takes_value else True
        i += 2 if takes_value else 1
    return out


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
    if entry != ["/netbox", "bridge"]:
        fail(f"the image runs {entry}, not the bridge")
    image, given = flags(cmd), flags(container["args"])
    # The Deployment runs the image's command; it opens the admin listener to the pod's
    # address (for the kubelet's probes and Prometheus) and may add flags of its own.
    changed = {k: (v, given.get(k)) for k, v in image.items() if k != "--admin" and given.get(k) != v}
    if changed:
        fail(f"the Deployment changes the image's command: {changed}")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listen, admin = given.get("--listen", ""), given.get("--admin", "")
    if listen != f"0.0.0.0:{ports.get('proxy')}" or admin != f"0.0.0.0:{ports.get('admin')}":
        fail(f"the bridge listens on {listen} and {admin}, not at the ports named proxy and admin {ports}")
    if ports.get("proxy") == ports.get("admin"):
        fail("the proxy and admin ports are one")
    if not image.get("--admin", "").startswith("127.0.0.1:"):
        fail("the image's own command opens the admin listener beyond the container")
    print(f"args: the Deployment runs the image's command ({' '.join(entry + container['args'])})")


def dockerfile(path):
    text = Path(path).read_text().replace("\\\n", " ")
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    final = stages[-1].splitlines()
    if final[0].split()[0] != "scratch":
        fail(f"{path}: the final stage is {final[0]}, not scratch")
    if re.search(r"^ADD ", text, re.M):
        fail(f"{path}: ADD fetches and unpacks; use COPY")
    lines = [l.strip() for l in final[1:] if l.strip() and not l.strip().startswith("#")]
    allowed = ("COPY --from=build ", "USER ", "EXPOSE ", "ENTRYPOINT ", "CMD ")
    stray = [l for l in lines if not l.startswith(allowed)]
    if stray:
        fail(f"{path}: the final stage does more than copy from the build and say how to run: {stray}")
    users = [l.split()[1] for l in lines if l.startswith("USER ")]
    ids = users[0].split(":") if len(users) == 1 else []
    if len(ids) != 2 or not all(i.isdigit() and int(i) != 0 for i in ids):
        fail(f"{path}: the final stage needs one USER UID:GID, both numbers other than 0, not {users}")
    copied = [l.split()[3] for l in lines if l.startswith("COPY ")]
    # check.sh lays out exactly these in the image's root.
    want = ["/netbox", "/etc/ssl/certs/ca-certificates.crt"]
    if copied != want:
        fail(f"{path}: the final stage holds {copied}, not {want}")
    exposed = [p for l in lines if l.startswith("EXPOSE ") for p in l.split()[1:]]
    if exposed != ["3128"]:
        fail(f"{path}: the image exposes {exposed}, not the proxy's port alone")
    print(f"dockerfile: scratch, user {users[0]}, holding {copied}, exposing {exposed}")


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
        "sandbox-pod": lambda: sandbox_pod(*rest),
        "seccomp": lambda: seccomp(rest),
    }[what]()
