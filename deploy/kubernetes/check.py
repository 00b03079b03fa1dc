#!/usr/bin/env python3
"""Checks the rendered manifests for what JSON schemas cannot see: that the pieces refer to
each other correctly and agree with the image (Dockerfile) and the server (config.rs).

    kubectl kustomize deploy/kubernetes > render.yaml
    python3 deploy/kubernetes/check.py render.yaml     # or - for standard input
    python3 deploy/kubernetes/check.py --self-test render.yaml

--self-test first checks that the render passes, then breaks it (and the Dockerfile and the
server's parameter list, in memory) one way at a time and requires the check meant to catch
each break to fail: every check is shown to be able to fail.

Needs PyYAML (kubernetes-validate brings it; .ci/run puts it on PYTHONPATH).
"""

import copy
import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
COMMON_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance")
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
MIN_GRACE_SECONDS = 60
MIN_STARTUP_BUDGET_SECONDS = 300


class Ctx:
    """The render plus the repository files the manifests must agree with."""

    def __init__(self, docs, dockerfile, params):
        self.docs = docs
        self.dockerfile = dockerfile
        self.params = params

    def of_kind(self, kind):
        return [d for d in self.docs if d.get("kind") == kind]

    def named(self, kind, name):
        return next((d for d in self.of_kind(kind) if meta(d).get("name") == name), None)

    def statefulset(self):
        sets = self.of_kind("StatefulSet")
        if len(sets) != 1:
            raise Fail(f"expected exactly one StatefulSet, found {len(sets)}")
        return sets[0]

    def pod_spec(self):
        return self.statefulset().get("spec", {}).get("template", {}).get("spec", {})

    def pod_labels(self):
        return (
            self.statefulset().get("spec", {}).get("template", {}).get("metadata", {})
        ).get("labels") or {}

    def container(self):
        containers = self.pod_spec().get("containers") or []
        if len(containers) != 1:
            raise Fail(f"expected one container in the pod, found {len(containers)}")
        return containers[0]

    def ports(self):
        """Declared container ports: name -> number."""
        return {
            p.get("name"): p.get("containerPort") for p in self.container().get("ports") or []
        }

    def server_port(self):
        ports = self.ports()
        if "redis" not in ports:
            raise Fail("the container declares no port named 'redis'")
        return ports["redis"]

    def config_path(self):
        args = self.container().get("args") or []
        if not args or args[0].startswith("-"):
            raise Fail("the container's first argument is not a config file path")
        return args[0]

    def config_text(self):
        """The config file the server reads: the ConfigMap key behind args[0]."""
        path = self.config_path()
        mount = mount_holding(self.container(), path)
        if mount is None:
            raise Fail(f"config file {path} is in no volumeMount")
        volume = volume_named(self.pod_spec(), mount.get("name"))
        if volume is None or "configMap" not in volume:
            raise Fail(f"config file {path} is on volume {mount.get('name')!r}, not a ConfigMap")
        cm_name = volume["configMap"].get("name")
        cm = self.named("ConfigMap", cm_name)
        if cm is None:
            raise Fail(f"volume {mount.get('name')!r} names ConfigMap {cm_name!r}, not rendered")
        rel = path[len(mount["mountPath"].rstrip("/")) + 1 :]
        if mount.get("subPath"):
            raise Fail("the config mount uses subPath; mount the ConfigMap as a directory")
        items = volume["configMap"].get("items")
        key = rel
        if items:
            key = next((i.get("key") for i in items if i.get("path") == rel), None)
        data = cm.get("data") or {}
        if key not in data:
            raise Fail(f"ConfigMap {cm_name!r} has no key for {path} (keys: {sorted(data)})")
        return data[key]

    def config(self):
        """Directive -> value, as the server's config-file reader joins them."""
        out = {}
        for line in self.config_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            words = line.split()
            value = " ".join(words[1:])
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            out[words[0]] = value
        return out

    def effective_dir(self):
        args = self.container().get("args") or []
        if "--dir" in args:
            i = args.index("--dir")
            return args[i + 1] if i + 1 < len(args) else None
        return self.config().get("dir", ".")


class Fail(Exception):
    pass


def meta(doc):
    return doc.get("metadata") or {}


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def under(path, mount_path):
    mount_path = mount_path.rstrip("/")
    return path == mount_path or path.startswith(mount_path + "/")


def mount_holding(container, path):
    mounts = [m for m in container.get("volumeMounts") or [] if under(path, m.get("mountPath", ""))]
    return max(mounts, key=lambda m: len(m["mountPath"]), default=None)


def volume_named(pod_spec, name):
    return next((v for v in pod_spec.get("volumes") or [] if v.get("name") == name), None)


def final_stage(dockerfile):
    stages = re.split(r"(?im)^FROM\s", dockerfile)
    return stages[-1]


def dockerfile_user(dockerfile):
    users = re.findall(r"(?im)^USER\s+(\S+)", final_stage(dockerfile))
    return users[-1] if users else None


def dockerfile_json_list(dockerfile, instruction):
    found = re.findall(rf"(?im)^{instruction}\s+(.+)$", final_stage(dockerfile))
    if not found:
        return []
    text = found[-1].strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text.split()


def cpu_millis(quantity):
    q = str(quantity)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


# --- the checks: each raises Fail with the reason, or returns a one-line summary ---


def check_statefulset_selector(ctx):
    sts = ctx.statefulset()
    selector = sts.get("spec", {}).get("selector") or {}
    if selector.get("matchExpressions"):
        raise Fail("selector.matchExpressions is not supported by this checker; use matchLabels")
    match = selector.get("matchLabels") or {}
    if not selects(match, ctx.pod_labels()):
        raise Fail(f"selector {match} does not match the template's labels {ctx.pod_labels()}")
    return f"selector {match} matches the pod template"


def check_headless_service(ctx):
    name = ctx.statefulset().get("spec", {}).get("serviceName")
    svc = ctx.named("Service", name)
    if svc is None:
        raise Fail(f"serviceName {name!r} names no Service in the render")
    if svc.get("spec", {}).get("clusterIP") != "None":
        raise Fail(f"Service {name!r} (the serviceName) is not headless (clusterIP: None)")
    if not selects(svc["spec"].get("selector"), ctx.pod_labels()):
        raise Fail(f"headless Service {name!r} does not select the pods")
    return f"serviceName {name!r} is a headless Service selecting the pods"


def check_services_select_pods(ctx):
    services = ctx.of_kind("Service")
    client = [s for s in services if s.get("spec", {}).get("clusterIP") != "None"]
    if not client:
        raise Fail("no client (non-headless) Service")
    ports = ctx.ports()
    for svc in services:
        name = meta(svc).get("name")
        spec = svc.get("spec", {})
        if not selects(spec.get("selector"), ctx.pod_labels()):
            raise Fail(f"Service {name!r} selector {spec.get('selector')} misses the pods")
        for p in spec.get("ports") or []:
            target = p.get("targetPort", p.get("port"))
            if target not in ports and target not in ports.values():
                raise Fail(f"Service {name!r} targets port {target!r}, not declared {ports}")
    return f"{len(services)} Services select the pods and target declared ports"


def check_probes(ctx):
    port = ctx.server_port()
    spec = ctx.container()
    for kind in PROBES:
        probe = spec.get(kind)
        if not probe:
            raise Fail(f"no {kind}")
        for other in ("tcpSocket", "httpGet", "grpc"):
            if other in probe:
                raise Fail(f"{kind} uses {other}; expected an exec probe")
        command = (probe.get("exec") or {}).get("command") or []
        if len(command) != 3 or command[:2] != ["sh", "-c"]:
            raise Fail(f"{kind} is not `sh -c SCRIPT`: {command}")
        script = command[2]
        used = re.findall(r"redis-cli\b[^\n|;]*?-p\s+(\S+)", script)
        calls = re.findall(r"redis-cli\b", script)
        if not used or len(used) != len(calls):
            raise Fail(f"{kind}: every redis-cli call must name the port with -p")
        if any(u != str(port) for u in used):
            raise Fail(f"{kind} probes port(s) {used}, the container declares {port}")
        if "PING" not in script:
            raise Fail(f"{kind} does not send PING")
        if kind == "readinessProbe":
            if "loading:0" not in script or "INFO persistence" not in script:
                raise Fail("readinessProbe does not require loading:0 from INFO persistence")
            if "LOADING" in script:
                raise Fail("readinessProbe accepts LOADING")
        elif "LOADING" not in script:
            raise Fail(f"{kind} does not accept a -LOADING reply")
    startup = spec["startupProbe"]
    budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
    if budget < MIN_STARTUP_BUDGET_SECONDS:
        raise Fail(f"startupProbe allows {budget} s, less than {MIN_STARTUP_BUDGET_SECONDS}")
    return f"3 exec probes on port {port}; readiness needs loading:0; startup budget {budget} s"


def check_config_mount(ctx):
    path = ctx.config_path()
    ctx.config_text()
    command = ctx.container().get("command") or dockerfile_json_list(ctx.dockerfile, "ENTRYPOINT")
    entry = dockerfile_json_list(ctx.dockerfile, "ENTRYPOINT")
    if not command or Path(command[0]).name != "damselfly" or command[:1] != entry[:1]:
        raise Fail(f"container command {command} is not the image's entrypoint {entry}")
    return f"{path} is a key of the mounted ConfigMap, passed first to {command[0]}"


def check_data_dir(ctx):
    claims = ctx.statefulset().get("spec", {}).get("volumeClaimTemplates") or []
    if len(claims) != 1:
        raise Fail(f"expected one volumeClaimTemplate, found {len(claims)}")
    claim = meta(claims[0]).get("name")
    mounts = [m for m in ctx.container().get("volumeMounts") or [] if m.get("name") == claim]
    if len(mounts) != 1:
        raise Fail(f"volumeClaimTemplate {claim!r} is not mounted in the container")
    mount_path = mounts[0].get("mountPath")
    data_dir = ctx.effective_dir()
    if data_dir != mount_path:
        raise Fail(f"the server's dir is {data_dir!r}, the volume {claim!r} is at {mount_path!r}")
    volumes = dockerfile_json_list(ctx.dockerfile, "VOLUME")
    if mount_path not in volumes:
        raise Fail(f"the Dockerfile declares VOLUME {volumes}, not {mount_path}")
    return f"volume {claim!r} at {mount_path} is the server's dir and the image's VOLUME"


def check_config_directives(ctx):
    config = ctx.config()
    unknown = sorted(d for d in config if d not in ctx.params)
    if unknown:
        raise Fail(f"directives the server does not accept: {unknown}")
    wanted = {"appendonly": "yes", "port": str(ctx.server_port())}
    for name, value in wanted.items():
        if config.get(name) != value:
            raise Fail(f"config has {name} {config.get(name)!r}, expected {value!r}")
    for name in ("dir", "save", "appendfsync", "bind"):
        if name not in config:
            raise Fail(f"config does not set {name}")
    return f"{len(config)} directives, all accepted by the server"


def check_pdb(ctx):
    pdbs = ctx.of_kind("PodDisruptionBudget")
    if not pdbs:
        raise Fail("no PodDisruptionBudget")
    for pdb in pdbs:
        match = (pdb.get("spec", {}).get("selector") or {}).get("matchLabels")
        if not selects(match, ctx.pod_labels()):
            raise Fail(f"PodDisruptionBudget {meta(pdb).get('name')!r} misses the pods")
    return "the PodDisruptionBudget selects the pods"


def check_security_context(ctx):
    pod = ctx.pod_spec().get("securityContext") or {}
    box = ctx.container().get("securityContext") or {}

    def effective(field):
        return box.get(field, pod.get(field))

    user = dockerfile_user(ctx.dockerfile) or ""
    uid, _, gid = user.partition(":")
    if effective("runAsNonRoot") is not True:
        raise Fail("runAsNonRoot is not true")
    for field, want in (("runAsUser", uid), ("runAsGroup", gid)):
        value = effective(field)
        if not isinstance(value, int) or value == 0:
            raise Fail(f"{field} is not a fixed non-root id: {value!r}")
        if str(value) != want:
            raise Fail(f"{field} {value} differs from the Dockerfile's USER {user}")
    if str(pod.get("fsGroup")) != gid:
        raise Fail(f"pod fsGroup {pod.get('fsGroup')!r} is not the image's group {gid}")
    if box.get("readOnlyRootFilesystem") is not True:
        raise Fail("readOnlyRootFilesystem is not true")
    if box.get("allowPrivilegeEscalation") is not False:
        raise Fail("allowPrivilegeEscalation is not false")
    if box.get("privileged"):
        raise Fail("the container is privileged")
    if "ALL" not in ((box.get("capabilities") or {}).get("drop") or []):
        raise Fail("capabilities do not drop ALL")
    if (box.get("capabilities") or {}).get("add"):
        raise Fail("capabilities are added")
    if (effective("seccompProfile") or {}).get("type") != "RuntimeDefault":
        raise Fail("seccompProfile is not RuntimeDefault")
    return f"non-root {uid}:{gid} as the image, read-only root, no privileges, RuntimeDefault"


def check_image_tools(ctx):
    scripts = " ".join(
        " ".join((ctx.container().get(k, {}).get("exec") or {}).get("command") or [])
        for k in PROBES
    )
    stage = final_stage(ctx.dockerfile)
    # redis-tools among the packages of an `apt-get install`, continuation lines included.
    installs = re.search(r"apt-get install\b(?:[^\n\\]|\\\n)*\bredis-tools\b", stage)
    if "redis-cli" in scripts and not installs:
        raise Fail("the probes run redis-cli but the image does not install redis-tools")
    return "the image carries redis-cli for the probes"


def check_grace_and_resources(ctx):
    grace = ctx.pod_spec().get("terminationGracePeriodSeconds", 30)
    if grace < MIN_GRACE_SECONDS:
        raise Fail(f"terminationGracePeriodSeconds {grace} < {MIN_GRACE_SECONDS} (shutdown save)")
    res = ctx.container().get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    for what in ("cpu", "memory"):
        if what not in limits or what not in requests:
            raise Fail(f"{what} request and limit must both be set")
    cpu = cpu_millis(limits["cpu"])
    if cpu % 1000:
        raise Fail(f"CPU limit {limits['cpu']} is not whole CPUs (the thread count rounds down)")
    if cpu_millis(requests["cpu"]) != cpu:
        raise Fail("CPU request differs from the limit")
    return f"grace {grace} s; {cpu // 1000} CPUs -> {cpu // 1000} shard threads"


def check_labels(ctx):
    want = {k: ctx.pod_labels().get(k) for k in COMMON_LABELS}
    if None in want.values():
        raise Fail(f"the pod template lacks {COMMON_LABELS}")
    for doc in ctx.docs:
        labels = meta(doc).get("labels") or {}
        if any(labels.get(k) != v for k, v in want.items()):
            raise Fail(f"{doc.get('kind')}/{meta(doc).get('name')} lacks the labels {want}")
    for claim in ctx.statefulset()["spec"].get("volumeClaimTemplates") or []:
        if any((meta(claim).get("labels") or {}).get(k) != v for k, v in want.items()):
            raise Fail(f"volumeClaimTemplate {meta(claim).get('name')} lacks the labels")
    return f"every object carries {want}"


CHECKS = [
    ("statefulset-selector", check_statefulset_selector),
    ("headless-service", check_headless_service),
    ("services-select-pods", check_services_select_pods),
    ("probes", check_probes),
    ("config-mount", check_config_mount),
    ("data-dir", check_data_dir),
    ("config-directives", check_config_directives),
    ("pdb", check_pdb),
    ("security-context", check_security_context),
    ("image-tools", check_image_tools),
    ("grace-and-resources", check_grace_and_resources),
    ("labels", check_labels),
]


def run_checks(ctx, quiet=False):
    """Returns {check name: failure reason} for the checks that failed."""
    failed = {}
    for name, check in CHECKS:
        try:
            summary = check(ctx)
            if not quiet:
                print(f"ok   {name}: {summary}")
        except Fail as e:
            failed[name] = str(e)
            if not quiet:
                print(f"FAIL {name}: {e}")
        except Exception as e:  # a manifest shaped unlike what the check expects
            failed[name] = f"CRASH {type(e).__name__}: {e}"
            if not quiet:
                print(f"FAIL {name}: the check crashed: {type(e).__name__}: {e}")
    return failed


# --- self-test: one break per line, and the check that must catch it ---


def sts(ctx):
    return ctx.statefulset()["spec"]


def box(ctx):
    return ctx.container()


def probe_script(ctx, kind, edit):
    cmd = box(ctx)[kind]["exec"]["command"]
    cmd[2] = edit(cmd[2])


def service(ctx, headless):
    return next(
        s for s in ctx.of_kind("Service") if (s["spec"].get("clusterIP") == "None") == headless
    )


def config_map(ctx):
    return ctx.of_kind("ConfigMap")[0]


def edit_config(ctx, edit):
    cm = config_map(ctx)
    key = next(iter(cm["data"]))
    cm["data"][key] = edit(cm["data"][key])


def set_sc(field, value, where="container"):
    """Sets (None: removes) a securityContext field of the container, the pod, or both."""

    def mutate(ctx):
        targets = {
            "container": [box(ctx)],
            "pod": [sts(ctx)["template"]["spec"]],
            "both": [box(ctx), sts(ctx)["template"]["spec"]],
        }[where]
        for target in targets:
            sc = target.setdefault("securityContext", {})
            if value is None:
                sc.pop(field, None)
            else:
                sc[field] = value

    return mutate


BREAKS = [
    ("a template label changed", "statefulset-selector",
     lambda c: sts(c)["template"]["metadata"]["labels"].update({"app.kubernetes.io/name": "x"})),
    ("serviceName names nothing", "headless-service",
     lambda c: sts(c).update({"serviceName": "nope"})),
    ("the governing Service gets a cluster IP", "headless-service",
     lambda c: service(c, True)["spec"].pop("clusterIP")),
    ("the client Service selects other pods", "services-select-pods",
     lambda c: service(c, False)["spec"]["selector"].update({"app.kubernetes.io/name": "x"})),
    ("the client Service targets an undeclared port", "services-select-pods",
     lambda c: service(c, False)["spec"]["ports"][0].update({"targetPort": "http"})),
    ("readiness probes another port", "probes",
     lambda c: probe_script(c, "readinessProbe", lambda s: s.replace("-p 6379", "-p 6380", 1))),
    ("a redis-cli call without -p", "probes",
     lambda c: probe_script(c, "livenessProbe", lambda s: s.replace(" -p 6379", ""))),
    ("readiness ignores loading:0", "probes",
     lambda c: probe_script(c, "readinessProbe", lambda s: s.replace("loading:0", "loading:"))),
    ("liveness refuses LOADING", "probes",
     lambda c: probe_script(c, "livenessProbe", lambda s: s.replace("LOADING*", "BUSY*"))),
    ("a tcpSocket startup probe", "probes",
     lambda c: box(c).update({"startupProbe": {"tcpSocket": {"port": 6379}}})),
    ("startup probe gives up after 15 s", "probes",
     lambda c: box(c)["startupProbe"].update({"failureThreshold": 3})),
    ("the config path is outside the ConfigMap mount", "config-mount",
     lambda c: box(c).update({"args": ["/etc/other/damselfly.conf"]})),
    ("the config file name is not a ConfigMap key", "config-mount",
     lambda c: box(c).update({"args": ["/etc/damselfly/redis.conf"]})),
    ("the config volume names another ConfigMap", "config-mount",
     lambda c: sts(c)["template"]["spec"]["volumes"][0]["configMap"].update({"name": "other"})),
    ("the config path is not the first argument", "config-mount",
     lambda c: box(c).update({"args": ["--port", "6379"]})),
    ("the command is not the image's binary", "config-mount",
     lambda c: box(c).update({"command": ["redis-server"]})),
    ("config dir is not the volume", "data-dir",
     lambda c: edit_config(c, lambda t: t.replace("dir /data", "dir /var/lib/damselfly"))),
    ("--dir overrides the config with another path", "data-dir",
     lambda c: box(c)["args"].extend(["--dir", "/tmp"])),
    ("the volumeClaimTemplate is renamed", "data-dir",
     lambda c: sts(c)["volumeClaimTemplates"][0]["metadata"].update({"name": "storage"})),
    ("the image declares another VOLUME", "data-dir",
     lambda c: setattr(c, "dockerfile", c.dockerfile.replace('VOLUME ["/data"]', 'VOLUME ["/var"]'))),
    ("an unknown directive", "config-directives",
     lambda c: edit_config(c, lambda t: t + "no-such-directive yes\n")),
    ("config port differs from the container port", "config-directives",
     lambda c: edit_config(c, lambda t: t.replace("port 6379", "port 6380"))),
    ("appendonly off", "config-directives",
     lambda c: edit_config(c, lambda t: t.replace("appendonly yes", "appendonly no"))),
    ("the server stops accepting a directive", "config-directives",
     lambda c: c.params.discard("appendfsync")),
    ("the PDB selects other pods", "pdb",
     lambda c: c.of_kind("PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"].update(
         {"app.kubernetes.io/instance": "x"})),
    ("no PDB", "pdb",
     lambda c: setattr(c, "docs", [d for d in c.docs if d["kind"] != "PodDisruptionBudget"])),
    ("runAsNonRoot removed", "security-context", set_sc("runAsNonRoot", None, "both")),
    ("runAsNonRoot removed, container says false", "security-context",
     set_sc("runAsNonRoot", False)),
    ("runAsUser differs from the image's", "security-context", set_sc("runAsUser", 10002, "pod")),
    ("runAsGroup removed", "security-context", set_sc("runAsGroup", None, "pod")),
    ("runAsUser root", "security-context", set_sc("runAsUser", 0, "pod")),
    ("fsGroup removed", "security-context", set_sc("fsGroup", None, "pod")),
    ("writable root filesystem", "security-context", set_sc("readOnlyRootFilesystem", None)),
    ("privilege escalation allowed", "security-context", set_sc("allowPrivilegeEscalation", True)),
    ("capabilities kept", "security-context", set_sc("capabilities", {"drop": ["NET_RAW"]})),
    ("a capability added", "security-context",
     set_sc("capabilities", {"drop": ["ALL"], "add": ["IPC_LOCK"]})),
    ("seccomp Unconfined", "security-context",
     set_sc("seccompProfile", {"type": "Unconfined"}, "pod")),
    ("the Dockerfile's user changes", "security-context",
     lambda c: setattr(c, "dockerfile", c.dockerfile.replace("USER 10001:10001", "USER 10002:10002"))),
    ("the image lacks redis-tools", "image-tools",
     lambda c: setattr(c, "dockerfile", c.dockerfile.replace("redis-tools", "procps"))),
    ("a 30 s grace period", "grace-and-resources",
     lambda c: sts(c)["template"]["spec"].update({"terminationGracePeriodSeconds": 30})),
    ("no CPU limit", "grace-and-resources",
     lambda c: box(c)["resources"]["limits"].pop("cpu")),
    ("a fractional CPU limit", "grace-and-resources",
     lambda c: box(c)["resources"]["limits"].update({"cpu": "1500m"})),
    ("the ConfigMap loses its labels", "labels",
     lambda c: config_map(c)["metadata"].pop("labels")),
    ("the volumeClaimTemplate loses its labels", "labels",
     lambda c: sts(c)["volumeClaimTemplates"][0]["metadata"].pop("labels")),
]


def self_test(ctx):
    failed = run_checks(ctx, quiet=True)
    if failed:
        print(f"self-test: the unbroken render fails {failed}")
        return 1
    caught = set()
    bad = 0
    for what, check, mutate in BREAKS:
        broken = Ctx(copy.deepcopy(ctx.docs), ctx.dockerfile, set(ctx.params))
        mutate(broken)
        failed = run_checks(broken, quiet=True)
        if check in failed and not failed[check].startswith("CRASH"):
            caught.add(check)
            print(f"caught  {what}: {check}: {failed[check]}")
        else:
            bad += 1
            print(f"MISSED  {what}: {check} passed (failed: {sorted(failed) or 'none'})")
    never = [name for name, _ in CHECKS if name not in caught]
    if never:
        print(f"self-test: checks never shown to fail: {never}")
        return 1
    print(f"self-test: {len(BREAKS) - bad} of {len(BREAKS)} breaks caught; "
          f"each of the {len(CHECKS)} checks failed on at least one")
    return 1 if bad else 0


def load(argv):
    args = [a for a in argv if a != "--self-test"]
    if len(args) != 1:
        sys.exit(__doc__)
    text = sys.stdin.read() if args[0] == "-" else Path(args[0]).read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    dockerfile = (REPO / "Dockerfile").read_text()
    config_rs = (REPO / "crates/commands/src/config.rs").read_text()
    table = config_rs[config_rs.index("pub static PARAMS") :]
    table = table[: table.index("];")]
    params = set(re.findall(r'\bp\(\s*"([^"]+)"', table))
    if not params:
        sys.exit("no parameters found in crates/commands/src/config.rs")
    return Ctx(docs, dockerfile, params)


def main(argv):
    ctx = load(argv)
    if "--self-test" in argv:
        return self_test(ctx)
    failed = run_checks(ctx)
    print(f"check.py: {len(CHECKS) - len(failed)} of {len(CHECKS)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
