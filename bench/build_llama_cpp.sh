#!/usr/bin/env bash
# Builds llama.cpp (the reference peer for side-by-side benchmarks) from the source bundle shipped in
# the npm package node-llama-cpp, without network access beyond the npm registry.
# Usage: bench/build_llama_cpp.sh [DIR]   (default DIR: ~/.cache/tessera/llama.cpp)
# Result: DIR/build/bin/{llama-bench,llama-batched-bench,llama-server,llama-quantize}, and llama.cpp's Python
# GGUF package (NumPy reader/writer and dequantization of every type) at DIR/src/gguf-py (PYTHONPATH=DIR/src/gguf-py).
# Notes: GGML_NATIVE is off on purpose: on some VMs the native build enables AMX code paths that crash or
# crawl (seen: pp512 segfault, 0.6 tok/s decode). llama.cpp's worker threads spin-wait, so its figures
# collapse when anything else uses the CPU: benchmark both engines on a quiet machine, alternating.
set -euo pipefail
DIR=${1:-$HOME/.cache/tessera/llama.cpp}
VER=3.22.1
mkdir -p "$DIR"; cd "$DIR"
if [ ! -d src ]; then
  [ -f package.json ] || npm init -y >/dev/null
  npm install --ignore-scripts --no-audit --no-fund "node-llama-cpp@$VER" >/dev/null
  git clone -q node_modules/node-llama-cpp/llama/gitRelease.bundle src
fi
flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
if grep -qw avx512f /proc/cpuinfo; then flags+=(-DGGML_AVX512=ON); fi
if grep -qw avx512_vnni /proc/cpuinfo; then flags+=(-DGGML_AVX512_VNNI=ON); fi
if grep -qw avx512_bf16 /proc/cpuinfo; then flags+=(-DGGML_AVX512_BF16=ON); fi
if grep -qw avx_vnni /proc/cpuinfo; then flags+=(-DGGML_AVX_VNNI=ON); fi
cmake -S src -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF "${flags[@]}" >/dev/null
cmake --build build -j"$(nproc)" --target llama-bench llama-batched-bench llama-server llama-quantize
echo "llama.cpp $(git -C src log -1 --format=%h) built in $DIR/build/bin"
