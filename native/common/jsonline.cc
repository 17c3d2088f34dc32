// JSON-lines helpers shared by the native decision-line writers (see jsonline.h).
#include "jsonline.h"

#include <sys/random.h>

#include <cerrno>
#include <climits>
#include <cstdio>

namespace leash {

namespace {

const char kB32[] = "abcdefghijklmnopqrstuvwxyz234567";
const char kHex[] = "0123456789abcdef";

void Put2(char* p, int v) {
  p[0] = static_cast<char>('0' + v / 10);
  p[1] = static_cast<char>('0' + v % 10);
}

// Days since 1970-01-01 -> proleptic Gregorian y/m/d (H. Hinnant's civil_from_days).
void CivilFromDays(int64_t z, int64_t* y, int* m, int* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  *d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  *m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2 ? 1 : 0);
}

// The WHATWG UTF-8 decoder's view of one sequence at s[i]: its length if it is a valid
// sequence, else 0 with *skip = the bytes of its maximal invalid subpart (each one U+FFFD).
size_t Utf8Seq(const unsigned char* s, size_t n, size_t i, size_t* skip) {
  unsigned char b = s[i];
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    *skip = 1;  // 0x80-0xC1, 0xF5-0xFF: never a lead byte
    return 0;
  }
  for (size_t k = 1; k <= need; k++) {
    if (i + k >= n) {
      *skip = k;  // truncated at the end: the whole prefix is one U+FFFD
      return 0;
    }
    unsigned char c = s[i + k];
    if (c < lo || c > hi) {
      *skip = k;  // the offending byte is decoded afresh
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

}  // namespace

void IsoTime::Append(std::string* out, int64_t ms) {
  int64_t sec = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
  int msPart = static_cast<int>(ms - sec * 1000);
  if (sec != sec_) {
    int64_t days = sec >= 0 ? sec / 86400 : -((-sec + 86399) / 86400);
    int64_t sod = sec - days * 86400;
    int64_t y;
    int m, d;
    CivilFromDays(days, &y, &m, &d);
    char* p = prefix_;
    if (y >= 0 && y <= 9999) {
      p[0] = static_cast<char>('0' + y / 1000);
      p[1] = static_cast<char>('0' + y / 100 % 10);
      p[2] = static_cast<char>('0' + y / 10 % 10);
      p[3] = static_cast<char>('0' + y % 10);
      p += 4;
    } else {
      // toISOString's expanded years: a sign and six digits.
      p += snprintf(p, 9, "%c%06lld", y < 0 ? '-' : '+', static_cast<long long>(y < 0 ? -y : y));
    }
    *p++ = '-';
    Put2(p, m);
    p[2] = '-';
    Put2(p + 3, d);
    p[5] = 'T';
    Put2(p + 6, static_cast<int>(sod / 3600));
    p[8] = ':';
    Put2(p + 9, static_cast<int>(sod / 60 % 60));
    p[11] = ':';
    Put2(p + 12, static_cast<int>(sod % 60));
    p[14] = '.';
    len_ = static_cast<size_t>(p + 15 - prefix_);
    sec_ = sec;
  }
  out->append(prefix_, len_);
  char t[4] = {static_cast<char>('0' + msPart / 100), static_cast<char>('0' + msPart / 10 % 10),
               static_cast<char>('0' + msPart % 10), 'Z'};
  out->append(t, 4);
}

void RefPool::Reserve(size_t n) {
  if (at_ + 5 * n <= sizeof pool_) return;
  size_t got = 0;
  while (got < sizeof pool_) {
    ssize_t r = getrandom(pool_ + got, sizeof pool_ - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  at_ = 0;
}

void RefPool::Next(char out[8]) {
  Reserve(1);
  uint64_t v = 0;
  for (int i = 0; i < 5; i++) v = (v << 8) | pool_[at_ + static_cast<size_t>(i)];
  at_ += 5;
  for (int i = 7; i >= 0; i--) {
    out[i] = kB32[v & 31];
    v >>= 5;
  }
}

void AppendJsonString(std::string* out, const char* str, size_t n) {
  const auto* s = reinterpret_cast<const unsigned char*>(str);
  out->push_back('"');
  size_t i = 0;
  size_t run = 0;  // start of the bytes to copy as they are
  while (i < n) {
    unsigned char b = s[i];
    if (b >= 0x20 && b < 0x80 && b != '"' && b != '\\') {
      i++;
      continue;
    }
    if (b >= 0x80) {
      size_t skip = 0;
      size_t len = Utf8Seq(s, n, i, &skip);
      if (len) {
        i += len;  // valid UTF-8 is written back as the same bytes
        continue;
      }
      out->append(str + run, i - run);
      out->append("\xEF\xBF\xBD", 3);  // U+FFFD
      i += skip;
      run = i;
      continue;
    }
    out->append(str + run, i - run);
    switch (b) {
      case '"': out->append("\\\"", 2); break;
      case '\\': out->append("\\\\", 2); break;
      case '\b': out->append("\\b", 2); break;
      case '\t': out->append("\\t", 2); break;
      case '\n': out->append("\\n", 2); break;
      case '\f': out->append("\\f", 2); break;
      case '\r': out->append("\\r", 2); break;
      default: {
        char u[6] = {'\\', 'u', '0', '0', kHex[b >> 4], kHex[b & 15]};
        out->append(u, 6);
      }
    }
    i++;
    run = i;
  }
  out->append(str + run, n - run);
  out->push_back('"');
}

}  // namespace leash
