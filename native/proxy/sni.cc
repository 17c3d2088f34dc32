// The ClientHello's server_name (see sni.h); each step names the peek.ts line it follows.
#include "sni.h"

#include <vector>

namespace leash {
namespace sni {

namespace {

constexpr int kExtEch = 0xfe0d;

Hello Other() { return Hello{}; }

Hello More() {
  Hello h;
  h.kind = Kind::kMore;
  return h;
}

bool LabelChar(uint8_t c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

// parseServerName: 1 = a name, 0 = no usable name (null), -1 = malformed (undefined).
int ServerName(const uint8_t* e, size_t n, Hello* h) {
  if (n < 2) return -1;
  size_t listEnd = 2 + ((static_cast<size_t>(e[0]) << 8) | e[1]);
  if (listEnd > n) return -1;
  size_t p = 2;
  bool have = false;
  while (p + 3 <= listEnd) {
    uint8_t t = e[p];
    size_t len = (static_cast<size_t>(e[p + 1]) << 8) | e[p + 2];
    p += 3;
    if (p + len > listEnd) return -1;
    if (t == 0) {
      if (have) return -1;
      if (!NormaliseHostname(e + p, len, &h->name)) return -1;
      have = true;
    }
    p += len;
  }
  h->hasName = have;
  return have ? 1 : 0;
}

// parseHelloBody
Hello Body(const uint8_t* b, size_t n) {
  size_t p = 34;
  if (p + 1 > n) return Other();
  p += 1 + b[p];
  if (p + 2 > n) return Other();
  p += 2 + ((static_cast<size_t>(b[p]) << 8) | b[p + 1]);
  if (p + 1 > n) return Other();
  p += 1 + b[p];
  Hello h;
  h.kind = Kind::kTls;
  if (p == n) return h;  // no extensions at all
  if (p + 2 > n) return Other();
  size_t extEnd = p + 2 + ((static_cast<size_t>(b[p]) << 8) | b[p + 1]);
  if (extEnd > n) return Other();
  p += 2;
  bool seen = false;
  while (p + 4 <= extEnd) {
    int type = (b[p] << 8) | b[p + 1];
    size_t len = (static_cast<size_t>(b[p + 2]) << 8) | b[p + 3];
    p += 4;
    if (p + len > extEnd) return Other();
    if (type == 0) {
      if (seen) return Other();
      seen = true;
      if (ServerName(b + p, len, &h) < 0) return Other();
    }
    if (type == kExtEch) h.ech = true;
    p += len;
  }
  return h;
}

}  // namespace

// HOST_RE: 1-253 characters; labels of [a-z0-9_], inner '-', at most 63; an optional final dot; then not all
// digits and dots. Upper case is folded first; any byte outside ASCII fails (toLowerCase of a Latin-1 character
// never yields one the expression accepts).
bool NormaliseHostname(const uint8_t* raw, size_t n, std::string* out) {
  if (n < 1 || n > 253) return false;
  out->assign(reinterpret_cast<const char*>(raw), n);
  for (char& ch : *out) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  const std::string& s = *out;
  size_t end = s.back() == '.' ? n - 1 : n;
  if (end == 0) return false;
  size_t i = 0;
  for (;;) {
    size_t start = i;
    while (i < end && s[i] != '.') {
      uint8_t c = static_cast<uint8_t>(s[i]);
      if (!LabelChar(c) && c != '-') return false;
      i++;
    }
    size_t len = i - start;
    if (len == 0 || len > 63) return false;
    if (!LabelChar(static_cast<uint8_t>(s[start])) || !LabelChar(static_cast<uint8_t>(s[i - 1]))) return false;
    if (i == end) break;
    i++;  // the dot
    if (i == end) return false;  // an empty label before the final dot
  }
  out->resize(end);
  bool digits = true;
  for (char ch : *out) {
    if (!(ch == '.' || (ch >= '0' && ch <= '9'))) {
      digits = false;
      break;
    }
  }
  return !digits;
}

// parseClientHello: handshake bytes reassembled from consecutive records up to the hello's declared length.
Hello Parse(const uint8_t* buf, size_t n) {
  if (n == 0) return More();
  if (buf[0] != 0x16) return Other();
  std::vector<uint8_t> hs;
  size_t off = 0;
  long need = -1;
  for (;;) {
    if (off + 5 > n) return More();
    uint8_t type = buf[off], major = buf[off + 1];
    size_t len = (static_cast<size_t>(buf[off + 3]) << 8) | buf[off + 4];
    if (type != 0x16 || major != 3) return Other();
    if (len == 0 || len > 16384 + 2048) return Other();
    size_t end = off + 5 + len;
    size_t avail = end < n ? end : n;
    if (avail > off + 5) hs.insert(hs.end(), buf + off + 5, buf + avail);
    if (need < 0 && hs.size() >= 4) {
      if (hs[0] != 0x01) return Other();
      need = 4 + ((static_cast<long>(hs[1]) << 16) | (hs[2] << 8) | hs[3]);
      if (need > 0x10000 + 4) return Other();
    }
    if (need >= 0 && hs.size() >= static_cast<size_t>(need)) return Body(hs.data() + 4, static_cast<size_t>(need) - 4);
    if (end > n) return More();
    off = end;
  }
}

}  // namespace sni
}  // namespace leash
