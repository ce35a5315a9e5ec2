// `tessera logits`: runs one batch of token sequences through the engine and
// writes the logits asked for as .npy (for the oracle tests).
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/batch_builder.h"
#include "engine/model.h"
#include "runtime/backend_registry.h"

namespace tessera {
namespace {

using json = nlohmann::json;

// Writes a little-endian f32 .npy (format 1.0) of shape [rows, cols].
Status WriteNpy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  const char magic[] = "\x93NUMPY\x01\x00";
  out.write(magic, 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  if (!out) return Internal(path + ": cannot write");
  return Status::Ok();
}

struct LogitsRequest {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<int32_t>> logits_at;
  int64_t chunk_size = 0;
};

StatusOr<LogitsRequest> ParseLogitsRequest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not a JSON object");
  LogitsRequest r;
  auto seqs = j.find("sequences");
  if (seqs == j.end() || !seqs->is_array() || seqs->empty()) {
    return InvalidArgument(path + ": field 'sequences' must be a non-empty list");
  }
  auto int_list = [&](const json& v, const std::string& field, std::vector<int32_t>* out) -> Status {
    if (!v.is_array()) return InvalidArgument(path + ": field '" + field + "' must be a list of integers");
    for (const auto& x : v) {
      if (!x.is_number_integer()) return InvalidArgument(path + ": field '" + field + "' must be a list of integers");
      out->push_back(x.get<int32_t>());
    }
    return Status::Ok();
  };
  for (size_t i = 0; i < seqs->size(); ++i) {
    const json& s = (*seqs)[i];
    const std::string where = "sequences[" + std::to_string(i) + "]";
    if (!s.is_object() || !s.contains("tokens")) return InvalidArgument(path + ": " + where + " needs 'tokens'");
    r.tokens.emplace_back();
    r.logits_at.emplace_back();
    RETURN_IF_ERROR(int_list(s["tokens"], where + ".tokens", &r.tokens.back()));
    if (r.tokens.back().empty()) return InvalidArgument(path + ": " + where + ".tokens is empty");
    if (s.contains("logits_at")) RETURN_IF_ERROR(int_list(s["logits_at"], where + ".logits_at", &r.logits_at.back()));
    for (int32_t p : r.logits_at.back()) {
      if (p < 0 || p >= static_cast<int32_t>(r.tokens.back().size())) {
        return InvalidArgument(path + ": " + where + ".logits_at has " + std::to_string(p) + ", out of range");
      }
    }
  }
  if (j.contains("chunk_size")) {
    if (!j["chunk_size"].is_number_integer() || j["chunk_size"].get<int64_t>() < 1) {
      return InvalidArgument(path + ": field 'chunk_size' must be a positive integer");
    }
    r.chunk_size = j["chunk_size"].get<int64_t>();
  }
  return r;
}

// Runs all sequences together, chunk_size tokens per sequence per step, and
// collects logits in sequence order then logits_at order.
Status RunLogits(const std::string& model_dir, const std::string& batch_path, const std::string& out_path,
                 int threads, const std::string& device, bool deterministic, int64_t max_model_len) {
  ASSIGN_OR_RETURN(LogitsRequest req, ParseLogitsRequest(batch_path));
  CudaBackendOptions cuda;
  cuda.deterministic = deterministic;
  cuda.cuda_graphs = false;  // prefill only
  ASSIGN_OR_RETURN(auto backend, MakeBackend(device, threads, cuda));
  ASSIGN_OR_RETURN(auto model, Model::Load(model_dir, backend.get()));
  // As serve does once per deployment (LongRoPE picks its factor set from it).
  RETURN_IF_ERROR(model->SetMaxModelLen(max_model_len > 0 ? max_model_len : model->config().max_position_embeddings));
  const int64_t vocab = model->config().vocab_size;
  const int64_t block_size = 16;
  int64_t blocks = 0;
  for (const auto& t : req.tokens) blocks += (static_cast<int64_t>(t.size()) + block_size - 1) / block_size;
  ASSIGN_OR_RETURN(auto cache, model->CreateKvCache(blocks, block_size));
  BatchBuilder builder(blocks, block_size);
  const size_t n = req.tokens.size();
  std::vector<int> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = builder.AddSequence();
  // Per sequence, the logits rows in the order the request lists them.
  std::vector<std::vector<std::vector<float>>> rows(n);
  for (size_t i = 0; i < n; ++i) rows[i].resize(req.logits_at[i].size());
  std::vector<size_t> done(n, 0);
  for (;;) {
    std::vector<BatchBuilder::Chunk> chunks;
    std::vector<std::vector<int>> which;  // per chunk: request rows its logits fill
    for (size_t i = 0; i < n; ++i) {
      const size_t len = req.tokens[i].size();
      if (done[i] == len) continue;
      const size_t take = req.chunk_size > 0 ? std::min<size_t>(len - done[i], req.chunk_size) : len - done[i];
      BatchBuilder::Chunk c;
      c.seq = ids[i];
      c.tokens.assign(req.tokens[i].begin() + done[i], req.tokens[i].begin() + done[i] + take);
      which.emplace_back();
      for (size_t r = 0; r < req.logits_at[i].size(); ++r) {
        const size_t p = req.logits_at[i][r];
        if (p >= done[i] && p < done[i] + take) {
          c.logits_at.push_back(static_cast<int32_t>(p - done[i]));
          which.back().push_back(static_cast<int>(i * 1000000 + r));
        }
      }
      done[i] += take;
      chunks.push_back(std::move(c));
    }
    if (chunks.empty()) break;
    ASSIGN_OR_RETURN(ForwardBatch batch, builder.Build(chunks));
    std::vector<float> logits;
    RETURN_IF_ERROR(model->Forward(batch, cache.get(), &logits));
    size_t row = 0;
    for (const auto& w : which) {
      for (int key : w) {
        rows[key / 1000000][key % 1000000].assign(logits.begin() + row * vocab, logits.begin() + (row + 1) * vocab);
        ++row;
      }
    }
  }
  std::vector<float> flat;
  int64_t total_rows = 0;
  for (const auto& seq_rows : rows) {
    for (const auto& r : seq_rows) {
      flat.insert(flat.end(), r.begin(), r.end());
      ++total_rows;
    }
  }
  return WriteNpy(out_path, flat, total_rows, vocab);
}

}  // namespace

void AddLogitsCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("logits", "Run a batch of token sequences and write logits as .npy");
  auto model = std::make_shared<std::string>();
  auto batch = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(0);
  cmd->add_option("--model", *model, "HF checkpoint directory or .gguf file")->required();
  cmd->add_option("--batch", *batch, "JSON: {\"sequences\":[{\"tokens\":[..],\"logits_at\":[..]}],\"chunk_size\":N}")
      ->required();
  cmd->add_option("--out", *out, "output .npy path")->required();
  cmd->add_option("--threads", *threads, "CPU threads (0 = all)")->capture_default_str();
  auto device = std::make_shared<std::string>("cpu");
  auto deterministic = std::make_shared<bool>(false);
  cmd->add_option("--device", *device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--deterministic", *deterministic, "CUDA: batch-invariant kernels");
  auto max_model_len = std::make_shared<int64_t>(0);
  cmd->add_option("--max-model-len", *max_model_len,
                  "the deployment's max model length (LongRoPE: long factors above the original context; "
                  "0 = max_position_embeddings)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([=] {
    Status s = RunLogits(*model, *batch, *out, *threads, *device, *deterministic, *max_model_len);
    if (!s.ok()) *exit_code = Fail(s);
  });
}

}  // namespace tessera
