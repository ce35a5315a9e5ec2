#include "server/router/instance_registry.h"
#include "common/log.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "scheduler/routing_cost.h"
#include "server/router/http_client.h"

namespace tessera {

namespace fs = std::filesystem;

const char* InstanceRoleName(InstanceRole role) { return role == InstanceRole::kPrefill ? "prefill" : "decode"; }

namespace {

std::string Key(InstanceRole role, const std::string& address) {
  return std::string(InstanceRoleName(role)) + "/" + address;
}

// Sum of the samples of `name` (any labels) in a Prometheus text body.
double SumMetric(const std::string& text, const std::string& name) {
  double sum = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, name.size(), name) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    const size_t sp = line.rfind(' ');
    if (sp != std::string::npos) sum += std::atof(line.c_str() + sp + 1);
  }
  return sum;
}

}  // namespace

HttpCallOptions InstanceRegistry::CallOptions() const {
  HttpCallOptions o;
  o.bearer = options_.upstream_key;  // set before the poller starts, read-only afterwards
  return o;
}

StatusOr<std::unique_ptr<InstanceRegistry>> InstanceRegistry::Create(const Options& options) {
  auto r = std::unique_ptr<InstanceRegistry>(new InstanceRegistry());
  r->options_ = options;
  r->resolver_ = std::make_unique<InstanceResolver>(options.dns_interval);
  RETURN_IF_ERROR(r->SetLists(options.prefill, options.decode));
  if (!options.file.empty()) r->ReloadFile();
  r->poller_ = std::thread([p = r.get()] { p->PollLoop(); });
  return r;
}

InstanceRegistry::~InstanceRegistry() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

Status InstanceRegistry::SetLists(const std::vector<std::string>& prefill, const std::vector<std::string>& decode) {
  const std::vector<std::string> configured[2] = {prefill, decode};  // copies: the arguments may be configured_
  std::vector<std::string> resolved[2];
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(resolved[i], resolver_->Expand(configured[i], std::string("--") +
                                                    (i == 0 ? "prefill" : "decode") + "-instances"));
  }
  configured_[0] = configured[0];
  configured_[1] = configured[1];
  std::map<std::string, Instance> next;
  for (auto [role, list] :
       {std::pair{InstanceRole::kPrefill, &resolved[0]}, std::pair{InstanceRole::kDecode, &resolved[1]}}) {
    for (const std::string& a : *list) {
      Instance in;
      in.role = role;
      in.ref.address = a;
      RETURN_IF_ERROR(ParseHostPort(a, std::string("--") + InstanceRoleName(role) + "-instances", &in.ref.host,
                                    &in.ref.port));
      next.emplace(Key(role, a), std::move(in));
    }
  }
  std::lock_guard lock(mu_);
  for (auto& [k, in] : next) {
    if (auto old = instances_.find(k); old != instances_.end()) in = old->second;  // keep load and health
  }
  instances_ = std::move(next);
  return Status::Ok();
}

// A file that cannot be read or parsed keeps the previous lists (logged).
void InstanceRegistry::ReloadFile() {
  std::error_code ec;
  const auto mtime = fs::last_write_time(options_.file, ec);
  if (ec) {
    LogWarn("router: --instances-file {}: {}", options_.file, ec.message());
    return;
  }
  std::ifstream in(options_.file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string stamp = std::to_string(mtime.time_since_epoch().count()) + "/" + ss.str();
  if (stamp == file_stamp_) return;
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  std::vector<std::string> lists[2];
  bool ok = j.is_object();
  for (int i = 0; ok && i < 2; ++i) {
    auto it = j.find(i == 0 ? "prefill" : "decode");
    if (it == j.end()) continue;
    if (!it->is_array()) ok = false;
    for (const auto& a : *it) {
      if (!a.is_string()) ok = false;
      else lists[i].push_back(a.get<std::string>());
    }
  }
  if (!ok) {
    LogWarn("router: --instances-file {}: expected {{\"prefill\": [\"host:port\", ...], \"decode\": [...]}}",
            options_.file);
    file_stamp_ = stamp;
    return;
  }
  lists[0].insert(lists[0].end(), options_.prefill.begin(), options_.prefill.end());
  lists[1].insert(lists[1].end(), options_.decode.begin(), options_.decode.end());
  if (Status s = SetLists(lists[0], lists[1]); !s.ok()) {
    LogWarn("router: --instances-file {}: {}", options_.file, s.message());
  } else {
    LogInfo("router: instances from {}: {} prefill, {} decode", options_.file, lists[0].size(), lists[1].size());
  }
  file_stamp_ = stamp;
}

void InstanceRegistry::PollLoop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    if (!options_.file.empty()) ReloadFile();
    if (resolver_->Due()) (void)SetLists(configured_[0], configured_[1]);  // entries were checked before
    lock.lock();
    std::vector<Instance> due;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [k, in] : instances_) {
      if (in.next_poll <= now) due.push_back(in);
    }
    lock.unlock();
    for (const Instance& in : due) {
      HttpCallOptions o = CallOptions();
      o.connect_timeout = std::chrono::milliseconds(500);
      o.idle_timeout = std::chrono::milliseconds(1000);
      HttpCallResult res;
      Status s = HttpCall(in.ref.host, in.ref.port, "GET", "/metrics", "", o, &res);
      // Ready means loaded and not draining; /metrics answers either way.
      HttpCallResult ready;
      if (s.ok() && res.status == 200) s = HttpCall(in.ref.host, in.ref.port, "GET", "/ready", "", o, &ready);
      const bool up = s.ok() && res.status == 200 && ready.status == 200;
      std::string store_kind;  // relearnt when it (re)joins: a restart may change its flags
      if (up && (!in.healthy || !in.answered || in.responses_store.empty())) {
        HttpCallResult info;
        if (HttpCall(in.ref.host, in.ref.port, "GET", "/server_info", "", o, &info).ok() && info.status == 200) {
          const auto j = nlohmann::json::parse(info.body, nullptr, false);
          store_kind = j.is_object() && j.contains("responses_store") && j["responses_store"].is_string()
                           ? j["responses_store"].get<std::string>()
                           : "none";
        }
      }
      std::lock_guard g(mu_);
      auto it = instances_.find(Key(in.role, in.ref.address));
      if (it == instances_.end()) continue;
      Instance& cur = it->second;
      if (up) {
        if (!store_kind.empty()) cur.responses_store = store_kind;
        if (!cur.healthy) LogInfo("router: {} {} is back", InstanceRoleName(cur.role), cur.ref.address);
        cur.healthy = true;
        cur.answered = true;
        cur.backoff = std::chrono::milliseconds(0);
        cur.queue = static_cast<int64_t>(SumMetric(res.body, "tessera:num_requests_running") +
                                         SumMetric(res.body, "tessera:num_requests_waiting"));
        cur.kv_usage = SumMetric(res.body, "tessera:kv_cache_usage_perc");
        cur.waiting = static_cast<int64_t>(SumMetric(res.body, "tessera:num_requests_waiting"));
        cur.next_poll = std::chrono::steady_clock::now() + options_.poll_interval;
      } else {
        if (cur.healthy) {
          LogWarn("router: {} {} is not answering ({}); out of rotation", InstanceRoleName(cur.role),
                  cur.ref.address, s.ok() ? "not ready" : s.message());
        }
        cur.healthy = false;
        // An instance still starting (never answered) is polled every 250 ms, so the router is ready soon
        // after it; one that answered before backs off up to 8 s.
        cur.backoff = cur.answered ? std::min(std::chrono::milliseconds(8000),
                                              std::max(std::chrono::milliseconds(250), cur.backoff * 2))
                                   : std::chrono::milliseconds(250);
        cur.next_poll = std::chrono::steady_clock::now() + cur.backoff;
      }
    }
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; });
  }
}

std::optional<InstanceRef> InstanceRegistry::Pick(InstanceRole role, const std::vector<std::string>& exclude) {
  std::lock_guard lock(mu_);
  const Instance* best = nullptr;
  int64_t best_load = 0;
  for (const auto& [k, in] : instances_) {
    if (in.role != role || !in.healthy) continue;
    if (std::find(exclude.begin(), exclude.end(), in.ref.address) != exclude.end()) continue;
    const int64_t load = LoadScore(in.outstanding, in.queue);
    if (best == nullptr || load < best_load) {
      best = &in;
      best_load = load;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->ref;
}

void InstanceRegistry::AddOutstanding(const std::string& address, int64_t tokens) {
  std::lock_guard lock(mu_);
  for (auto& [k, in] : instances_) {
    if (in.ref.address == address) in.outstanding += tokens;
  }
}

void InstanceRegistry::MarkFailed(const std::string& address) {
  std::lock_guard lock(mu_);
  for (auto& [k, in] : instances_) {
    if (in.ref.address != address) continue;
    if (in.healthy) LogWarn("router: {} {} failed a call; out of rotation", InstanceRoleName(in.role), address);
    in.healthy = false;
    in.backoff = std::max(std::chrono::milliseconds(250), in.backoff);
    in.next_poll = std::chrono::steady_clock::now() + in.backoff;
  }
}

std::vector<InstanceSnapshot> InstanceRegistry::Snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<InstanceSnapshot> out;
  for (const auto& [k, in] : instances_) {
    out.push_back({in.ref, in.role, in.healthy, in.outstanding, in.queue, in.kv_usage, in.waiting});
  }
  return out;
}

bool InstanceRegistry::Healthy(const std::string& address) const {
  std::lock_guard lock(mu_);
  for (const auto& [k, in] : instances_) {
    if (in.ref.address == address) return in.healthy;
  }
  return false;
}

bool InstanceRegistry::DecodeResponsesStoreIs(std::string_view kind) const {
  std::lock_guard g(mu_);
  bool any = false;
  for (const auto& [k, in] : instances_) {
    if (in.role != InstanceRole::kDecode) continue;
    if (in.responses_store != kind) return false;
    any = true;
  }
  return any;
}

bool InstanceRegistry::AnyHealthy(InstanceRole role) const {
  std::lock_guard lock(mu_);
  for (const auto& [k, in] : instances_) {
    if (in.role == role && in.healthy && in.answered) return true;
  }
  return false;
}

}  // namespace tessera
