#include "cli/plan_output.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

namespace tessera {
namespace {

// The key a TOML line assigns ("" for comments, blanks, tables).
std::string AssignedKey(const std::string& line) {
  const size_t start = line.find_first_not_of(" \t");
  if (start == std::string::npos || line[start] == '#' || line[start] == '[') return "";
  const size_t eq = line.find('=', start);
  if (eq == std::string::npos) return "";
  const size_t end = line.find_last_not_of(" \t", eq - 1);
  return end == std::string::npos || end < start ? "" : line.substr(start, end - start + 1);
}

std::string Comment(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += "# " + line + "\n";
  return out;
}

}  // namespace

std::string PlannedServeToml(const std::string& base_toml, const sim::PlanCandidate& plan,
                             int64_t max_pending_requests, const std::string& header) {
  // Values as TOML: integers, and the step bound as a float.
  std::vector<std::pair<std::string, std::string>> values = {
      {"max-num-seqs", std::to_string(plan.max_num_seqs)},
      {"max-num-batched-tokens", std::to_string(plan.max_num_batched_tokens)},
      {"max-step-ms", fmt::format("{:.1f}", plan.max_step_ms)},
      {"tensor-parallel-size", std::to_string(plan.tensor_parallel_size)},
      {"max-pending-requests", std::to_string(max_pending_requests)},
  };
  std::map<std::string, bool> written;
  std::string out = Comment(header);
  std::istringstream in(base_toml);
  for (std::string line; std::getline(in, line);) {
    const std::string key = AssignedKey(line);
    bool replaced = false;
    for (const auto& [k, v] : values) {
      if (key == k) {
        out += k + " = " + v + "  # planned\n";
        written[k] = replaced = true;
      }
    }
    if (!replaced) out += line + "\n";
  }
  for (const auto& [k, v] : values) {
    if (!written[k]) out += k + " = " + v + "  # planned\n";
  }
  return out;
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) return Status(StatusCode::kUnavailable, "cannot write " + path);
  return Status::Ok();
}

Status WriteKustomizeOverlay(const std::string& dir, const sim::PlanCandidate& plan, const std::string& serve_toml,
                             const OverlayOptions& o) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kUnavailable, "cannot create " + dir + ": " + ec.message());
  // kustomize v2.0.3 syntax (bases, patchesStrategicMerge), as deploy/k8s/base.
  const std::string kustomization = Comment(o.header) + fmt::format(
      "bases:\n"
      "  - {}\n"
      "configMapGenerator:\n"
      "  - name: tessera-config                   # the planned settings replace the base's serve.toml\n"
      "    behavior: replace\n"
      "    files:\n"
      "      - serve.toml\n"
      "patchesStrategicMerge:\n"
      "  - plan.yaml\n",
      o.base_relative);
  std::string patch = fmt::format(
      "# {} instances (pods) of tensor parallel degree {}; the Service spreads requests over them.\n"
      "apiVersion: apps/v1\n"
      "kind: Deployment\n"
      "metadata:\n"
      "  name: tessera\n"
      "spec:\n"
      "  replicas: {}\n",
      plan.data_parallel_size, plan.tensor_parallel_size, plan.data_parallel_size);
  if (o.gpus) {
    patch += fmt::format(
        "  template:\n"
        "    spec:\n"
        "      containers:\n"
        "        - name: tessera\n"
        "          resources:\n"
        "            requests:\n"
        "              nvidia.com/gpu: {0}\n"
        "            limits:\n"
        "              nvidia.com/gpu: {0}\n",
        plan.tensor_parallel_size);
  }
  RETURN_IF_ERROR(WriteTextFile(dir + "/kustomization.yaml", kustomization));
  RETURN_IF_ERROR(WriteTextFile(dir + "/plan.yaml", patch));
  return WriteTextFile(dir + "/serve.toml", serve_toml);
}

}  // namespace tessera
