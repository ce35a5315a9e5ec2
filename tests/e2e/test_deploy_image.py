#!/usr/bin/env python3
"""deploy/docker: the CPU image builds and its own tessera serves.

A Debian 12 base made by `mmdebstrap` (no registry is reachable here) is imported into a
private buildah store; deploy/docker/Dockerfile.cpu's runtime stage is built verbatim with
`buildah bud --isolation chroot` (its build stage, a from-source compile that takes far too
long for a test, is replaced by the tessera under test and the package list
deploy/docker/runtime-packages.sh derives from its ldd, which is what that stage produces).
Then `buildah run --isolation chroot` starts the image's /usr/local/bin/tessera as uid 10001 on
loopback with deploy/k8s/config/serve.toml (the file the manifests mount) and a tiny model
mounted at /models/model: /ready answers, a completion works, and SIGTERM drains (/ready 503,
the in-flight stream finishes with [DONE], exit 0).

Also lints both Dockerfiles (a small checker: hadolint is not in Debian) and checks the CUDA
Dockerfile's CUDA packages against ldd of a CUDA build of tessera when one is at hand.

Exits 77 (ctest: skipped) with the reason when the image part cannot run here: no
mmdebstrap/buildah, not root, no Debian mirror, or a tessera that links libraries no Debian package owns (a
CUDA build without the tessera-cpu beside it: set TESSERA_CPU_BINARY to a CPU build). The Debian base is cached in
$TESSERA_IMAGE_CACHE (default ~/.cache/tessera/deploy-image) for a week.

Usage: tests/e2e/test_deploy_image.py --tessera build/tessera
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Results, free_port, request, synth_model  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = os.path.join(REPO, "deploy", "docker")
SKIP = 77
MIRROR = "http://deb.debian.org/debian"
BASE_MAX_AGE_S = 7 * 86400
# NVIDIA's package for each CUDA library soname a CUDA build may load ({v}: 13-0 style).
CUDA_LIB_PACKAGES = {r"libcublas\.so\.(\d+)": "libcublas", r"libcublasLt\.so\.(\d+)": "libcublas",
                     r"libcudart\.so\.(\d+)": "cuda-cudart", r"libnccl\.so\.2": "libnccl"}


def sh(cmd, timeout=600, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=timeout, **kw)


def ldd_libs(binary):
    out = sh(["ldd", binary]).stdout.decode()
    return re.findall(r"=> (/\S+)", out)


# --- Dockerfile lint ----------------------------------------------------------------------------

def stages(text):
    """[(name, [lines])] of a Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.upper().startswith("FROM "):
            m = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", s, re.I)
            out.append((m.group(1), []))
        if out:
            out[-1][1].append(s)
    return out


def lint_dockerfile(path):
    text = open(path).read()
    problems = []
    st = stages(text)
    names = [n for n, _ in st]
    if names[-1:] != ["runtime"] or "build" not in names:
        problems.append(f"stages {names}: want a 'build' stage and a final 'runtime' stage")
    for m in re.finditer(r"^ARG\s+(\w+)=(\S+)", text, re.M):
        if re.search(r":latest$|^[^:@]+/[^:@]+$", m.group(2)) and "IMAGE" in m.group(1):
            problems.append(f"ARG {m.group(1)}={m.group(2)}: pin a tag")
    for name, lines in st:
        for ln in lines:
            if re.match(r"FROM\s+\S+:latest", ln):
                problems.append(f"{name}: {ln}: pin a tag")
            if ln.startswith("ADD ") and re.search(r"https?://", ln):
                problems.append(f"{name}: ADD from a URL")
            if ln.startswith("RUN") and "apt-get install" in ln:
                if "--no-install-recommends" not in ln:
                    problems.append(f"{name}: apt-get install without --no-install-recommends")
                if "-y" not in ln.split():
                    problems.append(f"{name}: apt-get install without -y")
                if "rm -rf /var/lib/apt/lists" not in ln:
                    problems.append(f"{name}: apt lists left in the layer")
                if "apt-get update" not in ln:
                    problems.append(f"{name}: apt-get install without update in the same RUN")
            if re.search(r"\bsudo\b", ln):
                problems.append(f"{name}: sudo")
    runtime = dict(st).get("runtime", [])
    users = [ln for ln in runtime if ln.startswith("USER ")]
    if not users or not re.match(r"USER\s+[1-9]\d*(:[1-9]\d*)?$", users[-1]):
        problems.append(f"runtime: last USER {users[-1:]} is not a numeric non-root uid")
    ep = [ln for ln in runtime if ln.startswith("ENTRYPOINT ")]
    if not ep or not ep[-1].startswith('ENTRYPOINT ["'):
        problems.append("runtime: ENTRYPOINT missing or not in exec form")
    if not any("org.opencontainers.image.version" in ln and "TESSERA_VERSION" in ln for ln in runtime):
        problems.append("runtime: no version label from TESSERA_VERSION")
    if not any(ln.startswith("ENV ") and "TESSERA_VERSION=" in ln for ln in runtime):
        problems.append("runtime: no TESSERA_VERSION env")
    if not any("tessera --version" in ln for ln in runtime):
        problems.append("runtime: the version is not checked against `tessera --version`")
    for ln in runtime:
        if ln.startswith("RUN") and re.search(r"build-essential|\bcmake\b|-dev\b|\bgcc\b|\bg\+\+", ln):
            problems.append(f"runtime: toolchain in the runtime stage: {ln[:120]}")
        if ln.startswith("COPY") and "/models" in ln:
            problems.append("runtime: a model baked in")
        if ln.startswith("COPY --from=") and not ln.startswith("COPY --from=build "):
            problems.append(f"runtime: copies from outside the build stage: {ln}")
    if not any("runtime-packages" in ln and "apt-get install" in ln for ln in runtime):
        problems.append("runtime: does not install the ldd-derived package list")
    return problems


def cuda_packages_cover(cuda_dockerfile, cuda_binary):
    """Each CUDA library the CUDA build loads comes from a package the Dockerfile's build stage
    installs, at the CUDA major version the binary was linked against."""
    text = re.sub(r"\\\n", " ", open(cuda_dockerfile).read())
    ver = re.search(r"^ARG CUDA_PKG_VERSION=(\d+)-(\d+)", text, re.M)
    assert ver, "Dockerfile.cuda has no ARG CUDA_PKG_VERSION=X-Y"
    build_lines = dict(stages(open(cuda_dockerfile).read()))["build"]
    installs = " ".join(ln for ln in build_lines if "apt-get install" in ln)
    checked = []
    for lib in ldd_libs(cuda_binary):
        base = os.path.basename(lib)
        for pattern, pkg in CUDA_LIB_PACKAGES.items():
            m = re.fullmatch(pattern, base)
            if not m:
                continue
            if m.groups():
                assert m.group(1) == ver.group(1), f"{base} is CUDA {m.group(1)}, Dockerfile.cuda installs {ver.group(0)}"
                want = f"{pkg}-dev-${{CUDA_PKG_VERSION}}"
            else:
                want = f"{pkg}-dev"
            assert want in installs, f"{base}: Dockerfile.cuda's build stage does not install {want}"
            checked.append(base)
    owned = sh([os.path.join(DOCKER, "runtime-packages.sh"), cuda_binary])
    unowned = re.findall(r"no package owns (\S+)", owned.stderr.decode())
    unknown = [u for u in unowned if os.path.basename(u) not in checked]
    assert not unknown, f"libraries neither Debian's nor known CUDA packages: {unknown}"
    return checked


# --- image build and run ------------------------------------------------------------------------

class Buildah:
    """buildah on a private store under `root`: overlay where the kernel allows it (removal in
    seconds), else vfs (full copies per layer; slower, works everywhere)."""

    def __init__(self, root):
        for driver in ("overlay", "vfs"):
            self.base = ["buildah", "--root", os.path.join(root, driver), "--runroot",
                         os.path.join(root, driver + "-run"), "--storage-driver", driver]
            probe = sh(self.base + ["from", "scratch"], timeout=120)
            if probe.returncode == 0:
                sh(self.base + ["rm", probe.stdout.decode().strip()], timeout=120)
                self.driver = driver
                return
        raise AssertionError(f"buildah cannot create a container: {probe.stderr.decode(errors='replace')[-1500:]}")

    def __call__(self, *args, timeout=600):
        p = sh(self.base + list(args), timeout=timeout)
        if p.returncode != 0:
            raise AssertionError(f"buildah {' '.join(args[:3])}...: {p.stderr.decode(errors='replace')[-2500:]}")
        return p.stdout.decode().strip()


def mirror_reachable():
    try:
        with urllib.request.urlopen(MIRROR + "/dists/bookworm/InRelease", timeout=15) as r:
            return r.status == 200
    except OSError:
        return False


def debian_base(cache):
    os.makedirs(cache, exist_ok=True)
    tar = os.path.join(cache, "debian12-minbase.tar")
    if os.path.exists(tar) and time.time() - os.path.getmtime(tar) < BASE_MAX_AGE_S:
        return tar
    tmp = tar + ".tmp"
    p = sh(["mmdebstrap", "--variant=minbase", "bookworm", tmp, MIRROR], timeout=600)
    if p.returncode != 0:
        raise AssertionError(f"mmdebstrap: {p.stderr.decode(errors='replace')[-2000:]}")
    os.replace(tmp, tar)
    return tar


def test_dockerfile(path):
    lines = open(path).read().splitlines()
    a = next(i for i, ln in enumerate(lines) if ln.startswith("FROM ") and ln.endswith(" AS build"))
    b = next(i for i, ln in enumerate(lines) if i > a and ln.startswith("FROM "))
    return "\n".join(lines[:a + 1] + ["COPY out/ /out/", ""] + lines[b:]) + "\n"


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for k in kids.get(p, []):
            out.append(k)
            todo.append(k)
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    tessera = os.path.abspath(args.tessera)
    start = time.time()
    res = Results()

    res.run("Dockerfile.cpu lint", lambda: (_ for _ in ()).throw(AssertionError(p)) if (p := lint_dockerfile(
        os.path.join(DOCKER, "Dockerfile.cpu"))) else None)
    res.run("Dockerfile.cuda lint", lambda: (_ for _ in ()).throw(AssertionError(p)) if (p := lint_dockerfile(
        os.path.join(DOCKER, "Dockerfile.cuda"))) else None)

    def lint_can_fail():
        bad = open(os.path.join(DOCKER, "Dockerfile.cpu")).read().replace("USER 10001:10001", "USER root")
        bad = bad.replace("--no-install-recommends $(cat", "$(cat")
        path = os.path.join(tempfile.gettempdir(), f"tessera-bad-dockerfile-{os.getpid()}")
        with open(path, "w") as f:
            f.write(bad)
        try:
            problems = lint_dockerfile(path)
        finally:
            os.unlink(path)
        assert any("USER" in p for p in problems) and any("recommends" in p for p in problems), problems
    res.run("lint refuses a root user and recommends", lint_can_fail)

    cuda_bin = None
    for cand in [tessera, os.environ.get("TESSERA_CUDA_BINARY", "")]:
        if cand and os.path.exists(cand) and any("libcublas" in lib for lib in ldd_libs(cand)):
            cuda_bin = cand
            break
    if cuda_bin:
        res.run(f"Dockerfile.cuda packages cover ldd of the CUDA build {cuda_bin}",
                lambda: print("  covered:", cuda_packages_cover(os.path.join(DOCKER, "Dockerfile.cuda"), cuda_bin)))
    else:
        print("NOTE no CUDA build of tessera at hand (ldd shows no libcublas): CUDA package check not run")

    # The image needs a tessera whose every library a Debian package owns: the one under test,
    # or the tessera-cpu a CUDA build makes beside it (CMakeLists.txt), or $TESSERA_CPU_BINARY.
    cands = [c for c in (os.environ.get("TESSERA_CPU_BINARY"), tessera,
                         os.path.join(os.path.dirname(tessera), "tessera-cpu")) if c and os.path.exists(c)]
    for cpu_bin in cands:
        owned = sh([os.path.join(DOCKER, "runtime-packages.sh"), cpu_bin])
        if owned.returncode == 0:
            break
    why = None
    if not shutil.which("mmdebstrap") or not shutil.which("buildah"):
        why = "mmdebstrap or buildah is not installed (Debian packages; scripts/bootstrap installs them)"
    elif os.geteuid() != 0:
        why = ("not root: mmdebstrap needs root (or unshare mode with subuid maps) and buildah's vfs store "
               "here was only tried as root")
    elif not mirror_reachable():
        why = f"the Debian mirror ({MIRROR}) does not answer: mmdebstrap and apt inside the build need it"
    elif owned.returncode != 0:
        why = (f"{cpu_bin} loads libraries no Debian package owns ({owned.stderr.decode().strip()}): it is a "
               "CUDA build, which the CPU image cannot run, and no tessera-cpu is beside it; set TESSERA_CPU_BINARY "
               "to a -DTESSERA_CUDA=OFF build")
    if why:
        print(f"SKIP image build and run: {why}")
        rc = res.summary(start)
        return rc if rc else SKIP

    work = tempfile.mkdtemp(prefix="tessera-image-")
    proc = None
    b = None
    try:
        b = Buildah(os.path.join(work, "buildah"))
        print(f"  buildah storage driver: {b.driver}")
        version = sh([cpu_bin, "--version"]).stdout.decode().strip()
        assert version.startswith("tessera "), version
        version = version.split(" ", 1)[1]
        image = "localhost/tessera:deploy-test"
        base_image = "localhost/tessera-test-debian12"

        def build():
            tar = debian_base(os.environ.get("TESSERA_IMAGE_CACHE",
                                             os.path.expanduser("~/.cache/tessera/deploy-image")))
            ctr = b("from", "scratch")
            b("add", ctr, tar, "/")
            b("commit", "-q", ctr, base_image)
            b("rm", ctr)
            ctx = os.path.join(work, "ctx")
            os.makedirs(os.path.join(ctx, "out"))
            shutil.copy2(cpu_bin, os.path.join(ctx, "out", "tessera"))
            with open(os.path.join(ctx, "out", "runtime-packages.txt"), "wb") as f:
                f.write(owned.stdout)
            with open(os.path.join(ctx, "Dockerfile"), "w") as f:
                f.write(test_dockerfile(os.path.join(DOCKER, "Dockerfile.cpu")))
            b("bud", "--isolation", "chroot", "--pull-never", "--target", "runtime", "--build-arg",
              f"DEBIAN_IMAGE={base_image}", "--build-arg", f"TESSERA_VERSION={version}", "-t", image,
              "-f", os.path.join(ctx, "Dockerfile"), ctx)
        if not res.run("buildah bud Dockerfile.cpu runtime stage on an mmdebstrap Debian 12", build):
            return res.summary(start)

        def image_config():
            cfg = json.loads(b("inspect", "--type", "image", image))["OCIv1"]["config"]
            assert cfg["User"] == "10001:10001", cfg["User"]
            assert cfg["Labels"]["org.opencontainers.image.version"] == version, cfg["Labels"]
            assert f"TESSERA_VERSION={version}" in cfg["Env"], cfg["Env"]
            assert cfg["Entrypoint"] == ["/usr/local/bin/tessera"], cfg["Entrypoint"]
            assert "8000/tcp" in cfg["ExposedPorts"] and "50051/tcp" in cfg["ExposedPorts"], cfg["ExposedPorts"]
            listing = b("run", "--isolation", "chroot", b("from", "--pull-never", image), "--",
                        "/usr/local/bin/tessera", "--version")
            assert listing == f"tessera {version}", listing
        res.run("image: uid 10001, version label and env == tessera --version, exec entrypoint", image_config)

        model = synth_model(tessera, work)
        cfg_dir = os.path.join(work, "etc-tessera")
        os.makedirs(cfg_dir)
        shutil.copy2(os.path.join(REPO, "deploy/k8s/config/serve.toml"), cfg_dir)
        port = free_port()
        ctr = b("from", "--pull-never", image)
        log = open(os.path.join(work, "serve.log"), "wb")
        proc = subprocess.Popen(b.base + [
            "run", "--isolation", "chroot", "--user", "10001:10001",
            "-v", f"{model}:/models/model:ro", "-v", f"{cfg_dir}:/etc/tessera:ro", ctr, "--",
            "/usr/local/bin/tessera", "serve", "--config", "/etc/tessera/serve.toml", "--host", "127.0.0.1",
            "--port", str(port), "--grpc-port", "-1", "--kv-cache-mb", "64", "--threads", "1"],
            stdout=log, stderr=subprocess.STDOUT)

        def log_tail():
            log.flush()
            return open(log.name, "rb").read().decode(errors="replace")[-2000:]

        def ready():
            deadline = time.time() + 90
            while time.time() < deadline:
                assert proc.poll() is None, f"buildah run exited {proc.returncode}: {log_tail()}"
                try:
                    status, _, body = request(port, "GET", "/ready", timeout=5)
                    if status == 200:
                        assert body == {"status": "ready"}, body
                        return
                except OSError:
                    pass
                time.sleep(0.1)
            raise AssertionError(f"not ready in 90 s: {log_tail()}")
        print(f"  image built around {cpu_bin}")
        if not res.run("the image's tessera serves on loopback: /ready", ready):
            return res.summary(start)

        def completion():
            status, _, body = request(port, "POST", "/v1/completions",
                                      {"model": "model", "prompt": "Hello", "max_tokens": 4, "temperature": 0})
            assert status == 200 and body["choices"][0]["finish_reason"] == "length", (status, body)
        res.run("a completion from inside the image", completion)

        def sigterm_drains():
            servers = [p for p in descendants(proc.pid) if cmdline(p)[:1] == [b"/usr/local/bin/tessera"]]
            assert len(servers) == 1, f"tessera processes under buildah run: {servers}"
            events, done, status = [], [], []

            def stream():
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/v1/completions", body=json.dumps(
                    {"model": "model", "prompt": "Hello", "max_tokens": 1000, "ignore_eos": True, "stream": True}),
                    headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                status.append(resp.status)
                for line in resp:
                    line = line.decode().strip()
                    if line == "data: [DONE]":
                        done.append(True)
                        break
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
            t = threading.Thread(target=stream)
            t.start()
            deadline = time.time() + 30
            while len(events) < 3 and time.time() < deadline and t.is_alive():
                time.sleep(0.02)
            assert len(events) >= 3, f"stream did not start: {status} {log_tail()}"
            os.kill(servers[0], signal.SIGTERM)  # what the kubelet's runtime sends the container
            for _ in range(100):  # the signal is handled asynchronously: bounded, 2 s
                st, _, body = request(port, "GET", "/ready", timeout=5)
                if st == 503 or not t.is_alive():
                    break
                time.sleep(0.02)
            assert st == 503, f"/ready during the drain: {st} {body}"
            t.join(timeout=60)
            assert done, f"the in-flight stream did not end with [DONE]: {len(events)} events"
            finish = [c.get("finish_reason") for e in events for c in e.get("choices", []) if c.get("finish_reason")]
            assert finish in (["length"], ["abort"]), finish
            rc = proc.wait(timeout=60)
            assert rc == 0, f"buildah run exited {rc}: {log_tail()}"
            assert b"draining" in open(log.name, "rb").read(), log_tail()
        res.run("SIGTERM drains: /ready 503, the stream finishes, exit 0", sigterm_drains)
    finally:
        if proc is not None and proc.poll() is None:
            for p in descendants(proc.pid):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            proc.kill()
            proc.wait(timeout=30)
        if b is not None:
            sh(b.base + ["rm", "--all"], timeout=300)
            sh(b.base + ["rmi", "--all", "--force"], timeout=300)
            if b.driver == "overlay":  # unmount what the store still holds before removing it
                sh(["umount", "-R", os.path.join(work, "buildah", "overlay", "overlay")], timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    return res.summary(start)


if __name__ == "__main__":
    sys.exit(main())
