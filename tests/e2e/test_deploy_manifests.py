#!/usr/bin/env python3
"""deploy/k8s: every kustomization renders (`kubectl kustomize`), every object validates
offline against its published schema (tests/e2e/k8s_validate.mjs), and policy holds on the
rendered objects:
  - every container (Deployments and the pod templates of LeaderWorkerSets): startup/readiness/
    liveness probes, CPU and memory limits, non-root, read-only root filesystem, no privilege
    escalation, all capabilities dropped (a LeaderWorkerSet worker rank, which serves no port, is
    the one exception to probes: its group is recreated whole when it exits);
  - tessera containers: probes on /ready and /health, a grace period longer than the preStop
    sleep plus the drain timeout, and args (with the ConfigMap's serve.toml they mount) that
    `tessera serve --check-config=flags` accepts, so manifests cannot drift from the binary
    ($(VAR) references substituted as Kubernetes would, from env the pod declares or LWS injects);
  - disaggregated: the router's instance names are headless Services over the prefill and decode
    pools; every role reads --internal-api-key-file from the same Secret; NetworkPolicies match
    the threat model (docs/architecture.md): clients reach only the router's HTTP port, the router
    the instances' HTTP ports, decodes the prefills' KV control plane and UCX range (the pods'
    UCX_TCP_PORT_RANGE), and nothing else reaches the KV ports; multi-node: group size ==
    --nnodes == the ranks of -tp x -dp;
  - Services, PDBs, HPAs, ScaledObjects, ServiceMonitors and InferencePools point at what exists;
  - the Grafana dashboard, the alerts and the endpoint picker name only metrics that a running
    tiny server (MoE, speculative decoding on) exports; the picker's EndpointPickerConfig
    validates as llm-d.ai/v1alpha1 (the deprecated group is refused) and the picker gets no flag
    it refuses.
Needs kubectl (Debian's kubernetes-client or any kubectl with kustomize), python3-yaml and the
npm packages of scripts/npm-package.json.

Usage: tests/e2e/test_deploy_manifests.py --tessera build/tessera
"""
import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, Server, free_port, request  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(REPO, "deploy", "k8s")
NPM = os.environ.get("TESSERA_NPM_DIR", os.path.join(REPO, ".deps", "npm"))
POD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
# Pod templates inside CRDs: kind -> [(label, path)].
CRD_POD_TEMPLATES = {"LeaderWorkerSet": [("leader", ("spec", "leaderWorkerTemplate", "leaderTemplate")),
                                         ("worker", ("spec", "leaderWorkerTemplate", "workerTemplate"))]}
# Variables the LeaderWorkerSet controller puts in every pod of a group, with example values.
LWS_ENV = {"LWS_LEADER_ADDRESS": "tessera-0.tessera.llm", "LWS_GROUP_SIZE": None, "LWS_WORKER_INDEX": None}
ABORT_GRACE_S = 5  # cli/cmd_serve.cc kAbortGrace: after the drain deadline
LOAD_TIMEOUT_S = 180  # generous bounds for steps that slow down on a loaded machine or under ASan


def kustomizations():
    out = []
    for root, _, files in os.walk(K8S):
        if "kustomization.yaml" in files:
            out.append(os.path.relpath(root, K8S))
    return sorted(out)


def render(rel):
    p = subprocess.run(["kubectl", "kustomize", os.path.join(K8S, rel)], capture_output=True, timeout=LOAD_TIMEOUT_S)
    if p.returncode != 0:
        raise AssertionError(f"kubectl kustomize {rel}: {p.stderr.decode(errors='replace')[-2000:]}")
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def validate(objs, workdir, name):
    path = os.path.join(workdir, name + ".json")
    with open(path, "w") as f:
        json.dump(objs, f)
    p = subprocess.run(["node", os.path.join(REPO, "tests/e2e/k8s_validate.mjs"), path], capture_output=True,
                       timeout=LOAD_TIMEOUT_S, env=dict(os.environ, TESSERA_NPM_DIR=NPM))
    return p.returncode, p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


def pod_specs(objs):
    """(object, pod template) for every pod template: workloads' and CRDs' (leader and worker)."""
    for o in objs:
        if o["kind"] in POD_KINDS:
            yield o, o["spec"]["template"]
        for _, path in CRD_POD_TEMPLATES.get(o["kind"], []):
            tmpl = o
            for k in path:
                tmpl = tmpl.get(k, {}) if tmpl is not None else None
            if tmpl:
                yield o, tmpl


def lws_worker(o, tmpl):
    return o["kind"] == "LeaderWorkerSet" and tmpl is o["spec"]["leaderWorkerTemplate"]["workerTemplate"]


def probe_exempt(o, tmpl, c):
    """A LeaderWorkerSet worker rank binds no port (rank 0 serves the API), so nothing can probe
    it; it exits when the group fails, and RecreateGroupOnPodRestart brings the group back."""
    return (lws_worker(o, tmpl) and not c.get("ports") and
            o["spec"]["leaderWorkerTemplate"].get("restartPolicy", "RecreateGroupOnPodRestart")
            == "RecreateGroupOnPodRestart")

def find(objs, kind, name=None):
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def is_tessera(container):
    return container["image"].split("/")[-1].startswith("tessera")


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_policy(objs):
    problems = []
    for o, tmpl in pod_specs(objs):
        spec = tmpl["spec"]
        pod_sc = spec.get("securityContext", {})
        for c in spec["containers"] + spec.get("initContainers", []):
            part = "" if o["kind"] in POD_KINDS else (" worker" if lws_worker(o, tmpl) else " leader")
            where = f"{o['kind']}/{o['metadata']['name']}{part} container {c['name']}"
            sc = c.get("securityContext", {})
            init = c in spec.get("initContainers", [])
            for probe in ([] if init or probe_exempt(o, tmpl, c) else
                          ("startupProbe", "readinessProbe", "livenessProbe")):
                if probe not in c:
                    problems.append(f"{where}: no {probe}")
            limits = c.get("resources", {}).get("limits", {})
            for r in ("cpu", "memory"):
                if r not in limits:
                    problems.append(f"{where}: no {r} limit")
            if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
                problems.append(f"{where}: runAsNonRoot not set")
            if sc.get("runAsUser", pod_sc.get("runAsUser", 1)) == 0:
                problems.append(f"{where}: runs as uid 0")
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: root filesystem not read-only")
            if sc.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation not false")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                problems.append(f"{where}: capabilities not all dropped")
            if is_tessera(c) and not init and not probe_exempt(o, tmpl, c):
                for probe, path in (("startupProbe", "/ready"), ("readinessProbe", "/ready"),
                                    ("livenessProbe", "/health")):
                    got = c.get(probe, {}).get("httpGet", {}).get("path")
                    if got != path:
                        problems.append(f"{where}: {probe} on {got}, want {path}")
    return problems


def mounted_config(objs, tmpl, container, path, workdir, stand_in=None):
    """The file a container sees at `path`, from the ConfigMap volume mounted above it. With
    `stand_in`, the ConfigMap may be one the operator makes (e.g. from `tessera calibrate`),
    absent from the render: the file then holds `stand_in`."""
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/") + "/"
        if path.startswith(mp):
            vol = next(v for v in tmpl["spec"]["volumes"] if v["name"] == m["name"])
            assert "configMap" in vol, f"{path}: volume {m['name']} is not a ConfigMap"
            cms = find(objs, "ConfigMap", vol["configMap"]["name"])
            assert cms or stand_in is not None, f"{path}: ConfigMap {vol['configMap']['name']} not in the render"
            key = m.get("subPath") or path[len(mp):]
            data = cms[0]["data"][key] if cms else stand_in
            out = os.path.join(workdir, f"{vol['configMap']['name']}-{key}")
            with open(out, "w") as f:
                f.write(data)
            return out, data
    raise AssertionError(f"{path} is not under any volumeMount")


# What `tessera calibrate --out` writes, in the shape serve reads (runtime/sim/cost_model.h).
STAND_IN_COST_MODEL = json.dumps({"model": "linear", "version": 1, "base_ms": 2, "per_prefill_token_ms": 0.05,
                                  "per_decode_seq_ms": 0.5})


TEST_INTERNAL_KEY = "manifest-test-internal-key-0123456789"


def mounted_secret(tmpl, container, path, workdir):
    """A stand-in for the Secret file a container sees at `path` (which must be under a Secret
    volume's mount): a test key, written locally."""
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/") + "/"
        if path.startswith(mp):
            vol = next(v for v in tmpl["spec"]["volumes"] if v["name"] == m["name"])
            assert "secret" in vol, f"{path}: volume {m['name']} is not a Secret"
            out = os.path.join(workdir, f"secret-{vol['secret']['secretName']}")
            with open(out, "w") as f:
                f.write(TEST_INTERNAL_KEY + "\n")
            return out, vol["secret"]["secretName"]
    raise AssertionError(f"{path} is not under any volumeMount")


# The llm-d router's endpoint picker (v0.10) and the flags it refuses at start ("configure metrics
# via engineConfigs in EndpointPickerConfig instead").
EPP_IMAGE = "ghcr.io/llm-d/llm-d-router-endpoint-picker"
REMOVED_EPP_FLAGS = ("--total-queued-requests-metric", "--total-running-requests-metric",
                     "--kv-cache-usage-percentage-metric", "--lora-info-metric", "--cache-info-metric")


def epp_config(objs, epp):
    """The EndpointPickerConfig the picker reads: --config-file in the ConfigMap mounted there."""
    spec = epp["spec"]["template"]["spec"]
    c = spec["containers"][0]
    path = arg_value(c["args"], "--config-file")
    mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/"))
    vol = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    cm = find(objs, "ConfigMap", vol["configMap"]["name"])[0]
    return yaml.safe_load(cm["data"][os.path.relpath(path, mount["mountPath"])])


def arg_value(args, flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def substitute_env(o, tmpl, c, args):
    """args with $(VAR) replaced as the kubelet would: VAR must be in the container's env (a
    downward-API pod IP gets an example address) or be one LeaderWorkerSet injects."""
    values = {}
    for e in c.get("env", []):
        if "value" in e:
            values[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
            values[e["name"]] = "10.1.2.3"
    if o["kind"] == "LeaderWorkerSet":
        lwt = o["spec"]["leaderWorkerTemplate"]
        values.update(LWS_ENV, LWS_GROUP_SIZE=str(lwt.get("size", 1)),
                      LWS_WORKER_INDEX="1" if lws_worker(o, tmpl) else "0")

    def one(m):
        assert m.group(1) in values, (f"{o['metadata']['name']}: $({m.group(1)}) in args is not in the container's "
                                      "env (Kubernetes would pass it literally)")
        return values[m.group(1)]
    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, a) for a in args], values


def check_tessera_args(objs, tessera, workdir):
    """Every tessera container's args pass `serve --check-config=flags` with the mounted config."""
    checked = 0
    for o, tmpl in pod_specs(objs):
        for c in tmpl["spec"]["containers"]:
            if not is_tessera(c):
                continue
            raw_host = arg_value(c.get("args", []), "--host")
            args, env = substitute_env(o, tmpl, c, c.get("args", []))
            assert args and args[0] == "serve", f"{o['metadata']['name']}: args {args} do not start with serve"
            settings = {}
            cfg = arg_value(args, "--config")
            if cfg:
                local, text = mounted_config(objs, tmpl, c, cfg, workdir)
                settings = tomllib.loads(text)
                args = [local if a == cfg else a.replace("=" + cfg, "=" + local) for a in args]
            cost = arg_value(args, "--cost-model")
            if cost:
                local, _ = mounted_config(objs, tmpl, c, cost, workdir, stand_in=STAND_IN_COST_MODEL)
                args = [local if a == cost else a for a in args]
            key = arg_value(args, "--internal-api-key-file")
            if key:
                local, _ = mounted_secret(tmpl, c, key, workdir)
                args = [local if a == key else a for a in args]
            p = subprocess.run([tessera] + args + ["--check-config=flags"], capture_output=True,
                               timeout=LOAD_TIMEOUT_S, env=dict(os.environ, TESSERA_API_KEY=""))
            assert p.returncode == 0, (f"{o['metadata']['name']}: `tessera {' '.join(args)}` refused: "
                                       f"{p.stderr.decode(errors='replace')[-1500:]}")
            checked += 1
            ports = {pp["name"]: pp["containerPort"] for pp in c.get("ports", [])}
            if probe_exempt(o, tmpl, c):
                continue  # a worker rank binds nothing; its args were checked above
            # Ports the server binds == the ports the pod declares.
            role = arg_value(args, "--role") or settings.get("role", "unified")
            http = int(arg_value(args, "--port") or settings.get("port", 8000))
            grpc = int(arg_value(args, "--grpc-port") or settings.get("grpc-port", 50051))
            assert ports.get("http") == http, f"containerPort http {ports.get('http')} != server port {http}"
            if role == "router":
                assert "grpc" not in ports, "the router serves no gRPC, yet the pod declares a grpc port"
            elif grpc >= 0:
                assert ports.get("grpc") == grpc, f"containerPort grpc {ports.get('grpc')} != gRPC port {grpc}"
            if role in ("prefill", "decode"):
                kv = int(arg_value(args, "--kv-transfer-port") or settings.get("kv-transfer-port", 0))
                assert kv and ports.get("kv-transfer") == kv, f"{role}: kv-transfer port {kv} not declared: {ports}"
            host = arg_value(args, "--host") or settings.get("host", "127.0.0.1")
            pod_ip = raw_host == "$(POD_IP)" and env.get("POD_IP") == "10.1.2.3"
            assert host in ("0.0.0.0", "::") or pod_ip, f"--host {host}: the pod would not accept traffic"
            drain = int(arg_value(args, "--drain-timeout") or settings.get("drain-timeout", 30))
            pre = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            grace = tmpl["spec"].get("terminationGracePeriodSeconds", 30)
            assert grace > pre + drain + ABORT_GRACE_S, (
                f"terminationGracePeriodSeconds {grace} <= preStop {pre} + drain-timeout {drain} + {ABORT_GRACE_S}")
    assert checked, "no tessera container in the render"


def check_references(objs):
    pods = [(o, t) for o, t in pod_specs(objs)]
    for svc in find(objs, "Service"):
        sel = svc["spec"].get("selector", {})
        targets = [t for _, t in pods if matches(sel, t["metadata"].get("labels", {}))]
        assert targets, f"Service {svc['metadata']['name']} selects no pod template"
        names = {p.get("name") for t in targets for c in t["spec"]["containers"] for p in c.get("ports", [])}
        numbers = {p["containerPort"] for t in targets for c in t["spec"]["containers"] for p in c.get("ports", [])}
        for p in svc["spec"]["ports"]:
            assert p.get("name"), f"Service {svc['metadata']['name']}: unnamed port {p}"
            tp = p.get("targetPort", p["port"])
            assert tp in names or tp in numbers, f"Service {svc['metadata']['name']}: targetPort {tp} not in the pods"
    for pdb in find(objs, "PodDisruptionBudget"):
        sel = pdb["spec"]["selector"]["matchLabels"]
        assert any(matches(sel, t["metadata"]["labels"]) for _, t in pods), \
            f"PDB {pdb['metadata']['name']} selects nothing"
    for hpa in find(objs, "HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        assert find(objs, ref["kind"], ref["name"]), f"HPA targets missing {ref}"
    for so in find(objs, "ScaledObject"):
        assert find(objs, "Deployment", so["spec"]["scaleTargetRef"]["name"]), \
            "ScaledObject targets a missing Deployment"
    for sm in find(objs, "ServiceMonitor"):
        svcs = [s for s in find(objs, "Service")
                if matches(sm["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))]
        assert svcs, "ServiceMonitor selects no Service"
        for ep in sm["spec"]["endpoints"]:
            assert any(ep["port"] in [p["name"] for p in s["spec"]["ports"]] for s in svcs), f"no Service port {ep['port']}"
    for pool in find(objs, "InferencePool"):
        sel = pool["spec"]["selector"]["matchLabels"]
        targets = [t for _, t in pods if matches(sel, t["metadata"]["labels"])]
        assert targets, "InferencePool selects no pods"
        ports = {p["containerPort"] for t in targets for c in t["spec"]["containers"] for p in c.get("ports", [])}
        for tp in pool["spec"]["targetPorts"]:
            assert tp["number"] in ports, f"InferencePool targetPort {tp['number']} not a container port"
        epp = pool["spec"]["endpointPickerRef"]
        svc = find(objs, "Service", epp["name"])
        assert svc and epp["port"]["number"] in [p["port"] for p in svc[0]["spec"]["ports"]], "EPP Service/port missing"


def tessera_args(o, tmpl):
    c = next(c for c in tmpl["spec"]["containers"] if is_tessera(c))
    return substitute_env(o, tmpl, c, c["args"])[0]


def check_disaggregated(objs):
    """The router's instance names are headless Services over pools of the right role, each pool
    its own Deployment (scaled alone) with a PDB; KV over UCX tcp between pods."""
    router = find(objs, "Deployment", "tessera")[0]
    rargs = tessera_args(router, router["spec"]["template"])
    assert arg_value(rargs, "--role") == "router", rargs
    assert not any("persistentVolumeClaim" in v for v in router["spec"]["template"]["spec"]["volumes"]), \
        "the router mounts the model volume"
    front = find(objs, "Service", "tessera")[0]
    assert matches(front["spec"]["selector"], router["spec"]["template"]["metadata"]["labels"]), \
        "Service tessera does not select the router"
    pools = set()
    for flag, role in (("--prefill-instances", "prefill"), ("--decode-instances", "decode")):
        value = arg_value(rargs, flag)
        assert value, f"router has no {flag}"
        for entry in value.split(","):
            host, port = entry.rsplit(":", 1)
            svc = find(objs, "Service", host)
            assert svc, f"{flag} {entry}: no Service {host}"
            svc = svc[0]
            assert svc["spec"].get("clusterIP") == "None", f"Service {host} is not headless (one address, not each pod)"
            deps = [d for d in find(objs, "Deployment")
                    if matches(svc["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])]
            assert len(deps) == 1, f"Service {host} selects {len(deps)} Deployments"
            dep = deps[0]
            pargs = tessera_args(dep, dep["spec"]["template"])
            assert arg_value(pargs, "--role") == role, f"{host} selects --role {arg_value(pargs, '--role')}"
            assert "tcp" in (arg_value(pargs, "--kv-ucx-tls") or "").split(","), f"{role}: KV not over UCX tcp"
            # DNS of a headless Service gives pod IPs: the router calls the container port itself.
            c = next(c for c in dep["spec"]["template"]["spec"]["containers"] if is_tessera(c))
            http = {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
            assert int(port) == http, f"{flag} {entry}: port {port}, the pods serve HTTP on {http}"
            assert any(matches(pdb["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
                       and not matches(pdb["spec"]["selector"]["matchLabels"],
                                       router["spec"]["template"]["metadata"]["labels"])
                       for pdb in find(objs, "PodDisruptionBudget")), f"no PDB of its own for {dep['metadata']['name']}"
            pools.add(dep["metadata"]["name"])
    assert len(pools) == 2, f"prefill and decode pools are not separate Deployments: {pools}"
    check_internal_key(objs)
    check_network_policies(objs)


def check_internal_key(objs):
    """Every role of the topology reads --internal-api-key-file from one and the same Secret."""
    secrets = set()
    for o, tmpl in pod_specs(objs):
        c = next(c for c in tmpl["spec"]["containers"] if is_tessera(c))
        path = arg_value(c["args"], "--internal-api-key-file")
        assert path, f"{o['metadata']['name']}: no --internal-api-key-file"
        secrets.add(mounted_secret(tmpl, c, path, tempfile.gettempdir())[1])
    assert len(secrets) == 1, f"the roles read different Secrets: {secrets}"


def allowed_sources(objs, pod_labels, port):
    """What the NetworkPolicies selecting a pod let reach `port`: "any" (no policy, or a rule
    without `from`), else the pod label sets of the peers allowed (namespaceSelector peers
    reduced to their pod labels)."""
    policies = [p for p in find(objs, "NetworkPolicy")
                if matches(p["spec"]["podSelector"].get("matchLabels", {}), pod_labels)
                and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    if not policies:
        return "any"
    out = []
    for p in policies:
        for rule in p["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports is not None and not any(pp.get("port") == port or
                                              (isinstance(pp.get("port"), int) and pp.get("endPort") and
                                               pp["port"] <= port <= pp["endPort"]) for pp in ports):
                continue
            if "from" not in rule:
                return "any"
            out += [peer.get("podSelector", {}).get("matchLabels", {}) for peer in rule["from"]]
    return out


def check_network_policies(objs):
    """The threat model's reachability (docs/architecture.md, "Threat model") holds on the rendered
    objects: each pool's ports are open to exactly the roles that call them."""
    def pod(role_name):
        d = find(objs, "Deployment", role_name)[0]
        return d, d["spec"]["template"]["metadata"]["labels"], next(
            c for c in d["spec"]["template"]["spec"]["containers"] if is_tessera(c))
    router, router_l, _ = pod("tessera")
    _, prefill_l, prefill_c = pod("tessera-prefill")
    _, decode_l, decode_c = pod("tessera-decode")
    assert allowed_sources(objs, router_l, 8000) == "any", "clients cannot reach the router's HTTP port"

    def only(labels, port, callers, what):
        got = allowed_sources(objs, labels, port)
        assert got != "any", f"{what}: port {port} is open to anyone"
        allowed = [g for g in got if g.get("app.kubernetes.io/name") != "prometheus"]
        for g in allowed:
            assert any(matches(g, c) for c in callers), f"{what}: port {port} is open to {g}"
        for c in callers:
            assert any(matches(g, c) for g in allowed), f"{what}: port {port} is closed to {c}"
    for labels, c, name in ((prefill_l, prefill_c, "prefill"), (decode_l, decode_c, "decode")):
        only(labels, 8000, [router_l], f"{name} HTTP")
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        lo, hi = (int(x) for x in env["UCX_TCP_PORT_RANGE"].split("-"))
        peers = [decode_l] if name == "prefill" else [prefill_l]
        only(labels, lo, peers, f"{name} UCX")
        only(labels, hi, peers, f"{name} UCX")
    kv = int(arg_value(prefill_c["args"], "--kv-transfer-port"))
    only(prefill_l, kv, [decode_l], "prefill KV control plane")
    got = allowed_sources(objs, decode_l, int(arg_value(decode_c["args"], "--kv-transfer-port")))
    assert got != "any" and not got, f"decode KV control plane: open to {got} (nothing pulls from a decode here)"


def check_multi_node(objs):
    """LeaderWorkerSet: group size == --nnodes == ranks (-tp x -dp); the leader serves the API and
    the rendezvous port in --leader-addr; Service tessera selects leaders only."""
    lws = find(objs, "LeaderWorkerSet")
    assert len(lws) == 1, "no LeaderWorkerSet"
    lws = lws[0]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    size = lwt["size"]
    assert size > 1, f"size {size}: not multi-node"
    assert lwt.get("restartPolicy") == "RecreateGroupOnPodRestart", "a lost rank must recreate its group"
    for label, path in CRD_POD_TEMPLATES["LeaderWorkerSet"]:
        tmpl = lwt[path[-1]]
        args = tessera_args(lws, tmpl)
        nnodes = int(arg_value(args, "--nnodes"))
        ranks = int(arg_value(args, "--tensor-parallel-size") or 1) * int(arg_value(args, "--data-parallel-size") or 1)
        assert nnodes == size == ranks, f"{label}: --nnodes {nnodes}, size {size}, tp x dp {ranks}"
        assert arg_value(args, "--node-rank") == ("0" if label == "leader" else "1"), (label, args)
        assert arg_value(args, "--leader-addr") == LWS_ENV["LWS_LEADER_ADDRESS"] + ":29500", args
    leader = lwt["leaderTemplate"]
    lc = next(c for c in leader["spec"]["containers"] if is_tessera(c))
    assert {p["name"]: p["containerPort"] for p in lc["ports"]}.get("rendezvous") == 29500, lc["ports"]
    front = find(objs, "Service", "tessera")[0]
    assert matches(front["spec"]["selector"], leader["metadata"]["labels"]), "Service tessera misses the leaders"
    assert not matches(front["spec"]["selector"], lwt["workerTemplate"]["metadata"]["labels"]), \
        "Service tessera selects worker ranks (they serve nothing)"


def set_arg(args, flag, value):
    i = args.index(flag)
    return args[:i + 1] + [value] + args[i + 2:]


def lws_group_serves(objs, tessera, workdir, model):
    """The LeaderWorkerSet's own leader and worker args ($(VAR)s as LWS sets them), run as two
    processes on loopback with a tiny MoE model: they form the group, the leader serves a
    completion, and the worker exits when the leader stops."""
    lws = find(objs, "LeaderWorkerSet")[0]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    store = free_port()
    leader, worker = None, None
    try:
        for label, path in CRD_POD_TEMPLATES["LeaderWorkerSet"]:
            tmpl = lwt[path[-1]]
            c = next(c for c in tmpl["spec"]["containers"] if is_tessera(c))
            args = tessera_args(lws, tmpl)
            cfg = arg_value(args, "--config")
            local, _ = mounted_config(objs, tmpl, c, cfg, workdir)
            args = set_arg(args, "--config", local)
            args = set_arg(set_arg(args, "--leader-addr", f"127.0.0.1:{store}"), "--threads", "1")
            args += ["--model", model, "--kv-cache-mb", "64", "--max-model-len", "512"]
            if label == "leader":
                leader = Server(tessera, args[1:], workdir, "lws-leader")
            else:
                log = open(os.path.join(workdir, "lws-worker.log"), "wb")
                worker = subprocess.Popen([tessera] + args, stdout=log, stderr=subprocess.STDOUT,
                                          env=dict(os.environ, TESSERA_HOME=os.path.join(workdir, "worker-home")))
        leader.wait_ready(timeout=LOAD_TIMEOUT_S)
        status, _, body = request(leader.port, "POST", "/v1/completions",
                                  {"model": "tiny-moe", "prompt": "hi", "max_tokens": 4, "temperature": 0})
        assert status == 200 and body["usage"]["completion_tokens"] == 4, (status, body)
        leader.stop()
        assert worker.wait(timeout=LOAD_TIMEOUT_S) == 0, open(os.path.join(workdir, "lws-worker.log")).read()[-1500:]
        assert "stopped by the leader" in open(os.path.join(workdir, "lws-worker.log")).read()
    finally:
        if leader is not None:
            leader.stop()
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()


def metric_names_in(text):
    return set(re.findall(r"tessera:[a-z0-9_]+", text))


def exported_metrics(tessera, workdir):
    """Metric names a tiny MoE server with speculative decoding and SLO-aware admission exports
    after a finished request and a refused one (429: one request in flight at most, while a long
    one runs)."""
    model = os.path.join(workdir, "tiny-moe")
    p = subprocess.run([tessera, "synth", "--arch", "qwen3_moe", "--size", "tiny", "--dtype", "f32", "--out", model],
                       capture_output=True, timeout=LOAD_TIMEOUT_S)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-1500:]
    cost = os.path.join(workdir, "metrics-cost-model.json")
    with open(cost, "w") as f:
        f.write(STAND_IN_COST_MODEL)
    # --ttft-slo-ms (10 minutes: refuses nothing) exports the SLO metrics the SLO autoscaler reads.
    srv = Server(tessera, ["--model", model, "--max-model-len", "512", "--max-pending-requests", "1",
                           "--drain-timeout", "1", "--cost-model", cost, "--ttft-slo-ms", "600000",
                           "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2, '
                           '"prompt_lookup_min": 1, "prompt_lookup_max": 2}'], workdir, "metrics")
    long_req = None
    try:
        srv.wait_ready(timeout=LOAD_TIMEOUT_S)
        status, _, _ = request(srv.port, "POST", "/v1/completions",
                               {"model": "tiny-moe", "prompt": "a b a b a b a b", "max_tokens": 8, "temperature": 0})
        assert status == 200, status
        body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 400, "ignore_eos": True, "n": 4}
        long_status = []

        def long_request():  # retried while refused: the previous request may not have left yet
            while True:
                status, _, _ = request(srv.port, "POST", "/v1/completions", body, timeout=LOAD_TIMEOUT_S)
                if status != 429 or time.time() > deadline:
                    long_status.append(status)
                    return
                time.sleep(0.05)
        # Bounded by time, not by a count of tries: on a loaded machine (or under ASan) the long
        # request can take seconds to be admitted; it then runs for seconds (8 s unloaded).
        deadline = time.time() + LOAD_TIMEOUT_S
        long_req = threading.Thread(target=long_request)
        long_req.start()
        while time.time() < deadline and long_req.is_alive():  # until it holds the one slot
            _, headers, _ = request(srv.port, "GET", "/metrics")
            if re.search(r"^tessera:num_requests_running\{[^}]*\} [1-9]", headers["_body"], re.M):
                break
            time.sleep(0.02)
        refused, seen = False, []
        while time.time() < deadline and long_req.is_alive():
            status, _, _ = request(srv.port, "POST", "/v1/completions",
                                   {"model": "tiny-moe", "prompt": "hi", "max_tokens": 1})
            seen.append(status)
            if status == 429:
                refused = True
                break
            time.sleep(0.02)
        assert refused, (f"no 429 while a request was in flight with --max-pending-requests 1: {seen[-20:]} "
                         f"(long request: {long_status or 'running'})")
        status, headers, _ = request(srv.port, "GET", "/metrics")
        assert status == 200, status
        lines = headers["_body"].splitlines()
        return ({ln.split()[2] for ln in lines if ln.startswith("# TYPE ")} |
                {re.split(r"[{ ]", ln, 1)[0] for ln in lines if ln and not ln.startswith("#")})
    finally:
        srv.stop()
        if long_req is not None:
            long_req.join(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    start = time.time()
    res = Results()
    work = tempfile.mkdtemp(prefix="tessera-deploy-")
    try:
        if not shutil.which("kubectl"):
            print("FAIL kubectl not found: install Debian's kubernetes-client (scripts/bootstrap does)")
            return 1
        rendered = {}
        for rel in kustomizations():
            def do_render(rel=rel):
                rendered[rel] = render(rel)
            res.run(f"{rel}: renders", do_render)
        want = {"base", "overlays/cpu", "overlays/gpu", "overlays/autoscaling", "overlays/autoscaling/keda",
                "overlays/autoscaling-slo",
                "overlays/monitoring", "overlays/gateway", "overlays/disaggregated", "overlays/multi-node"}
        res.run("every overlay exists", lambda: (_ for _ in ()).throw(AssertionError(sorted(want - set(rendered))))
                if want - set(rendered) else None)

        for rel, objs in rendered.items():
            def do_validate(rel=rel, objs=objs):
                rc, out = validate(objs, work, rel.replace("/", "_"))
                assert rc == 0, out[-3000:]
            res.run(f"{rel}: objects valid against their schemas", do_validate)

        # The validator can fail: broken copies of real objects must be refused.
        def validator_refuses():
            base = rendered["overlays/gateway"]
            dep = copy.deepcopy(find(base, "Deployment", "tessera")[0])
            dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
            pool = copy.deepcopy(find(base, "InferencePool")[0])
            pool["spec"]["targetPort"] = pool["spec"].pop("targetPorts")
            sm = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "x"},
                  "spec": {"selector": {}, "endpoints": [{"interval": 15}]}}
            unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}}
            lws = copy.deepcopy(find(rendered["overlays/multi-node"], "LeaderWorkerSet")[0])
            lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"] = 8
            lws2 = copy.deepcopy(find(rendered["overlays/multi-node"], "LeaderWorkerSet")[0])
            lws2["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
            for bad in (dep, pool, sm, unknown, lws, lws2):
                rc, out = validate([bad], work, "bad")
                assert rc == 1 and "INVALID" in out, f"accepted a broken {bad['kind']}: {out[-500:]}"
        res.run("validator refuses broken objects", validator_refuses)

        for rel, objs in rendered.items():
            def do_policy(objs=objs):
                problems = check_policy(objs)
                assert not problems, "\n".join(problems)
            res.run(f"{rel}: policy (probes, limits, non-root, read-only root, capabilities)", do_policy)
            if list(pod_specs(objs)):
                res.run(f"{rel}: tessera args pass serve --check-config",
                        lambda objs=objs: check_tessera_args(objs, tessera, work))
            res.run(f"{rel}: references resolve", lambda objs=objs: check_references(objs))

        def policy_can_fail():
            objs = copy.deepcopy(rendered["overlays/cpu"])
            c = find(objs, "Deployment", "tessera")[0]["spec"]["template"]["spec"]["containers"][0]
            del c["livenessProbe"]
            c["securityContext"]["readOnlyRootFilesystem"] = False
            problems = check_policy(objs)
            assert any("livenessProbe" in p for p in problems) and any("read-only" in p for p in problems), problems
            c["args"] += ["--max-num-seqs", "0"]
            try:
                check_tessera_args(objs, tessera, work)
            except AssertionError as e:
                assert "--max-num-seqs" in str(e), e
            else:
                raise AssertionError("a bad flag in the args passed")
        res.run("policy and flag checks can fail", policy_can_fail)

        def lws_policy_can_fail():
            objs = copy.deepcopy(rendered["overlays/multi-node"])
            lwt = find(objs, "LeaderWorkerSet")[0]["spec"]["leaderWorkerTemplate"]
            w = lwt["workerTemplate"]["spec"]["containers"][0]
            del w["resources"]["limits"]["memory"]
            w["ports"] = [{"name": "http", "containerPort": 8000}]  # a worker with a port must be probed
            problems = check_policy(objs)
            assert any("no memory limit" in p for p in problems), problems
            assert any("no livenessProbe" in p for p in problems), problems
            lwt["leaderTemplate"]["spec"]["containers"][0]["args"] += ["--node-rank", "$(NODE_RANK)"]
            try:
                check_tessera_args(objs, tessera, work)
            except AssertionError as e:
                assert "$(NODE_RANK)" in str(e), e
            else:
                raise AssertionError("an undefined $(VAR) in args passed")
            objs = copy.deepcopy(rendered["overlays/multi-node"])
            lwt = find(objs, "LeaderWorkerSet")[0]["spec"]["leaderWorkerTemplate"]
            lwt["size"] = 3
            try:
                check_multi_node(objs)
            except AssertionError as e:
                assert "size 3" in str(e), e
            else:
                raise AssertionError("a group size unequal to --nnodes passed")
        res.run("LeaderWorkerSet policy, $(VAR) and group-size checks can fail", lws_policy_can_fail)

        res.run("disaggregated: router -> headless Services -> prefill/decode pools",
                lambda: check_disaggregated(rendered["overlays/disaggregated"]))

        def disaggregated_can_fail():
            objs = copy.deepcopy(rendered["overlays/disaggregated"])
            del find(objs, "Service", "tessera-decode")[0]["spec"]["clusterIP"]
            try:
                check_disaggregated(objs)
            except AssertionError as e:
                assert "not headless" in str(e), e
            else:
                raise AssertionError("a ClusterIP Service for a pool passed")
            for mutate, words in (
                    (lambda o: find(o, "NetworkPolicy", "tessera-prefill")[0]["spec"]["ingress"][1]["from"].append(
                        {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "server"}}}),
                     "open to"),
                    (lambda o: find(o, "NetworkPolicy", "tessera-decode")[0]["spec"]["ingress"][0].pop("from"),
                     "open to anyone"),
                    (lambda o: o.remove(find(o, "NetworkPolicy", "tessera-prefill")[0]), "open to anyone"),
                    (lambda o: find(o, "Deployment", "tessera-decode")[0]["spec"]["template"]["spec"]["containers"][0]
                     ["args"].remove("--internal-api-key-file"), "--internal-api-key-file")):
                objs = copy.deepcopy(rendered["overlays/disaggregated"])
                mutate(objs)
                try:
                    check_disaggregated(objs)
                except AssertionError as e:
                    assert words in str(e), e
                else:
                    raise AssertionError(f"a broken policy or key wiring passed ({words})")
        res.run("disaggregated check can fail (headless, NetworkPolicies, internal key)", disaggregated_can_fail)
        res.run("multi-node: LeaderWorkerSet group wired to --nnodes/--node-rank/--leader-addr",
                lambda: check_multi_node(rendered["overlays/multi-node"]))

        def gpu_overlay():
            objs = rendered["overlays/gpu"]
            spec = find(objs, "Deployment", "tessera")[0]["spec"]["template"]["spec"]
            c = spec["containers"][0]
            assert c["resources"]["limits"].get("nvidia.com/gpu") == 1, c["resources"]
            assert arg_value(c["args"], "--device") == "cuda", c["args"]
            shm = [v for v in spec["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
            assert shm and any(m["mountPath"] == "/dev/shm" for m in c["volumeMounts"]), spec["volumes"]
            assert spec.get("nodeSelector") and spec.get("tolerations"), "no nodeSelector/tolerations"
            assert c["image"].endswith(":cuda"), c["image"]
        res.run("gpu overlay: GPU limit, --device cuda, /dev/shm, node selection", gpu_overlay)

        exported = set()

        def get_exported():
            exported.update(exported_metrics(tessera, work))
            assert "tessera:moe_expert_tokens_total" in exported and "tessera:request_rejected_total" in exported, \
                sorted(exported)
        res.run("a tiny MoE server's metric names", get_exported)
        res.run("multi-node: the LeaderWorkerSet's leader and worker args form a group and serve",
                lambda: lws_group_serves(rendered["overlays/multi-node"], tessera, work,
                                         os.path.join(work, "tiny-moe")))

        def names_exported(where, text):
            used = metric_names_in(text)
            assert used, f"{where}: names no tessera metric"
            missing = sorted(used - exported)
            assert not missing, f"{where} uses metrics the server does not export: {missing}"

        def dashboard():
            with open(os.path.join(K8S, "overlays/monitoring/tessera-dashboard.json")) as f:
                text = f.read()
            dash = json.loads(text)
            exprs = "\n".join(t["expr"] for p in dash["panels"] for t in p["targets"])
            names_exported("dashboard", exprs)
            titles = " ".join(p["title"] for p in dash["panels"]).lower()
            for want_title in ("first token", "inter-token", "end-to-end", "throughput", "kv cache",
                               "prefix cache", "preemptions", "speculative", "expert"):
                assert want_title in titles, f"no panel about {want_title}"
        res.run("dashboard names only exported metrics", dashboard)

        def alerts():
            rules = find(rendered["overlays/monitoring"], "PrometheusRule")[0]
            exprs = "\n".join(r["expr"] for g in rules["spec"]["groups"] for r in g["rules"])
            names_exported("alerts", exprs)
            got = {r["alert"] for g in rules["spec"]["groups"] for r in g["rules"]}
            assert {"TesseraHighQueueTime", "TesseraKvCacheNearlyFull", "TesseraHighErrorRate"} <= got, got
        res.run("alerts name only exported metrics", alerts)

        def scalers():
            renamed = set()
            for rel in ("overlays/autoscaling", "overlays/autoscaling-slo"):
                adapter = find(rendered[rel], "ConfigMap", "tessera-prometheus-adapter-rules")[0]
                for rule in yaml.safe_load(adapter["data"]["config.yaml"])["rules"]:
                    series = metric_names_in(rule["seriesQuery"])
                    names_exported("adapter rule", rule["seriesQuery"])
                    renamed |= {re.sub(rule["name"]["matches"], rule["name"]["as"].replace("${1}", r"\1"), s)
                                for s in series}
            for rel, count in (("overlays/autoscaling", 1), ("overlays/autoscaling-slo", 2)):
                hpa = find(rendered[rel], "HorizontalPodAutoscaler")[0]
                names = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]]
                assert len(names) == count and set(names) <= renamed, (rel, names, renamed)
            slo = find(rendered["overlays/autoscaling-slo"], "Deployment", "tessera")[0]
            args = slo["spec"]["template"]["spec"]["containers"][0]["args"]
            assert arg_value(args, "--ttft-slo-ms") and arg_value(args, "--cost-model"), \
                "the SLO overlay scales on a metric its pods do not export"
            so = find(rendered["overlays/autoscaling/keda"], "ScaledObject")[0]
            names_exported("ScaledObject", so["spec"]["triggers"][0]["metadata"]["query"])
        res.run("HPA metric is the adapter's name for an exported metric; KEDA query too", scalers)

        def picker():
            gw = rendered["overlays/gateway"]
            epp = find(gw, "Deployment", "tessera-epp")[0]
            container = epp["spec"]["template"]["spec"]["containers"][0]
            args = container["args"]
            # The llm-d router's picker refuses the older metric-name flags: the names are in its config.
            for flag in REMOVED_EPP_FLAGS:
                assert arg_value(args, flag) is None, f"EPP passes {flag}, which the picker refuses"
            assert container["image"].startswith(EPP_IMAGE + ":"), container["image"]
            conf = epp_config(gw, epp)
            rc, out = validate([conf], work, "epp_config")
            assert rc == 0, out[-2000:]
            defined = {p.get("name", p["type"]) for p in conf["plugins"]}
            for prof in conf["schedulingProfiles"]:
                refs = {p["pluginRef"] for p in prof["plugins"]}
                assert refs <= defined, f"profile {prof['name']} names undefined plugins {sorted(refs - defined)}"
            ext = next(p for p in conf["plugins"] if p["type"] == "core-metrics-extractor")["parameters"]
            engine = next(e for e in ext["engineConfigs"] if e["name"] == ext["defaultEngine"])
            for key in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec"):
                assert engine.get(key), f"engine {engine['name']} has no {key} (the picker would read vLLM's name)"
                names_exported(f"EPP {key}", engine[key])
        res.run("endpoint picker: llm-d.ai/v1alpha1 config valid, reads exported metric names", picker)

        def picker_refuses_deprecated():
            conf = epp_config(rendered["overlays/gateway"], find(rendered["overlays/gateway"], "Deployment",
                                                                   "tessera-epp")[0])
            old = dict(conf, apiVersion="inference.networking.x-k8s.io/v1alpha1")
            typo = dict(conf, schedulingProfile=conf["schedulingProfiles"])
            for bad in (old, typo):
                rc, out = validate([bad], work, "bad_epp")
                assert rc == 1 and "INVALID" in out, f"accepted {bad['apiVersion']}: {out[-500:]}"
        res.run("the validator refuses the deprecated EndpointPickerConfig group and unknown fields",
                picker_refuses_deprecated)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
