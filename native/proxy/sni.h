// Internal to native/proxy: the TLS ClientHello's server_name, read from peeked bytes, for the acceptor's native
// verdict path. It follows src/dataplane/network/proxy/peek.ts (parseClientHello, normaliseHostname) step for step
// for the bytes it accepts; anything the JavaScript parser would answer otherwise than "a ClientHello with this
// name" is kOther here, and the connection goes to JavaScript, which parses it again and decides.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace leash {
namespace sni {

enum class Kind { kMore, kTls, kOther };

struct Hello {
  Kind kind = Kind::kOther;
  bool hasName = false;  // false: no server_name (the JavaScript `sni: null`)
  bool ech = false;      // an encrypted_client_hello extension is present
  std::string name;      // lower case, no trailing dot (normaliseHostname)
};

/** The peeked bytes as peekDestination would see them, as far as a ClientHello goes. */
Hello Parse(const uint8_t* b, size_t n);

/** normaliseHostname: false when `raw` is not a DNS name (or is all digits and dots). */
bool NormaliseHostname(const uint8_t* raw, size_t n, std::string* out);

}  // namespace sni
}  // namespace leash
