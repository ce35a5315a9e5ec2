// TokenConstraint: the per-request hook through which constrained decoding
// (structured outputs: JSON Schema, regex, grammar) reaches the engine loop.
// The scheduler and engine see only this opaque interface; what the
// constraint is (structured/ compiles it) is none of their business.
//
// The engine loop makes one TokenMatcher per choice (sequence) and, before
// each sampling of that sequence, asks for the allowed-token bitmask; the
// sampler masks disallowed logits to -inf before any other processing. After
// sampling it feeds the token back with AcceptToken (EOS / stop tokens are
// not fed: they end the sequence). Constrained sequences do not speculate.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"

namespace tessera {

class TokenMatcher {
 public:
  virtual ~TokenMatcher() = default;
  // Bit t of mask[t / 32] set <=> token t may come next. Overwrites every
  // word of `mask` (ceil(vocab_size / 32) words). End-of-sequence tokens are
  // not set here: the caller allows them when CanEnd(). May run on a thread
  // other than the loop's, never concurrently with another call on this matcher.
  // Bounded in time (docs/architecture.md, "Time-bounded steps"): a matcher
  // that went over its budget returns INVALID_ARGUMENT saying why, now and on
  // every later call, and the caller ends the request with that error.
  virtual Status FillNextTokenMask(std::span<uint32_t> mask) = 0;
  // Advances by a sampled token; false if the constraint does not allow it
  // (the state is then unchanged).
  virtual bool AcceptToken(int32_t token) = 0;
  // The output so far is complete (EOS may come next).
  virtual bool CanEnd() const = 0;
  // Complete and nothing may follow: only EOS may come next.
  virtual bool IsComplete() const = 0;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // A matcher at the start of the output. Thread-safe.
  virtual std::unique_ptr<TokenMatcher> NewMatcher() const = 0;
};

}  // namespace tessera
