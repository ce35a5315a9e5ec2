#include "common/sha256.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstdlib>

namespace tessera {
namespace {

// Fetched once: an implicit fetch per digest (EVP_sha256()) costs a lookup in
// OpenSSL 3's provider tables on every call.
const EVP_MD* Sha256Md() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md == nullptr) std::abort();  // libcrypto without SHA-256: nothing can work
  return md;
}

EVP_MD_CTX* Ctx(void* p) { return static_cast<EVP_MD_CTX*>(p); }

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) std::abort();
  Reset();
}

Sha256::~Sha256() { EVP_MD_CTX_free(Ctx(ctx_)); }

void Sha256::Reset() {
  if (EVP_DigestInit_ex2(Ctx(ctx_), Sha256Md(), nullptr) != 1) std::abort();
}

void Sha256::Update(const void* data, size_t bytes) {
  if (bytes != 0 && EVP_DigestUpdate(Ctx(ctx_), data, bytes) != 1) std::abort();
}

Sha256Digest Sha256::Finish() {
  Sha256Digest d{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(Ctx(ctx_), d.data(), &n) != 1 || n != d.size()) std::abort();
  return d;
}

Sha256Digest Sha256Of(std::string_view data) {
  thread_local Sha256 h;
  h.Reset();
  h.Update(data);
  return h.Finish();
}

Sha256Digest HmacSha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) std::abort();
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  if (ctx == nullptr) std::abort();
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                               OSSL_PARAM_construct_end()};
  // An empty key is valid HMAC; OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const auto* k = key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  bool ok = EVP_MAC_init(ctx, k, key.size(), params) == 1;
  for (std::string_view p : parts) {
    if (ok && !p.empty()) ok = EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  }
  Sha256Digest d{};
  size_t n = 0;
  ok = ok && EVP_MAC_final(ctx, d.data(), &n, d.size()) == 1 && n == d.size();
  EVP_MAC_CTX_free(ctx);
  if (!ok) std::abort();
  return d;
}

bool DigestsEqualConstTime(const Sha256Digest& a, const Sha256Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string ToHex(const Sha256Digest& d) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : d) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

}  // namespace tessera
