// Monotonic clock readings for the watcher's threads (loop, watchdog, JavaScript side).
#pragma once
#include <time.h>

#include <cstdint>

namespace leash {

/** CLOCK_MONOTONIC in milliseconds (the watchdog's heartbeats). */
inline int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

/** CLOCK_MONOTONIC in nanoseconds (the loop's spin, batches and exec-state window). */
inline int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace leash
