// `tessera receipt-keygen FILE`: writes a fresh Ed25519 receipt key (the
// --receipt-key format, receipt/signing.h) and prints its public key.
// `tessera verify RECEIPT REQUEST --url URL`: asks a server serving the same
// model to re-execute REQUEST (a JSON file: the /v1/chat/completions or
// /v1/completions body) and compare with RECEIPT (a file holding the receipt
// JSON or the tessera-receipt header's base64url); prints the answer of
// POST /v1/receipts/verify. Exit code 0: equal; 1: different; 2: refused or failed.
#include <cctype>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <iostream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "common/read_file.h"
#include "receipt/signing.h"

namespace tessera {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using json = nlohmann::json;

struct VerifyArgs {
  std::string receipt, request, url = "http://127.0.0.1:8000", api_key;
};

// POST `body` to url + path; the status and the response body.
StatusOr<std::pair<int, std::string>> Post(const std::string& url, const std::string& path, const std::string& body,
                                           const std::string& api_key) {
  static const std::regex kUrl(R"(^http://([^/:]+|\[[^\]]+\])(?::(\d+))?/?$)");
  std::smatch m;
  if (!std::regex_match(url, m, kUrl)) return InvalidArgument("--url must be http://HOST[:PORT], got " + url);
  std::string host = m[1].str();
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  const std::string port = m[2].matched ? m[2].str() : "80";
  try {
    net::io_context ioc;
    net::ip::tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.connect(resolver.resolve(host, port));
    http::request<http::string_body> req(http::verb::post, path, 11);
    req.set(http::field::host, host);
    req.set(http::field::content_type, "application/json");
    if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
    req.body() = body;
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    http::read(stream, buffer, parser);
    beast::error_code ec;
    stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    return std::make_pair(static_cast<int>(parser.get().result_int()), parser.get().body());
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable, url + ": " + e.what());
  }
}

int RunVerify(const VerifyArgs& a) {
  StatusOr<std::string> receipt_text = ReadFileToString(a.receipt);
  StatusOr<std::string> request_text = ReadFileToString(a.request);
  if (!receipt_text.ok()) return Fail(receipt_text.status()) + 1;
  if (!request_text.ok()) return Fail(request_text.status()) + 1;
  json receipt = json::parse(*receipt_text, nullptr, false);
  if (receipt.is_discarded()) {  // the header's base64url
    std::string t = *receipt_text;
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
    receipt = t;
  }
  json request = json::parse(*request_text, nullptr, false);
  if (request.is_discarded()) return Fail(InvalidArgument(a.request + ": not JSON")) + 1;
  auto res = Post(a.url, "/v1/receipts/verify", json{{"receipt", receipt}, {"request", request}}.dump(), a.api_key);
  if (!res.ok()) return Fail(res.status()) + 1;
  std::cout << res->second << std::endl;
  if (res->first != 200) return 2;
  json answer = json::parse(res->second, nullptr, false);
  return answer.is_object() && answer.value("result", "") == "equal" ? 0 : 1;
}

}  // namespace

void AddReceiptCommands(CLI::App& app, int* exit_code) {
  auto keygen_path = std::make_shared<std::string>();
  CLI::App* keygen = app.add_subcommand("receipt-keygen", "write a new Ed25519 receipt key (for serve --receipt-key)");
  keygen->add_option("file", *keygen_path, "where to write it (must not exist; written with mode 0600)")->required();
  keygen->callback([keygen_path, exit_code] {
    StatusOr<receipt::ReceiptSigner> s = receipt::ReceiptSigner::Generate(*keygen_path);
    if (!s.ok()) {
      *exit_code = Fail(s.status());
      return;
    }
    std::cout << "public key (base64url): " << s->public_key() << std::endl;
    *exit_code = 0;
  });

  auto args = std::make_shared<VerifyArgs>();
  CLI::App* verify = app.add_subcommand(
      "verify", "re-execute a request on a server and compare with its receipt (POST /v1/receipts/verify)");
  verify->add_option("receipt", args->receipt, "file: the receipt JSON or the tessera-receipt header value")
      ->required();
  verify->add_option("request", args->request, "file: the request body (chat or completions JSON)")->required();
  verify->add_option("--url", args->url, "the server, http://HOST[:PORT]")->capture_default_str();
  verify->add_option("--api-key", args->api_key, "API key (sent as 'authorization: Bearer KEY')");
  verify->callback([args, exit_code] { *exit_code = RunVerify(*args); });
}

}  // namespace tessera
