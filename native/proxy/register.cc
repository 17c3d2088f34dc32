#include "register.h"

#include "acceptor.h"
#include "conntrack.h"
#include "fastpath.h"
#include "netmatch.h"
#include "nftread.h"
#include "sockopt.h"
#include "splice.h"

namespace leash {

void RegisterProxy(Napi::Env env, Napi::Object exports) {
  SetFunctions(env, exports, {{"originalDst", OriginalDst}, {"setMark", SetMark}, {"nftRead", NftRead}});
  SetFunctions(env, exports, {{"conntrackRequest", ConntrackRequest}, {"conntrackDelete", ConntrackDelete}});
  InitSplice(env, exports);
  InitAcceptor(env, exports);
  RegisterNetMatch(env, exports);
  RegisterFastPathTests(env, exports);
}

}  // namespace leash
