// UcxAgent: the data plane of KV transfer on UCX's ucp API. One context and
// one worker per process; memory regions registered once (the KV pool) and
// described to peers by packed remote keys; peers read them with one-sided
// GETs. Which UCX transports carry the bytes is UCX's choice among those
// allowed by `tls` (e.g. "sm,self" on one host, "tcp,self" across hosts; empty:
// $UCX_TLS or UCX's default).
//
// Threading: the worker is created in UCS_THREAD_MODE_MULTI. A progress thread
// drives it while idle (TCP emulates GET with active messages, which the
// target must progress); Get may be called from any one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

struct ucp_context;
struct ucp_worker;
struct ucp_mem;
struct ucp_ep;
struct ucp_rkey;

namespace tessera {

struct UcxAgentOptions {
  std::string tls;  // UCX_TLS for this process's context; empty: UCX's own default
  // The instance's --host: UCX's network transports (TCP listens on every
  // interface otherwise) use only the interface holding this address, unless
  // it is a wildcard (0.0.0.0, ::, "") or $UCX_NET_DEVICES chooses devices.
  std::string host;
};

// The network interface holding `host`'s address (a literal or a name that
// resolves), e.g. "lo" for 127.0.0.1; "" for a wildcard host. NOT_FOUND when no
// interface of this machine has it.
StatusOr<std::string> InterfaceOfHost(const std::string& host);

// One contiguous local region registered for remote reads.
struct UcxRegion {
  uint64_t base = 0;
  std::string rkey;  // packed
};

// One read: `bytes` from `remote_addr` (covered by region `region`) into `local`.
struct UcxRead {
  int32_t region = 0;  // index into the regions passed to Get
  uint64_t remote_addr = 0;
  void* local = nullptr;
  uint64_t bytes = 0;
};

class UcxAgent {
 public:
  static StatusOr<std::unique_ptr<UcxAgent>> Create(const UcxAgentOptions& options);
  ~UcxAgent();

  const std::string& worker_address() const { return address_; }

  // Registers [ptr, ptr + bytes) for remote reads. Call before serving peers.
  StatusOr<UcxRegion> Register(void* ptr, uint64_t bytes);

  // Reads every `reads` entry from the peer at `peer_address`, whose regions
  // are `regions`; returns when all completed, one failed, or `timeout` passed
  // (DEADLINE_EXCEEDED / UNAVAILABLE; the endpoint is then dropped). At the
  // deadline the endpoint is closed by force, which ends every read still in
  // flight (a crawling link, a partition, a frozen peer): when Get returns,
  // UCX writes nothing more into the `local` buffers. Costs up to `timeout`
  // of the calling thread, which progresses the worker meanwhile.
  Status Get(const std::string& peer_address, const std::vector<UcxRegion>& regions,
             const std::vector<UcxRead>& reads, std::chrono::milliseconds timeout);

  // Forgets the cached endpoint to a peer (after an error).
  void DropPeer(const std::string& peer_address);

  // Endpoints cached, one per peer read from and neither dropped nor reported
  // failed and reaped (tests).
  size_t num_peers();

  // UCX's error handler (progress thread): `ep`'s peer failed (it died, or
  // its connection broke). The endpoint is closed at the next Get.
  void NotePeerFailed(ucp_ep* ep);

 private:
  UcxAgent() = default;
  void ProgressLoop();
  StatusOr<ucp_ep*> Endpoint(const std::string& peer_address);
  // Closes the endpoints NotePeerFailed reported, on the pulling thread: an
  // instance that went away (killed, scaled down, restarted under a new
  // worker address) would otherwise keep its endpoint cached for ever.
  void ReapFailedPeers();
  void CloseEndpoint(ucp_ep* ep);  // by force; progresses the worker until closed

  ucp_context* context_ = nullptr;
  ucp_worker* worker_ = nullptr;
  std::string address_;
  std::vector<ucp_mem*> memh_;
  std::mutex eps_mu_;  // endpoints are created and dropped by the pulling thread
  std::map<std::string, ucp_ep*> eps_;
  // Reported by the error handler, which runs inside ucp_worker_progress
  // (holding the worker's lock): never held while calling UCX.
  std::mutex failed_mu_;
  std::vector<ucp_ep*> failed_;
  int efd_ = -1;
  bool peer_error_handling_ = true;  // endpoints ask UCX to report a peer's failure
  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace tessera
