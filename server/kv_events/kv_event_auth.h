// Authentication of the KV event sockets (docs/architecture.md, "Threat
// model"): ZeroMQ CURVE (encryption + authentication) with keys derived from
// the deployment's internal key (common/internal_key.h), so every role that
// holds the key knows them and nothing else is configured.
//  - The publisher's PUB and replay ROUTER sockets are CURVE servers; a ZAP
//    handler on the publisher's context admits only the deployment's client
//    key, so a subscriber without it (or without CURVE at all) gets nothing.
//  - A subscriber's SUB and replay DEALER sockets are CURVE clients.
// Without an internal key the sockets are plain, and the flags allow them only
// on loopback or ipc:// (events carry prompt token ids).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <zmq.hpp>

namespace tessera::kv_events {

// Z85 text (40 characters each), as ZeroMQ's socket options take them.
struct KvEventCurveKeys {
  std::string server_public, server_secret;
  std::string client_public, client_secret;

  static KvEventCurveKeys FromInternalKey(std::string_view internal_key);
};

void MakeCurveServer(zmq::socket_t& socket, const KvEventCurveKeys& keys);
void MakeCurveClient(zmq::socket_t& socket, const KvEventCurveKeys& keys);

// ZeroMQ's ZAP handler (RFC 27) for one context: admits CURVE clients whose
// public key is keys.client_public, refuses every other request. Bind it
// before any CURVE server socket of the context binds. Not thread-safe: the
// owner's thread polls socket() and calls Answer() when it is readable.
class KvEventZapHandler {
 public:
  KvEventZapHandler(zmq::context_t& ctx, const KvEventCurveKeys& keys);
  zmq::socket_t& socket() { return socket_; }
  // Answers every pending request (non-blocking). Returns those refused.
  int Answer();

 private:
  zmq::socket_t socket_;
  std::string client_public_raw_;  // 32 bytes
};

}  // namespace tessera::kv_events
