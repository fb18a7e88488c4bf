#pragma once
// Milliseconds on the steady clock as one integer: what an atomic can hold for "when did
// this last happen" (last_db_contact_ms, a lease's renewal, a statement's start).

#include <chrono>
#include <cstdint>

namespace oncely::detail {

/// Milliseconds on the steady clock (its epoch is arbitrary: compare, never print).
inline std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace oncely::detail
