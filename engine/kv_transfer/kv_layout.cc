#include "engine/kv_transfer/kv_layout.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace tessera {

namespace fs = std::filesystem;

KvLayout MakeKvLayout(const ModelConfig& config, DType dtype, int32_t block_size) {
  KvLayout l;
  l.block_size = block_size;
  l.dtype = dtype;
  l.num_layers = static_cast<int32_t>(config.num_layers);
  l.num_kv_heads = static_cast<int32_t>(config.num_kv_heads);
  l.head_dim = static_cast<int32_t>(config.head_dim);
  return l;
}

std::string DescribeKvLayout(const KvLayout& l) {
  return "block_size " + std::to_string(l.block_size) + ", dtype " + std::string(DTypeName(l.dtype)) +
         ", layers " + std::to_string(l.num_layers) + ", kv heads " + std::to_string(l.num_kv_heads) +
         ", head dim " + std::to_string(l.head_dim);
}

Status CheckKvLayout(const KvLayout& local, const KvLayout& remote) {
  std::string diff;
  auto field = [&](const char* name, const std::string& a, const std::string& b) {
    if (a == b) return;
    diff += std::string(diff.empty() ? "" : "; ") + name + " " + a + " at the exporting instance vs " + b +
            " at the pulling one";
  };
  field("block_size", std::to_string(local.block_size), std::to_string(remote.block_size));
  field("dtype", std::string(DTypeName(local.dtype)), std::string(DTypeName(remote.dtype)));
  field("num_layers", std::to_string(local.num_layers), std::to_string(remote.num_layers));
  field("num_kv_heads", std::to_string(local.num_kv_heads), std::to_string(remote.num_kv_heads));
  field("head_dim", std::to_string(local.head_dim), std::to_string(remote.head_dim));
  if (diff.empty()) return Status::Ok();
  return FailedPrecondition("kv transfer: KV layouts differ (" + diff + "); both instances need the same "
                            "model, --block-size and KV dtype");
}

uint64_t KvChecksum(const void* data, uint64_t bytes, uint64_t seed) {
  uint64_t h = seed == 0 ? 0xcbf29ce484222325ULL : seed;
  const auto* p = static_cast<const uint8_t*>(data);
  // Eight bytes per round keeps this near memory speed; FNV's prime mixes.
  uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

namespace {

Status HashFileSample(const fs::path& path, uint64_t* h) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("model fingerprint: cannot read " + path.string());
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return NotFound("model fingerprint: cannot stat " + path.string());
  *h = KvChecksum(&size, sizeof(size), *h);
  constexpr uint64_t kSample = 1 << 20;
  std::vector<char> buf(kSample);
  for (uint64_t off : {uint64_t{0}, size > kSample ? size - kSample : uint64_t{0}}) {
    in.clear();
    in.seekg(static_cast<std::streamoff>(off));
    in.read(buf.data(), static_cast<std::streamsize>(std::min(kSample, size)));
    *h = KvChecksum(buf.data(), static_cast<uint64_t>(in.gcount()), *h);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> ModelFingerprint(const std::string& model_path) {
  uint64_t h = 0;
  std::vector<fs::path> files;
  if (fs::is_regular_file(model_path)) {
    files.push_back(model_path);
  } else {
    for (const auto& e : fs::directory_iterator(model_path)) {
      const std::string name = e.path().filename().string();
      const std::string ext = e.path().extension().string();
      if (name == "config.json" || ext == ".safetensors" || ext == ".gguf") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return NotFound("model fingerprint: no config.json or weights in " + model_path);
  for (const fs::path& f : files) RETURN_IF_ERROR(HashFileSample(f, &h));
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return std::string(hex);
}

}  // namespace tessera
