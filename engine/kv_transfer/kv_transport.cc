#include "engine/kv_transfer/kv_transport.h"
#include "common/log.h"

#include <condition_variable>
#include <cstring>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "engine/kv_transfer/ucx_agent.h"
#include "proto/kv.grpc.pb.h"

namespace tessera {

namespace pb = ::tessera::kv::v1;

namespace {

void ToProto(const KvLayout& l, pb::KvLayout* p) {
  p->set_block_size(l.block_size);
  p->set_dtype(std::string(DTypeName(l.dtype)));
  p->set_num_layers(l.num_layers);
  p->set_num_kv_heads(l.num_kv_heads);
  p->set_head_dim(l.head_dim);
}

Status CheckProtoLayout(const KvLayout& local, const pb::KvLayout& p) {
  // The dtype travels by name; compare names so an unknown one is reported as it came.
  if (p.dtype() != DTypeName(local.dtype)) {
    return FailedPrecondition("kv transfer: KV layouts differ (dtype " + std::string(DTypeName(local.dtype)) +
                              " at the exporting instance vs " + p.dtype() + " at the pulling one); both instances need the same model, "
                              "--block-size and KV dtype");
  }
  KvLayout remote = local;
  remote.block_size = p.block_size();
  remote.num_layers = p.num_layers();
  remote.num_kv_heads = p.num_kv_heads();
  remote.head_dim = p.head_dim();
  return CheckKvLayout(local, remote);
}

grpc::Status ToGrpc(const Status& s) {
  grpc::StatusCode c = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case StatusCode::kInvalidArgument: c = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: c = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kFailedPrecondition: c = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kOutOfRange: c = grpc::StatusCode::OUT_OF_RANGE; break;
    default: break;
  }
  return grpc::Status(c, s.message());
}

Status FromGrpc(const grpc::Status& s, const std::string& peer) {
  std::string detail = s.error_message();
  if (detail.rfind("kv transfer: ", 0) == 0) detail = detail.substr(13);
  const std::string m = "kv transfer: refused by " + peer + ": " + detail;
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT: return InvalidArgument(m);
    case grpc::StatusCode::NOT_FOUND: return NotFound(m);
    case grpc::StatusCode::FAILED_PRECONDITION: return FailedPrecondition(m);
    case grpc::StatusCode::OUT_OF_RANGE: return OutOfRange(m);
    case grpc::StatusCode::DEADLINE_EXCEEDED: return Status(StatusCode::kDeadlineExceeded, m);
    default: return Status(StatusCode::kUnavailable, m);
  }
}

// Every control-plane call carries the deployment's token (kv_peer_auth.h).
void Authenticate(const KvPeerAuth& auth, grpc::ClientContext* ctx) {
  if (auth.enabled()) ctx->AddMetadata("authorization", "Bearer " + auth.token);
}

// The decode's acknowledgement: the peer frees `handle`'s pinned blocks now.
// Best effort, bounded by 2 s: without it the peer's pin timeout frees them.
void SendRelease(pb::KvTransfer::Stub* stub, const std::string& handle, const std::string& peer,
                 const KvPeerAuth& auth) {
  pb::ReleaseTransferRequest rel;
  rel.set_handle(handle);
  pb::ReleaseTransferResponse rr;
  grpc::ClientContext ctx;
  Authenticate(auth, &ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::Status s = stub->ReleaseTransfer(&ctx, rel, &rr);
  if (!s.ok()) {
    LogWarn("kv transfer: ack to {} failed ({}); it frees the blocks at its timeout", peer, s.error_message());
  }
}

}  // namespace

struct KvTransport::Impl {
  std::unique_ptr<UcxAgent> ucx;
  std::vector<UcxRegion> k_regions, v_regions;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  std::mutex channels_mu;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels;
  std::condition_variable cv;
  std::thread expirer;

  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& peer) {
    std::lock_guard lock(channels_mu);
    auto& c = channels[peer];
    if (!c) c = grpc::CreateChannel(peer, grpc::InsecureChannelCredentials());
    return c;
  }
};

// Validates everything before exposing memory: handle, block ids (each in
// the pool and exported under this handle), their token hashes, layout, model.
class KvTransport::Service final : public pb::KvTransfer::Service {
 public:
  explicit Service(KvTransport* t) : t_(t) {}

  grpc::Status OpenTransfer(grpc::ServerContext* ctx, const pb::OpenTransferRequest* req,
                            pb::OpenTransferResponse* resp) override {
    if (grpc::Status a = Admit(ctx); !a.ok()) return a;
    if (Status s = CheckProtoLayout(t_->layout_, req->layout()); !s.ok()) return ToGrpc(s);
    if (req->model_fingerprint() != t_->fingerprint_) {
      return ToGrpc(FailedPrecondition("kv transfer: the instances serve different models (fingerprint " +
                                       t_->fingerprint_ + " at the exporting instance, " + req->model_fingerprint() +
                                       " at the pulling one)"));
    }
    if (req->keys_size() != req->block_ids_size()) {
      return ToGrpc(InvalidArgument("kv transfer: " + std::to_string(req->keys_size()) + " keys for " +
                                    std::to_string(req->block_ids_size()) + " blocks"));
    }
    std::vector<int32_t> blocks(req->block_ids().begin(), req->block_ids().end());
    {
      std::lock_guard lock(t_->mu_);
      auto it = t_->exports_.find(req->handle());
      if (it == t_->exports_.end()) {
        return ToGrpc(NotFound("kv transfer: unknown transfer handle '" + req->handle() +
                               "' (never exported, already released or timed out)"));
      }
      const ExportEntry& e = it->second;
      for (int i = 0; i < req->block_ids_size(); ++i) {
        const int32_t b = req->block_ids(i);
        if (b < 0 || b >= t_->cache_->num_blocks()) {
          return ToGrpc(OutOfRange("kv transfer: block id " + std::to_string(b) + " is outside the KV pool (" +
                                   std::to_string(t_->cache_->num_blocks()) + " blocks)"));
        }
        size_t pos = 0;
        while (pos < e.blocks.size() && e.blocks[pos] != b) ++pos;
        if (pos == e.blocks.size()) {
          return ToGrpc(InvalidArgument("kv transfer: block " + std::to_string(b) + " is not part of transfer '" +
                                        req->handle() + "'"));
        }
        const std::string& key = req->keys(i).sha256();
        if (key.size() != e.keys[pos].sha256.size() ||
            std::memcmp(key.data(), e.keys[pos].sha256.data(), key.size()) != 0) {
          return ToGrpc(FailedPrecondition("kv transfer: block " + std::to_string(b) + " of '" + req->handle() +
                                           "' holds other tokens than the peer expects"));
        }
      }
    }
    // Pinned full blocks are never written again, so reading them here races with nothing.
    resp->set_worker_address(t_->impl_->ucx->worker_address());
    for (const UcxRegion& r : t_->impl_->k_regions) {
      auto* m = resp->add_k_regions();
      m->set_base(r.base);
      m->set_rkey(r.rkey);
    }
    for (const UcxRegion& r : t_->impl_->v_regions) {
      auto* m = resp->add_v_regions();
      m->set_base(r.base);
      m->set_rkey(r.rkey);
    }
    resp->set_block_bytes(t_->block_bytes_);
    for (int32_t b : blocks) resp->add_checksums(t_->BlockChecksum(b));
    return grpc::Status::OK;
  }

  grpc::Status ReleaseTransfer(grpc::ServerContext* ctx, const pb::ReleaseTransferRequest* req,
                               pb::ReleaseTransferResponse* resp) override {
    if (grpc::Status a = Admit(ctx); !a.ok()) return a;
    std::lock_guard lock(t_->mu_);
    const bool known = t_->exports_.count(req->handle()) != 0;
    if (known) t_->EndExport(req->handle());
    resp->set_released(known);
    return grpc::Status::OK;
  }

 private:
  // With an internal key, a call without the deployment's token is refused
  // before anything is looked up (an unknown caller learns nothing, not even
  // whether a handle exists). Without one the control plane listens on
  // loopback only (the flags refuse anything else).
  grpc::Status Admit(grpc::ServerContext* ctx) const {
    if (!t_->auth_.enabled()) return grpc::Status::OK;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    const std::string_view auth = it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
    if (!KvTokenMatches(t_->auth_, auth)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "kv transfer: the call needs this deployment's credential (--internal-api-key-file)");
    }
    return grpc::Status::OK;
  }

  KvTransport* t_;
};

uint64_t KvTransport::BlockChecksum(int32_t block) const {
  uint64_t h = 0;
  const uint64_t off = static_cast<uint64_t>(block) * block_bytes_;
  for (int32_t l = 0; l < layout_.num_layers; ++l) {
    const KvLayerView v = cache_->layer(l);
    h = KvChecksum(static_cast<const char*>(v.k) + off, block_bytes_, h);
    h = KvChecksum(static_cast<const char*>(v.v) + off, block_bytes_, h);
  }
  return h;
}

StatusOr<std::unique_ptr<KvTransport>> KvTransport::Create(const KvTransportOptions& options, KvCache* cache,
                                                           KvLayout layout, std::string fingerprint) {
  if (!options.fault.empty() && options.fault != "corrupt" && options.fault != "drop") {
    return InvalidArgument("kv transfer: unknown fault '" + options.fault + "' (corrupt | drop)");
  }
  auto t = std::unique_ptr<KvTransport>(new KvTransport());
  t->options_ = options;
  t->auth_ = KvPeerAuth::FromInternalKey(options.internal_key);
  t->cache_ = cache;
  t->layout_ = layout;
  t->fingerprint_ = std::move(fingerprint);
  t->block_bytes_ = static_cast<uint64_t>(layout.block_size) * layout.num_kv_heads * layout.head_dim *
                    DTypeSize(layout.dtype);
  t->impl_ = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(t->impl_->ucx, UcxAgent::Create({options.ucx_tls, options.host}));
  const uint64_t region = t->block_bytes_ * static_cast<uint64_t>(cache->num_blocks());
  for (int32_t l = 0; l < layout.num_layers; ++l) {
    const KvLayerView v = cache->layer(l);
    ASSIGN_OR_RETURN(UcxRegion k, t->impl_->ucx->Register(v.k, region));
    ASSIGN_OR_RETURN(UcxRegion vv, t->impl_->ucx->Register(v.v, region));
    t->impl_->k_regions.push_back(std::move(k));
    t->impl_->v_regions.push_back(std::move(vv));
  }
  t->impl_->service = std::make_unique<Service>(t.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.host + ":" + std::to_string(options.port), grpc::InsecureServerCredentials(),
                           &t->port_);
  builder.RegisterService(t->impl_->service.get());
  t->impl_->server = builder.BuildAndStart();
  if (!t->impl_->server || t->port_ == 0) {
    return FailedPrecondition("kv transfer: cannot listen on " + options.host + ":" + std::to_string(options.port) +
                              " (port in use?)");
  }
  std::random_device rd;
  char id[17];
  std::snprintf(id, sizeof(id), "%08x%08x", rd(), rd());
  t->engine_id_ = id;
  t->impl_->expirer = std::thread([p = t.get()] { p->ExpireLoop(); });
  LogInfo("kv transfer: control plane on {}:{}, engine id {}, layout {}, model {}, UCX transports {}",
          options.host, t->port_, t->engine_id_, DescribeKvLayout(layout), t->fingerprint_,
          options.ucx_tls.empty() ? "(UCX default)" : options.ucx_tls);
  return t;
}

KvTransport::~KvTransport() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  if (impl_) {
    impl_->cv.notify_all();
    if (impl_->expirer.joinable()) impl_->expirer.join();
    if (impl_->server) impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  }
}

void KvTransport::ExpireLoop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const auto now = std::chrono::steady_clock::now();
    auto next = now + std::chrono::seconds(1);
    std::vector<std::string> expired;
    for (const auto& [h, e] : exports_) {
      if (e.deadline <= now) {
        expired.push_back(h);
      } else {
        next = std::min(next, e.deadline);
      }
    }
    for (const std::string& h : expired) {
      LogWarn("kv transfer: '{}' was not pulled within {} ms; freeing its blocks", h,
              options_.pin_timeout.count());
      EndExport(h);
    }
    impl_->cv.wait_until(lock, next);
  }
}

void KvTransport::EndExport(const std::string& handle) {
  exports_.erase(handle);
  released_.push_back(handle);
  if (options_.notify) options_.notify();
}

void KvTransport::Export(const std::string& handle, std::vector<int32_t> blocks, std::vector<KvBlockKey> keys) {
  {
    std::lock_guard lock(mu_);
    exports_[handle] = {std::move(blocks), std::move(keys),
                        std::chrono::steady_clock::now() + options_.pin_timeout};
  }
  impl_->cv.notify_all();
}

std::vector<std::string> KvTransport::TakeReleased() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  out.swap(released_);
  return out;
}

int64_t KvTransport::num_exports() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(exports_.size());
}

void KvTransport::Release(const std::string& host, int port, const std::string& handle) {
  const std::string peer = host + ":" + std::to_string(port);
  SendRelease(pb::KvTransfer::NewStub(impl_->ChannelTo(peer)).get(), handle, peer, auth_);
}

StatusOr<KvPullStats> KvTransport::Pull(const KvPullSpec& spec) {
  const auto start = std::chrono::steady_clock::now();
  const std::string peer = spec.host + ":" + std::to_string(spec.port);
  if (spec.local_blocks.size() != spec.remote_blocks.size() || spec.keys.size() != spec.remote_blocks.size()) {
    return InvalidArgument("kv transfer: pull spec lengths differ");
  }
  for (int32_t b : spec.local_blocks) {
    if (b < 0 || b >= cache_->num_blocks()) return OutOfRange("kv transfer: local block out of range");
  }
  auto stub = pb::KvTransfer::NewStub(impl_->ChannelTo(peer));
  pb::OpenTransferRequest req;
  req.set_handle(spec.handle);
  for (size_t i = 0; i < spec.remote_blocks.size(); ++i) {
    req.add_block_ids(spec.remote_blocks[i]);
    auto* k = req.add_keys();
    k->set_sha256(spec.keys[i].sha256.data(), spec.keys[i].sha256.size());
  }
  ToProto(layout_, req.mutable_layout());
  req.set_model_fingerprint(fingerprint_);
  req.set_worker_address(impl_->ucx->worker_address());
  pb::OpenTransferResponse resp;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options_.pull_timeout);
    Authenticate(auth_, &ctx);
    grpc::Status s = stub->OpenTransfer(&ctx, req, &resp);
    if (!s.ok()) return FromGrpc(s, peer);
  }
  // From here on the peer holds an export for us: acknowledge it whatever
  // happens, so a failed pull frees its blocks now rather than at the timeout.
  struct Ack {
    pb::KvTransfer::Stub* stub;
    const std::string& handle;
    const std::string& peer;
    const KvPeerAuth& auth;
    ~Ack() { SendRelease(stub, handle, peer, auth); }
  } ack{stub.get(), spec.handle, peer, auth_};
  if (options_.before_read) options_.before_read(spec.handle);
  const int32_t layers = layout_.num_layers;
  if (resp.k_regions_size() != layers || resp.v_regions_size() != layers || resp.block_bytes() != block_bytes_ ||
      resp.checksums_size() != static_cast<int>(spec.remote_blocks.size())) {
    return FailedPrecondition("kv transfer: " + peer + " answered with another layout");
  }
  std::vector<UcxRegion> regions;
  for (const auto* list : {&resp.k_regions(), &resp.v_regions()}) {
    for (const auto& m : *list) regions.push_back({m.base(), m.rkey()});
  }
  std::vector<UcxRead> reads;
  for (size_t i = 0; i < spec.remote_blocks.size(); ++i) {
    const uint64_t roff = static_cast<uint64_t>(spec.remote_blocks[i]) * block_bytes_;
    const uint64_t loff = static_cast<uint64_t>(spec.local_blocks[i]) * block_bytes_;
    for (int32_t l = 0; l < layers; ++l) {
      const KvLayerView v = cache_->layer(l);
      reads.push_back({l, regions[l].base + roff, static_cast<char*>(v.k) + loff, block_bytes_});
      reads.push_back({layers + l, regions[layers + l].base + roff, static_cast<char*>(v.v) + loff, block_bytes_});
    }
  }
  const auto left = options_.pull_timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::steady_clock::now() - start);
  Status got = Status::Ok();
  if (options_.fault == "drop") {
    // The link dies half-way: the first half of the reads really happen.
    reads.resize(reads.size() / 2);
    got = impl_->ucx->Get(resp.worker_address(), regions, reads, std::max(left, std::chrono::milliseconds(1)));
    if (got.ok()) got = Status(StatusCode::kUnavailable, "connection dropped mid-transfer (injected fault)");
  } else {
    got = impl_->ucx->Get(resp.worker_address(), regions, reads, std::max(left, std::chrono::milliseconds(1)));
  }
  if (!got.ok()) return Status(got.code(), "kv transfer: reading from " + peer + ": " + got.message());
  if (options_.fault == "corrupt" && !spec.local_blocks.empty()) {
    static_cast<char*>(cache_->layer(0).k)[static_cast<uint64_t>(spec.local_blocks[0]) * block_bytes_] ^= 1;
  }
  for (size_t i = 0; i < spec.local_blocks.size(); ++i) {
    if (BlockChecksum(spec.local_blocks[i]) != resp.checksums(static_cast<int>(i))) {
      return DataLoss("kv transfer: block " + std::to_string(spec.remote_blocks[i]) + " from " + peer +
                      " failed its checksum");
    }
  }
  KvPullStats st;
  st.bytes = static_cast<int64_t>(reads.size() * block_bytes_);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return st;
}

}  // namespace tessera
