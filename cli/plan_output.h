// What `tessera plan` writes for its chosen plan (docs/architecture.md,
// "Twin"): a serve.toml (`tessera serve --config` reads it) and a kustomize
// overlay over one of deploy/k8s's overlays that mounts it and sets the
// instance count and devices per pod.
#pragma once

#include <string>

#include "common/status.h"
#include "runtime/sim/plan.h"

namespace tessera {

// `base_toml` (deploy/k8s/config/serve.toml's text; "" for none) with the
// plan's settings — max-num-seqs, max-num-batched-tokens, max-step-ms,
// tensor-parallel-size, and the max-pending-requests the plan was simulated
// with — set: a line assigning one of them is replaced, the others appended;
// every other line is kept. `header` becomes leading comment lines.
std::string PlannedServeToml(const std::string& base_toml, const sim::PlanCandidate& plan,
                             int64_t max_pending_requests, const std::string& header);

struct OverlayOptions {
  // The overlay it builds on (deploy/k8s/overlays/gpu, cpu or disaggregated), as a path
  // relative to the generated overlay's directory.
  std::string base_relative;
  bool gpus = true;  // set nvidia.com/gpu = the TP degree per pod
  std::string header;
};

// Writes kustomization.yaml, plan.yaml (replicas and devices of the
// Deployment `tessera`, or of a PD plan's `tessera-prefill` and
// `tessera-decode`, overlays/disaggregated's pools) and serve.toml (replacing
// the ConfigMap tessera-config) into `dir`, created if missing.
Status WriteKustomizeOverlay(const std::string& dir, const sim::PlanCandidate& plan, const std::string& serve_toml,
                             const OverlayOptions& options);

// `text` to `path`; UNAVAILABLE naming it when it cannot be written.
Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace tessera
