// The literal finder of literals.cc (one pass over a buffer for short ASCII literals, ASCII letters without case),
// shared with the gate's answer reader (jsonscan.cc).
#pragma once
#include <napi.h>

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace leash {
namespace literals {

constexpr size_t kMaxLiterals = 256;
constexpr size_t kMaxLiteral = 64;

inline uint8_t Lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? static_cast<uint8_t>(c | 0x20) : c; }

struct Finder {
  std::bitset<65536> pairs;
  // Literals grouped by their first byte (lower case), stored lower case.
  std::array<std::vector<std::string>, 256> byFirst;

  bool Has(const uint8_t* b, size_t n) const {
    if (n < 2) return false;
    uint8_t prev = Lower(b[0]);
    for (size_t i = 1; i < n; i++) {
      const uint8_t cur = Lower(b[i]);
      if (pairs.test((static_cast<size_t>(prev) << 8) | cur)) {
        const size_t start = i - 1;
        for (const std::string& lit : byFirst[prev]) {
          const size_t len = lit.size();
          if (start + len > n || static_cast<uint8_t>(lit[1]) != cur) continue;
          size_t k = 2;
          while (k < len && Lower(b[start + k]) == static_cast<uint8_t>(lit[k])) k++;
          if (k == len) return true;
        }
      }
      prev = cur;
    }
    return false;
  }
};

// Fills `f` from a JavaScript array of 1 to 256 ASCII strings of 2 to 64 bytes; false (a JavaScript error thrown,
// prefixed with `who`) when it is not one.
bool ReadLiterals(Napi::Env env, Napi::Value v, const char* who, Finder* f);

}  // namespace literals
}  // namespace leash
