#!/bin/sh
# Builds the CPU or CUDA image from the repository root with docker, podman or buildah, with the
# version the binary will report (CMakeLists.txt's project VERSION; the build checks it).
# Usage: deploy/docker/build.sh cpu|cuda [TAG]     (TAG default: tessera:<flavour>)
set -eu
cd "$(dirname "$0")/../.."
flavour=${1:?usage: build.sh cpu|cuda [TAG]}
tag=${2:-tessera:$flavour}
version=$(sed -n 's/^project(tessera .*VERSION \([0-9.]*\)).*/\1/p' CMakeLists.txt)
for tool in docker podman buildah; do
  if command -v "$tool" >/dev/null; then
    [ "$tool" = buildah ] && sub="bud" || sub="build"
    exec "$tool" "$sub" -f "deploy/docker/Dockerfile.$flavour" --target runtime \
      --build-arg "TESSERA_VERSION=$version" -t "$tag" .
  fi
done
echo "build.sh: need docker, podman or buildah" >&2
exit 1
