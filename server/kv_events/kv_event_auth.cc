#include "server/kv_events/kv_event_auth.h"
#include "common/log.h"

#include <array>
#include <iterator>
#include <vector>

#include <zmq_addon.hpp>

#include "common/internal_key.h"

namespace tessera::kv_events {
namespace {

std::string Z85(const std::string& raw32) {
  char out[41];
  zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(raw32.data()), 32);
  return std::string(out, 40);
}

// A Curve25519 key pair from a 32-byte secret.
void PairFrom(const std::string& secret_raw, std::string* pub, std::string* sec) {
  *sec = Z85(secret_raw);
  char p[41];
  zmq_curve_public(p, sec->c_str());
  *pub = std::string(p, 40);
}

}  // namespace

KvEventCurveKeys KvEventCurveKeys::FromInternalKey(std::string_view internal_key) {
  KvEventCurveKeys k;
  PairFrom(DeriveInternalKey(internal_key, "kv-events-curve-server"), &k.server_public, &k.server_secret);
  PairFrom(DeriveInternalKey(internal_key, "kv-events-curve-client"), &k.client_public, &k.client_secret);
  return k;
}

void MakeCurveServer(zmq::socket_t& socket, const KvEventCurveKeys& keys) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.server_secret);
  socket.set(zmq::sockopt::zap_domain, "tessera-kv-events");
}

void MakeCurveClient(zmq::socket_t& socket, const KvEventCurveKeys& keys) {
  socket.set(zmq::sockopt::curve_serverkey, keys.server_public);
  socket.set(zmq::sockopt::curve_publickey, keys.client_public);
  socket.set(zmq::sockopt::curve_secretkey, keys.client_secret);
}

KvEventZapHandler::KvEventZapHandler(zmq::context_t& ctx, const KvEventCurveKeys& keys)
    : socket_(ctx, zmq::socket_type::rep), client_public_raw_(32, '\0') {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
  zmq_z85_decode(reinterpret_cast<uint8_t*>(client_public_raw_.data()), keys.client_public.c_str());
}

int KvEventZapHandler::Answer() {
  int refused = 0;
  for (;;) {
    // RFC 27 request: version, request id, domain, address, identity, mechanism, credentials...
    std::vector<zmq::message_t> req;
    if (!zmq::recv_multipart(socket_, std::back_inserter(req), zmq::recv_flags::dontwait)) break;
    // A REP socket must answer every request, a malformed one included.
    const bool ok = req.size() == 7 && req[5].to_string_view() == "CURVE" &&
                    ConstantTimeEquals(req[6].to_string_view(), client_public_raw_);
    if (!ok) {
      ++refused;
      LogWarn("KV events: refused a subscriber from {} without this deployment's credential ({})",
              req.size() > 3 ? req[3].to_string() : "?", req.size() > 5 ? req[5].to_string() : "?");
    }
    std::array<zmq::const_buffer, 6> rep = {zmq::buffer(std::string_view("1.0")),
                                            req.size() > 1 ? zmq::buffer(req[1].data(), req[1].size())
                                                           : zmq::const_buffer(),
                                            zmq::buffer(std::string_view(ok ? "200" : "400")),
                                            zmq::buffer(std::string_view(ok ? "OK" : "unknown client key")),
                                            zmq::const_buffer(),
                                            zmq::const_buffer()};
    (void)zmq::send_multipart(socket_, rep, zmq::send_flags::dontwait);
  }
  return refused;
}

}  // namespace tessera::kv_events
