// JSON-lines helpers shared by the native writers of decision-log lines: the watcher's (native/watcher/
// decisionline.h) and the proxy's native verdict path (native/proxy/acceptor_lines.cc). Each must write exactly what
// src/log/decisions.ts writes: ts as toISOString, refs as newRef, strings as JSON.stringify.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace leash {

/** `new Date(ms).toISOString()`, with the date and time up to the second cached. */
class IsoTime {
 public:
  void Append(std::string* out, int64_t ms);

 private:
  int64_t sec_ = INT64_MIN;
  char prefix_[32];  // "YYYY-MM-DDTHH:MM:SS." (or "+YYYYYY-..." past year 9999)
  size_t len_ = 0;
};

/** The decision log's refs: 8 base32 characters from 40 random bits, drawn from a getrandom pool. */
class RefPool {
 public:
  /** Ensures `n` refs can be drawn without a syscall (call outside any lock). */
  void Reserve(size_t n);
  /** Writes 8 characters. */
  void Next(char out[8]);

 private:
  unsigned char pool_[5 * 820];
  size_t at_ = sizeof pool_;
};

/**
 * Appends `s` (raw bytes, a path from readlink) as a JSON string, exactly as JSON.stringify
 * writes the JavaScript string V8 makes of those bytes: decoded as UTF-8 with each maximal
 * invalid subpart replaced by U+FFFD (the WHATWG decoder), then `"` and `\` escaped, control
 * characters as \b \t \n \f \r or \u00xx, nothing else escaped.
 */
void AppendJsonString(std::string* out, const char* s, size_t n);

}  // namespace leash
