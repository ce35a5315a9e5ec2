#include "server/kv_events/kv_event_publisher.h"
#include "common/log.h"

#include <array>
#include <chrono>
#include <iterator>
#include <deque>
#include <utility>


#include "common/internal_key.h"
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace tessera::kv_events {
namespace {

std::string SeqBytes(int64_t seq) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(seq) >> (8 * (7 - i))) & 0xff);
  return out;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

bool PublisherBinds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

std::string NarrowEndpoint(const std::string& endpoint, const std::string& host) {
  constexpr std::string_view kWild = "tcp://*:";
  if (endpoint.rfind(kWild, 0) != 0 || host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
    return endpoint;
  }
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return "tcp://" + (v6 ? "[" + host + "]" : host) + endpoint.substr(kWild.size() - 1);
}

bool EndpointLeavesHost(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return false;  // ipc://, inproc://
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) return true;
  return !IsLoopbackHost(endpoint.substr(6, colon - 6));
}

struct KvEventPublisher::Sockets {
  zmq::context_t ctx{1};
  std::optional<KvEventZapHandler> zap;  // first: bound before the CURVE sockets
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;
  std::deque<std::pair<int64_t, std::string>> buffer;  // (seq, payload), oldest first
  int64_t next_seq = 0;
};

StatusOr<std::shared_ptr<KvEventPublisher>> KvEventPublisher::Start(const KvEventPublisherOptions& options) {
  if (!options.config.enabled()) return InvalidArgument("KV events: not enabled (publisher must be \"zmq\")");
  std::shared_ptr<KvEventPublisher> p(new KvEventPublisher(options));
  Sockets& s = *p->sockets_;
  const KvEventsConfig& c = options.config;
  const std::string endpoint = NarrowEndpoint(c.endpoint, options.host);
  const std::string replay_endpoint = NarrowEndpoint(c.replay_endpoint, options.host);
  try {
    if (options.curve) {
      s.zap.emplace(s.ctx, *options.curve);
      MakeCurveServer(s.pub, *options.curve);
    }
    s.pub.set(zmq::sockopt::sndhwm, static_cast<int>(c.hwm));
    s.pub.set(zmq::sockopt::linger, 100);
    PublisherBinds(c.endpoint) ? s.pub.bind(endpoint) : s.pub.connect(endpoint);  // vLLM's rule, on the flag
    if (!c.replay_endpoint.empty()) {
      s.replay.emplace(s.ctx, zmq::socket_type::router);
      s.replay->set(zmq::sockopt::linger, 0);
      if (options.curve) MakeCurveServer(*s.replay, *options.curve);
      s.replay->bind(replay_endpoint);
      p->replay_endpoint_ = s.replay->get(zmq::sockopt::last_endpoint);
    }
    p->endpoint_ = s.pub.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status(StatusCode::kUnavailable, std::string("KV events: cannot open ") + endpoint +
                       (replay_endpoint.empty() ? "" : " / " + replay_endpoint) + ": " + e.what());
  }
  p->Push(KvEvent(std::in_place_type<AllBlocksCleared>));
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  LogInfo("KV events: publishing on {}{} (topic '{}'{})", endpoint,
          replay_endpoint.empty() ? "" : ", replay on " + replay_endpoint, c.topic,
          options.curve ? ", CURVE: this deployment's subscribers only" : "");
  return p;
}

KvEventPublisher::KvEventPublisher(const KvEventPublisherOptions& options)
    : options_(options), sockets_(std::make_unique<Sockets>()) {}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::Push(KvEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_count_ >= options_.config.max_queue_size) {
    stats_.events_dropped += pending_count_ + 1;
    pending_.clear();
    pending_.emplace_back(std::in_place_type<AllBlocksCleared>);
    pending_count_ = 1;
    return;
  }
  pending_.push_back(std::move(event));
  ++pending_count_;
}

void KvEventPublisher::OnBlocksStored(std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                                      std::span<const int32_t> token_ids, int32_t block_size) {
  BlockStored e;
  e.block_hashes.reserve(hashes.size());
  for (const BlockHash& h : hashes) e.block_hashes.push_back(KeyOf(h));
  if (parent) e.parent_block_hash = KeyOf(*parent);
  e.token_ids.assign(token_ids.begin(), token_ids.end());
  e.block_size = block_size;
  e.medium = options_.medium;
  Push(std::move(e));
}

void KvEventPublisher::OnBlocksRemoved(std::span<const BlockHash> hashes) {
  BlockRemoved e;
  e.block_hashes.reserve(hashes.size());
  for (const BlockHash& h : hashes) e.block_hashes.push_back(KeyOf(h));
  e.medium = options_.medium;
  Push(std::move(e));
}

void KvEventPublisher::OnAllBlocksCleared() { Push(KvEvent(std::in_place_type<AllBlocksCleared>)); }

KvEventPublisherStats KvEventPublisher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KvEventPublisher::AnswerReplays() {
  Sockets& s = *sockets_;
  for (;;) {
    std::vector<zmq::message_t> req;
    if (!zmq::recv_multipart(*s.replay, std::back_inserter(req), zmq::recv_flags::dontwait)) break;
    if (req.size() != 3 || req[2].size() != 8) {
      LogWarn("KV events: ignoring a malformed replay request ({} frames)", req.size());
      continue;
    }
    int64_t start = 0;
    for (size_t i = 0; i < 8; ++i) start = (start << 8) | static_cast<const unsigned char*>(req[2].data())[i];
    const std::string client = req[0].to_string();
    for (const auto& [seq, payload] : s.buffer) {
      if (seq < start) continue;
      const std::string seq_bytes = SeqBytes(seq);
      std::array<zmq::const_buffer, 4> frames = {zmq::buffer(client), zmq::const_buffer(), zmq::buffer(seq_bytes),
                                                 zmq::buffer(payload)};
      (void)zmq::send_multipart(*s.replay, frames, zmq::send_flags::dontwait);
    }
    const std::string end = SeqBytes(-1);
    std::array<zmq::const_buffer, 4> fin = {zmq::buffer(client), zmq::const_buffer(), zmq::buffer(end),
                                            zmq::const_buffer()};
    (void)zmq::send_multipart(*s.replay, fin, zmq::send_flags::dontwait);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.replays_served;
  }
}

void KvEventPublisher::Run() {
  Sockets& s = *sockets_;
  const auto interval = std::chrono::milliseconds(options_.flush_interval_ms);
  const zmq::const_buffer topic = zmq::buffer(options_.config.topic);
  for (;;) {
    // The replay and ZAP sockets are this thread's: poll them between flushes.
    std::vector<zmq::pollitem_t> items;
    if (s.replay) items.push_back({s.replay->handle(), 0, ZMQ_POLLIN, 0});
    if (s.zap) items.push_back({s.zap->socket().handle(), 0, ZMQ_POLLIN, 0});
    if (!items.empty()) {
      zmq::poll(items.data(), items.size(), interval);
      if (s.replay && (items[0].revents & ZMQ_POLLIN)) AnswerReplays();
      if (s.zap && (items.back().revents & ZMQ_POLLIN)) {
        const int refused = s.zap->Answer();
        std::lock_guard<std::mutex> lock(mu_);
        stats_.subscribers_refused += refused;
      }
    }
    std::vector<KvEvent> events;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!s.replay && !s.zap) cv_.wait_for(lock, interval, [&] { return stop_; });
      events.swap(pending_);
      pending_count_ = 0;
      stop = stop_;
    }
    if (!events.empty()) {
      EventBatch batch;
      batch.ts = NowSeconds();
      batch.data_parallel_rank = options_.data_parallel_rank;
      const int64_t n = static_cast<int64_t>(events.size());
      batch.events = std::move(events);
      std::string payload = EncodeEventBatch(batch);
      const int64_t seq = s.next_seq++;
      const std::string seq_bytes = SeqBytes(seq);
      std::array<zmq::const_buffer, 3> frames = {topic, zmq::buffer(seq_bytes), zmq::buffer(payload)};
      // PUB never blocks: past the high-water mark ZeroMQ drops for that subscriber.
      (void)zmq::send_multipart(s.pub, frames, zmq::send_flags::dontwait);
      if (s.replay) {
        s.buffer.emplace_back(seq, std::move(payload));
        while (static_cast<int64_t>(s.buffer.size()) > options_.config.buffer_steps) s.buffer.pop_front();
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.batches_published;
      stats_.events_published += n;
    }
    if (stop) break;
  }
}

}  // namespace tessera::kv_events
