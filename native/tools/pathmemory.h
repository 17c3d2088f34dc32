// What the gate's native judge asks of the remembering walk (walkcache.h): whether a normalised path is one the
// walk remembers as giving itself, i.e. what `WalkCache.walk(path)` would answer now is `path` itself.
#pragma once

#include <string>

namespace leash {

struct PathMemory {
  /** True only when the walk remembers `norm` (absolute, normalised) as its own reading, the news applied first. */
  virtual bool Remembers(const std::string& norm) = 0;

 protected:
  ~PathMemory() = default;
};

}  // namespace leash
