#include "register.h"

#include "journal.h"
#include "memory.h"
#include "notify.h"
#include "sockopt.h"

namespace leash {

void RegisterCommon(Napi::Env env, Napi::Object exports) {
  SetFunctions(env, exports, {{"peerCred", PeerCred}, {"releaseMemory", ReleaseMemory}});
  SetFunctions(env, exports, {{"journalSend", JournalSend}, {"sdNotify", SdNotify}});
}

}  // namespace leash
