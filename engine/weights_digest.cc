#include "engine/weights_digest.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "engine/safetensors.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
constexpr int kCacheVersion = 1;

// One tensor as the digest frames it.
struct Entry {
  std::string name;
  std::string dtype;  // as stored: safetensors' dtype name, GGUF's "ggml:<type id>"
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};

void PutU64(Sha256& h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h.Update(b, 8);
}

void PutStr(Sha256& h, const std::string& s) {
  PutU64(h, s.size());
  h.Update(s);
}

Sha256Digest DigestEntries(std::vector<Entry>& entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  Sha256 h;
  h.Update("tessera-weights-v1");
  PutU64(h, entries.size());
  for (const Entry& e : entries) {
    PutStr(h, e.name);
    PutStr(h, e.dtype);
    PutU64(h, e.shape.size());
    for (int64_t d : e.shape) PutU64(h, static_cast<uint64_t>(d));
    PutU64(h, e.bytes);
    h.Update(e.data, e.bytes);
  }
  return h.Finish();
}

// The files whose bytes the digest reads, sorted, with size and mtime: the cache key.
StatusOr<nlohmann::json> FileKey(const std::vector<std::string>& paths) {
  std::vector<std::string> sorted = paths;
  std::sort(sorted.begin(), sorted.end());
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& p : sorted) {
    struct stat st{};
    if (::stat(p.c_str(), &st) != 0) return NotFound("weights digest: cannot stat " + p);
    const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    files.push_back({{"name", fs::path(p).filename().string()}, {"size", st.st_size}, {"mtime_ns", mtime_ns}});
  }
  return files;
}

std::string ReadCache(const std::string& path, const nlohmann::json& key) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("version", 0) != kCacheVersion || j.value("files", nlohmann::json()) != key) return "";
  const std::string hex = j.value("sha256", std::string());
  return hex.size() == 64 ? hex : "";
}

// Writes through a temporary and a rename, so a reader never sees half a file.
bool WriteCache(const std::string& path, const nlohmann::json& key, const std::string& hex) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) return false;
    out << nlohmann::json{{"version", kCacheVersion}, {"files", key}, {"sha256", hex}}.dump(1) << "\n";
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (!ec) return true;
  fs::remove(tmp, ec);
  return false;
}

Status Hex32(const std::string& hex, Sha256Digest* out) {
  for (size_t i = 0; i < out->size(); ++i) {
    unsigned v = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return InvalidArgument("bad hex digest");
    (*out)[i] = static_cast<uint8_t>(v);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<WeightsDigestResult> ComputeWeightsDigest(const std::string& model_path,
                                                   const WeightsDigestOptions& options) {
  ASSIGN_OR_RETURN(std::string gguf, ResolveGgufPath(model_path));
  std::vector<std::string> files;
  std::string beside;  // the cache file beside the checkpoint
  std::string cache_name;
  if (!gguf.empty()) {
    files.push_back(gguf);
    beside = gguf + ".tessera-weights.sha256.json";
    cache_name = fs::path(gguf).filename().string() + ".tessera-weights.sha256.json";
  } else {
    for (const auto& e : fs::directory_iterator(model_path)) {
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    }
    beside = (fs::path(model_path) / ".tessera-weights.sha256.json").string();
    cache_name = fs::absolute(model_path).lexically_normal().filename().string() + ".tessera-weights.sha256.json";
  }
  ASSIGN_OR_RETURN(nlohmann::json key, FileKey(files));
  key.push_back({{"path", fs::absolute(model_path).lexically_normal().string()}});
  std::vector<std::string> places = {beside};
  if (!options.fallback_cache_dir.empty()) places.push_back((fs::path(options.fallback_cache_dir) / cache_name).string());

  WeightsDigestResult result;
  if (options.use_cache) {
    for (const std::string& p : places) {
      const std::string hex = ReadCache(p, key);
      if (hex.empty()) continue;
      RETURN_IF_ERROR(Hex32(hex, &result.digest));
      result.from_cache = true;
      result.cache_path = p;
      return result;
    }
  }
  std::vector<Entry> entries;
  if (!gguf.empty()) {
    ASSIGN_OR_RETURN(auto file, GgufFile::Open(gguf));
    for (const GgufTensor& t : file->contents().tensors) {
      entries.push_back({t.name, "ggml:" + std::to_string(t.ggml_type), t.shape(), t.data, t.nbytes});
    }
    result.digest = DigestEntries(entries);
  } else {
    ASSIGN_OR_RETURN(auto store, WeightStore::Open(model_path));
    for (const auto& f : store->files()) {
      for (const SafetensorsTensor& t : f->tensors()) entries.push_back({t.name, t.dtype_name, t.shape, t.data, t.nbytes()});
    }
    result.digest = DigestEntries(entries);
  }
  if (options.use_cache) {
    for (const std::string& p : places) {
      std::error_code ec;
      fs::create_directories(fs::path(p).parent_path(), ec);
      if (WriteCache(p, key, ToHex(result.digest))) {
        result.cache_path = p;
        break;
      }
    }
  }
  return result;
}

}  // namespace tessera
