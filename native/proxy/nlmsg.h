// One netfilter netlink request (nlmsghdr + nfgenmsg + attributes), built in a buffer; shared by the conntrack
// delete (conntrack.cc) and the nf_tables reads (nftread.cc).
#pragma once
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace leash {

class NlMsg {
 public:
  NlMsg(uint16_t type, uint16_t flags, uint8_t family) {
    buf_.resize(NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg)));
    auto* h = reinterpret_cast<nlmsghdr*>(buf_.data());
    h->nlmsg_type = type;
    h->nlmsg_flags = flags;
    auto* g = reinterpret_cast<nfgenmsg*>(buf_.data() + NLMSG_HDRLEN);
    g->nfgen_family = family;
    g->version = NFNETLINK_V0;
    g->res_id = 0;
  }
  void Attr(uint16_t type, const void* data, size_t len) {
    size_t at = buf_.size();
    buf_.resize(at + NLA_ALIGN(NLA_HDRLEN + len));
    auto* a = reinterpret_cast<nlattr*>(buf_.data() + at);
    a->nla_type = type;
    a->nla_len = static_cast<uint16_t>(NLA_HDRLEN + len);
    std::memcpy(buf_.data() + at + NLA_HDRLEN, data, len);
  }
  /** A NUL-terminated string attribute, as nf_tables expects names. */
  void Str(uint16_t type, const std::string& s) { Attr(type, s.c_str(), s.size() + 1); }
  size_t Open(uint16_t type) {
    size_t at = buf_.size();
    buf_.resize(at + NLA_HDRLEN);
    reinterpret_cast<nlattr*>(buf_.data() + at)->nla_type = type | NLA_F_NESTED;
    return at;
  }
  void Close(size_t at) { reinterpret_cast<nlattr*>(buf_.data() + at)->nla_len = buf_.size() - at; }
  std::vector<char>& Done() {
    reinterpret_cast<nlmsghdr*>(buf_.data())->nlmsg_len = buf_.size();
    return buf_;
  }

 private:
  std::vector<char> buf_;
};

}  // namespace leash
