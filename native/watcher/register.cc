#include "register.h"

#include "decisionline.h"
#include "fanotify.h"
#include "fsmatch.h"
#include "mntns.h"

namespace leash {

void RegisterWatcher(Napi::Env env, Napi::Object exports) {
  SetFunctions(env, exports, {{"compileFsPolicy", CompileFsPolicy}, {"nativeMatch", NativeMatch}});
  SetFunctions(env, exports, {{"nativeMatchBatch", NativeMatchBatch}, {"formatDecisionLines", FormatDecisionLines}});
  InitWatcher(env, exports);
  InitMntns(env, exports);
}

}  // namespace leash
