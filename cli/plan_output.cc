#include "cli/plan_output.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

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
  // One Deployment (unified) or the disaggregated overlay's two pools.
  std::vector<std::pair<std::string, int>> pools = {{"tessera", plan.data_parallel_size}};
  if (plan.prefill_instances > 0) {
    pools = {{"tessera-prefill", plan.prefill_instances},
             {"tessera-decode", plan.data_parallel_size - plan.prefill_instances}};
  }
  std::string patch = fmt::format("# {} instances (pods) of tensor parallel degree {}{}.\n", plan.data_parallel_size,
                                  plan.tensor_parallel_size,
                                  plan.prefill_instances > 0 ? ", prefill and decode pools behind the router"
                                                             : "; the Service spreads requests over them");
  for (const auto& [name, replicas] : pools) {
    if (name != pools.front().first) patch += "---\n";
    patch += fmt::format(
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata:\n"
        "  name: {}\n"
        "spec:\n"
        "  replicas: {}\n",
        name, replicas);
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
  }
  RETURN_IF_ERROR(WriteTextFile(dir + "/kustomization.yaml", kustomization));
  RETURN_IF_ERROR(WriteTextFile(dir + "/plan.yaml", patch));
  return WriteTextFile(dir + "/serve.toml", serve_toml);
}

}  // namespace tessera
