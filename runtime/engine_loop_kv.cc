// The engine loop's side of the KV connectors (docs/architecture.md, "KV
// connectors"): builds them from the options, runs each connector's worker
// before and after every step, and stops them. What moves is decided by the
// Scheduler (scheduler/kv_connector.h); the bytes move in the connectors
// (runtime/kv_connectors/). Only memory copies of whole blocks run on the loop
// thread; network, disk and Redis I/O run on the connectors' threads.

#include "engine/kv_transfer/kv_layout.h"
#include "common/log.h"
#include "engine/rope.h"
#include "runtime/engine_loop.h"

namespace tessera {
namespace {

// The checkpoint's fingerprint, plus which LongRoPE factor set this deployment
// rotates K with (chosen from its max model length, engine/rope.h): KV moves only
// between instances whose keys agree, so a short-set block never lands in a
// long-set pool.
StatusOr<std::string> KvModelKey(const std::string& model_dir, const ModelConfig& mc, int64_t max_model_len) {
  ASSIGN_OR_RETURN(std::string key, ModelFingerprint(model_dir));
  if (mc.rope_scaling.type == RopeScalingType::kLongRope) {
    key += UseLongRopeFactors(mc, max_model_len) ? "+longrope-long" : "+longrope-short";
  }
  return key;
}

}  // namespace

Status EngineLoop::InitKvConnectors(EngineLoopOptions& options, SchedulerOptions& so) {
  auto notify = [this] {
    {
      std::lock_guard lock(mu_);
      kv_wake_ = true;
    }
    cv_.notify_all();
  };
  const ModelConfig& mc = model_->config();
  if (options.kv_tiers) {
    if (group_) {
      return FailedPrecondition("--kv-offload-*: KV tiers need a single rank (--tensor-parallel-size / "
                                "--data-parallel-size 1): each rank holds a slice of every block");
    }
    if (!so.kv.enable_prefix_caching) return FailedPrecondition("--kv-offload-*: KV tiers need prefix caching");
    KvTierOptions to = std::move(*options.kv_tiers);
    ASSIGN_OR_RETURN(to.model_fingerprint, KvModelKey(options.model_dir, mc, so.limits.max_model_len));
    to.layout = DescribeKvLayout(MakeKvLayout(mc, backend_->kv_dtype(), so.kv.block_size));
    // MLA blocks hold latent rows: the plane layout keeps them apart from any MHA record.
    if (mc.attention != AttentionKind::kMha) to.layout += "; " + cache_->layout().Describe();
    to.block_bytes = cache_->BlockBytes();
    to.notify = notify;
    ASSIGN_OR_RETURN(tiers_, TierConnector::Create(std::move(to)));
    std::string names;
    for (const std::string& n : tiers_->tiers().tier_names()) names += (names.empty() ? "" : ", ") + n;
    LogInfo("kv tiers: {} (blocks of {} KiB; computed blocks are written through, prompt prefixes "
            "missing from the pool are fetched back before their prefill)",
            names, cache_->BlockBytes() / 1024);
  }
  if (options.kv_transfer) {
    if (options.device != "cpu") {
      return FailedPrecondition("kv transfer (--role prefill|decode) needs --device cpu for now: the CUDA KV "
                                "pool is not registered with UCX");
    }
    if (mc.attention != AttentionKind::kMha) {
      // The transport registers and checks K and V regions per layer (engine/kv_transfer).
      return Unimplemented("kv transfer (--role prefill|decode) does not carry multi-head latent attention "
                           "caches yet (" + mc.architecture + "): serve it without --role");
    }
    ASSIGN_OR_RETURN(std::string fingerprint, KvModelKey(options.model_dir, mc, so.limits.max_model_len));
    KvTransportOptions to = *options.kv_transfer;
    to.notify = notify;
    ASSIGN_OR_RETURN(std::unique_ptr<KvTransport> transport,
                     KvTransport::Create(to, cache_.get(), MakeKvLayout(mc, backend_->kv_dtype(), so.kv.block_size),
                                         std::move(fingerprint)));
    transfer_ = std::make_unique<TransferConnector>(std::move(transport), std::move(options.on_kv_pull), notify);
  }
  // Pulls are planned before tier lookups, as a request has at most one source.
  if (transfer_) {
    so.kv_connectors.push_back(transfer_.get());
    kv_workers_.push_back(transfer_.get());
  }
  if (tiers_) {
    so.kv_connectors.push_back(tiers_.get());
    kv_workers_.push_back(tiers_.get());
    so.retention_demoter = tiers_.get();  // retained blocks the pool needs go to the host/disk tier, pinned
  }
  return Status::Ok();
}

void EngineLoop::RunKvConnectors() {
  if (kv_workers_.empty()) return;
  {
    // Cleared before taking the answers: one arriving after this wakes the loop again.
    std::lock_guard lock(mu_);
    kv_wake_ = false;
  }
  for (KvConnectorWorker* w : kv_workers_) w->BeforeStep(*scheduler_, *cache_);
}

void EngineLoop::SaveKvBlocks() {
  for (KvConnectorWorker* w : kv_workers_) w->AfterStep(*cache_);
}

bool EngineLoop::KvLoadsInFlight() const {
  for (const KvConnectorWorker* w : kv_workers_) {
    if (w->LoadsInFlight()) return true;
  }
  return false;
}

void EngineLoop::StopKvConnectors() {
  for (KvConnectorWorker* w : kv_workers_) w->Stop(*scheduler_);
}

}  // namespace tessera
