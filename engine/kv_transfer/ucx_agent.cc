#include "engine/kv_transfer/ucx_agent.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

#include <ucp/api/ucp.h>

namespace tessera {
namespace {

Status UcxError(const std::string& what, ucs_status_t s) {
  return Status(StatusCode::kUnavailable, "ucx: " + what + ": " + ucs_status_string(s));
}

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(b)->sin_addr, sizeof(in_addr)) == 0;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

StatusOr<std::string> InterfaceOfHost(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") return std::string();
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(h.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    return NotFound("ucx: cannot resolve --host " + host);
  }
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) {
    freeaddrinfo(res);
    return Status(StatusCode::kUnavailable, "ucx: cannot list the network interfaces");
  }
  std::string name;
  for (addrinfo* a = res; a != nullptr && name.empty(); a = a->ai_next) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (SameAddress(a->ai_addr, i->ifa_addr)) {
        name = i->ifa_name;
        break;
      }
    }
  }
  freeifaddrs(ifs);
  freeaddrinfo(res);
  if (name.empty()) return NotFound("ucx: no network interface of this machine holds --host " + host);
  return name;
}

StatusOr<std::unique_ptr<UcxAgent>> UcxAgent::Create(const UcxAgentOptions& options) {
  auto agent = std::unique_ptr<UcxAgent>(new UcxAgent());
  // Only network transports detect a dead peer; asking for it with shared
  // memory alone fails endpoint creation (and logs a UCX error).
  const std::string& tls = options.tls;
  agent->peer_error_handling_ = tls.empty();
  for (const char* net : {"tcp", "rc", "ud", "dc", "ib", "all"}) {
    if (tls.find(net) != std::string::npos) agent->peer_error_handling_ = true;
  }
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxError("reading the configuration", s);
  if (!options.tls.empty()) {
    s = ucp_config_modify(config, "TLS", options.tls.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return InvalidArgument("ucx: transports '" + options.tls + "': " + ucs_status_string(s));
    }
  }
  // Listeners bind only the configured address (docs/architecture.md, "Threat model").
  if (const char* env = std::getenv("UCX_NET_DEVICES"); env == nullptr || *env == '\0') {
    StatusOr<std::string> dev = InterfaceOfHost(options.host);
    if (!dev.ok()) {
      ucp_config_release(config);
      return dev.status();
    }
    if (!dev->empty() && (s = ucp_config_modify(config, "NET_DEVICES", dev->c_str())) != UCS_OK) {
      ucp_config_release(config);
      return UcxError("network device " + *dev, s);
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &agent->context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxError("ucp_init (transports '" + options.tls + "')", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  s = ucp_worker_create(agent->context_, &wp, &agent->worker_);
  if (s != UCS_OK) return UcxError("creating the worker", s);
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  s = ucp_worker_get_address(agent->worker_, &addr, &len);
  if (s != UCS_OK) return UcxError("worker address", s);
  agent->address_.assign(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(agent->worker_, addr);
  s = ucp_worker_get_efd(agent->worker_, &agent->efd_);
  if (s != UCS_OK) return UcxError("worker event fd", s);
  agent->progress_ = std::thread([a = agent.get()] { a->ProgressLoop(); });
  return agent;
}

UcxAgent::~UcxAgent() {
  stop_.store(true);
  if (progress_.joinable()) progress_.join();
  if (worker_ != nullptr) {
    for (auto& [addr, ep] : eps_) CloseEndpoint(ep);
    for (ucp_mem_h m : memh_) ucp_mem_unmap(context_, m);
    ucp_worker_destroy(worker_);
  }
  if (context_ != nullptr) ucp_cleanup(context_);
}

// Drives the worker while nobody else does; sleeps on its event fd (100 ms
// at most, so Stop is noticed).
void UcxAgent::ProgressLoop() {
  while (!stop_.load()) {
    while (ucp_worker_progress(worker_) != 0) {
    }
    const ucs_status_t s = ucp_worker_arm(worker_);
    if (s == UCS_ERR_BUSY) continue;
    pollfd pfd{efd_, POLLIN, 0};
    (void)poll(&pfd, 1, 100);
  }
}

StatusOr<UcxRegion> UcxAgent::Register(void* ptr, uint64_t bytes) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = ptr;
  mp.length = bytes;
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(context_, &mp, &memh);
  if (s != UCS_OK) return UcxError("registering " + std::to_string(bytes) + " bytes", s);
  memh_.push_back(memh);
  void* buf = nullptr;
  size_t size = 0;
  s = ucp_rkey_pack(context_, memh, &buf, &size);
  if (s != UCS_OK) return UcxError("packing a remote key", s);
  UcxRegion r;
  r.base = reinterpret_cast<uint64_t>(ptr);
  r.rkey.assign(static_cast<const char*>(buf), size);
  ucp_rkey_buffer_release(buf);
  return r;
}

namespace {

// A failure during a Get is reported by its operations (Get fails and drops
// the endpoint); one between Gets (the peer died or its connection broke while
// idle) is queued here for the pulling thread to close.
void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t /*status*/) {
  static_cast<UcxAgent*>(arg)->NotePeerFailed(ep);
}

}  // namespace

void UcxAgent::NotePeerFailed(ucp_ep* ep) {
  std::lock_guard lock(failed_mu_);
  failed_.push_back(ep);
}

size_t UcxAgent::num_peers() {
  std::lock_guard lock(eps_mu_);
  return eps_.size();
}

void UcxAgent::ReapFailedPeers() {
  std::vector<ucp_ep*> failed;
  {
    std::lock_guard lock(failed_mu_);
    failed.swap(failed_);
  }
  std::vector<ucp_ep*> closing;
  {
    std::lock_guard lock(eps_mu_);
    for (ucp_ep* ep : failed) {
      for (auto it = eps_.begin(); it != eps_.end(); ++it) {
        if (it->second == ep) {
          closing.push_back(ep);
          eps_.erase(it);
          break;
        }
      }
    }
  }
  for (ucp_ep* ep : closing) CloseEndpoint(ep);
}

void UcxAgent::CloseEndpoint(ucp_ep* ep) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
  if (UCS_PTR_IS_PTR(r)) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(r);
  }
}

StatusOr<ucp_ep*> UcxAgent::Endpoint(const std::string& peer_address) {
  ReapFailedPeers();
  std::lock_guard lock(eps_mu_);
  if (auto it = eps_.find(peer_address); it != eps_.end()) return it->second;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.err_handler.cb = OnEndpointError;
  ep.err_handler.arg = this;
  ep.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ucp_ep_h h = nullptr;
  if (!peer_error_handling_) ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  ucs_status_t s = ucp_ep_create(worker_, &ep, &h);
  if (s == UCS_ERR_UNREACHABLE && ep.err_mode != UCP_ERR_HANDLING_MODE_NONE) {
    // Shared-memory transports have no peer-failure handling; a dead peer then
    // shows as a failed read (CMA) or the pull's timeout.
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    s = ucp_ep_create(worker_, &ep, &h);
  }
  if (s != UCS_OK) return UcxError("connecting to the peer", s);
  eps_[peer_address] = h;
  return h;
}

void UcxAgent::DropPeer(const std::string& peer_address) {
  ucp_ep_h ep = nullptr;
  {
    std::lock_guard lock(eps_mu_);
    auto it = eps_.find(peer_address);
    if (it == eps_.end()) return;
    ep = it->second;
    eps_.erase(it);
  }
  {
    // Reported failed too: forget it, so that a later endpoint that UCX
    // allocates at the same address is not taken for this one. (UCX calls no
    // error handler for an endpoint the user closed.)
    std::lock_guard lock(failed_mu_);
    std::erase(failed_, ep);
  }
  CloseEndpoint(ep);
}

Status UcxAgent::Get(const std::string& peer_address, const std::vector<UcxRegion>& regions,
                     const std::vector<UcxRead>& reads, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(ucp_ep* ep, Endpoint(peer_address));
  std::vector<ucp_rkey_h> rkeys;
  Status status = Status::Ok();
  for (const UcxRegion& r : regions) {
    ucp_rkey_h k = nullptr;
    const ucs_status_t s = ucp_ep_rkey_unpack(ep, r.rkey.data(), &k);
    if (s != UCS_OK) {
      status = UcxError("unpacking a remote key", s);
      break;
    }
    rkeys.push_back(k);
  }
  std::vector<ucs_status_ptr_t> pending;
  for (size_t i = 0; status.ok() && i < reads.size(); ++i) {
    const UcxRead& rd = reads[i];
    if (rd.region < 0 || static_cast<size_t>(rd.region) >= rkeys.size()) {
      status = InvalidArgument("ucx: read of an unknown region");
      break;
    }
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_get_nbx(ep, rd.local, rd.bytes, rd.remote_addr, rkeys[rd.region], &p);
    if (UCS_PTR_IS_ERR(r)) {
      status = UcxError("get", UCS_PTR_STATUS(r));
      break;
    }
    if (r != nullptr) pending.push_back(r);
  }
  // Flush: completes the gets (and reports a dead peer).
  if (status.ok()) {
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_ep_flush_nbx(ep, &p);
    if (UCS_PTR_IS_ERR(r)) {
      status = UcxError("flush", UCS_PTR_STATUS(r));
    } else if (r != nullptr) {
      pending.push_back(r);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  for (ucs_status_ptr_t r : pending) {
    ucs_status_t s;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS) {
      if (!timed_out && std::chrono::steady_clock::now() >= deadline) {
        // ucp_request_cancel does not cancel RMA or flush requests: on a
        // crawling link, a partition or a frozen peer they would run on
        // (writing into `local`) long past the deadline. Closing the endpoint
        // by force completes every one of them with an error, after which
        // UCX writes no more into the destination blocks.
        timed_out = true;
        DropPeer(peer_address);
      }
      ucp_worker_progress(worker_);
    }
    if (s != UCS_OK && status.ok()) {
      status = timed_out ? Status(StatusCode::kDeadlineExceeded, "ucx: transfer timed out")
                         : UcxError("transfer", s);
    }
    ucp_request_free(r);
  }
  for (ucp_rkey_h k : rkeys) ucp_rkey_destroy(k);
  if (!status.ok()) DropPeer(peer_address);
  return status;
}

}  // namespace tessera
