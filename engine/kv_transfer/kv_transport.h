// KvTransport: moves KV blocks between instances (prefill/decode
// disaggregation, docs/architecture.md, "Disaggregation"). The control plane is a gRPC service
// (proto/kv.proto) on its own port; the data plane is UCX (ucx_agent.h): the
// decode side reads the prefill side's registered KV pool with one-sided GETs
// straight into its own pre-allocated blocks.
//
// Prefill side: Export() pins nothing by itself: the scheduler keeps the
// blocks referenced; Export records which blocks a handle may expose and until
// when. A decode's ReleaseTransfer, or the pin timeout, ends the export;
// TakeReleased() hands those handles back so the scheduler frees the blocks.
// Decode side: Pull() checks layout and model at handshake, reads, verifies
// each block's checksum and acknowledges; any failure leaves the destination
// blocks uncomputed (the caller recomputes).
//
// Which blocks to pull is the scheduler's decision; this class moves bytes.
// Threading: Export/TakeReleased from the engine-loop thread; Pull from one
// thread at a time (the engine loop's KvPuller, kv_puller.h), concurrently
// with them; the gRPC service runs on its own threads and only reads pinned
// (immutable) blocks.
// CPU KV pools only (host memory); a CUDA pool is refused at Create.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"
#include "engine/kv_cache.h"
#include "engine/kv_transfer/kv_layout.h"
#include "engine/kv_transfer/kv_peer_auth.h"

namespace tessera {

struct KvTransportOptions {
  std::string host = "127.0.0.1";  // control-plane address to bind and to advertise
  int port = 0;                    // 0: any free port
  std::string ucx_tls;             // UCX transports, e.g. "sm,self" or "tcp,self"; empty: UCX default
  // The deployment's internal key ("" : none, a one-host deployment); the
  // control-plane token and the kv_transfer_params signatures derive from it
  // (kv_peer_auth.h).
  std::string internal_key;
  std::chrono::milliseconds pin_timeout{60000};   // exported blocks are freed after this without an ack
  std::chrono::milliseconds pull_timeout{10000};  // one Pull, handshake to ack
  // Fault injection for tests (hidden flag): "corrupt" flips a byte of the
  // first pulled block after the read (the checksum must catch it); "drop"
  // reads half of the bytes, then fails as a link dying mid-transfer would.
  std::string fault;
  // Tests: runs on the pulling thread after the handshake, before the reads,
  // with the pull's handle (a slow or frozen link). Empty when serving.
  std::function<void(const std::string& handle)> before_read;
  // Runs (any thread) when an export ends, so the engine loop wakes to free it.
  std::function<void()> notify;
};

// The prefix-cache hash of one block (the scheduler's BlockHash as plain data:
// SHA-256 of the chained block tuple, scheduler/block_hash.h).
struct KvBlockKey {
  Sha256Digest sha256{};
  bool operator==(const KvBlockKey&) const = default;
};

struct KvPullSpec {
  std::string host;  // the prefill instance's control plane
  int port = 0;
  std::string handle;
  std::vector<int32_t> remote_blocks;  // prefill-side ids
  std::vector<int32_t> local_blocks;   // decode-side ids, same length, pre-allocated
  std::vector<KvBlockKey> keys;        // hash of each block's tokens, same length
};

struct KvPullStats {
  int64_t bytes = 0;
  double seconds = 0;  // handshake to ack
};

class KvTransport {
 public:
  // Registers `cache`'s memory with UCX and starts the control-plane server.
  // `cache` must outlive the transport.
  static StatusOr<std::unique_ptr<KvTransport>> Create(const KvTransportOptions& options, KvCache* cache,
                                                       KvLayout layout, std::string fingerprint);
  ~KvTransport();

  int port() const { return port_; }
  const std::string& host() const { return options_.host; }
  // Identifies this instance to peers (vLLM's remote_engine_id).
  const std::string& engine_id() const { return engine_id_; }
  const KvLayout& layout() const { return layout_; }
  const std::string& fingerprint() const { return fingerprint_; }

  // Prefill: `handle`'s blocks (held by the caller until released) may now be read.
  void Export(const std::string& handle, std::vector<int32_t> blocks, std::vector<KvBlockKey> keys);
  // Handles acknowledged by their decode or timed out since the last call.
  std::vector<std::string> TakeReleased();
  int64_t num_exports() const;

  // Prefill: the "remote_signature" of an export ("" without an internal key).
  std::string SignExport(const KvSourceFields& source) const { return SignKvSource(auth_, source); }
  // Decode: may this instance connect to `source` at all (CheckKvSource)?
  // Called before a pull or release is queued; the transport trusts its callers.
  Status CheckSource(const KvSourceFields& source, std::string_view signature) const {
    return CheckKvSource(auth_, source, signature);
  }

  // Decode: reads spec.remote_blocks into spec.local_blocks, then acknowledges.
  StatusOr<KvPullStats> Pull(const KvPullSpec& spec);
  // Decode: acknowledges a handle it will not pull (its blocks are all cached
  // here, or the request ended first), so the peer frees them now. Best effort,
  // blocks up to 2 s; on failure the peer's pin timeout frees them.
  void Release(const std::string& host, int port, const std::string& handle);

  class Service;  // the gRPC control plane (kv_transport.cc)

 private:
  struct ExportEntry {
    std::vector<int32_t> blocks;
    std::vector<KvBlockKey> keys;
    std::chrono::steady_clock::time_point deadline;
  };
  struct Impl;
  KvTransport() = default;
  void ExpireLoop();
  void EndExport(const std::string& handle);  // under mu_
  uint64_t BlockChecksum(int32_t block) const;  // all layers, K then V

  KvTransportOptions options_;
  KvPeerAuth auth_;  // derived from options_.internal_key
  KvCache* cache_ = nullptr;
  KvLayout layout_;
  std::string fingerprint_;
  std::string engine_id_;
  int port_ = 0;
  uint64_t block_bytes_ = 0;
  std::unique_ptr<Impl> impl_;
  mutable std::mutex mu_;
  std::map<std::string, ExportEntry> exports_;
  std::vector<std::string> released_;
  bool stop_ = false;
};

}  // namespace tessera
