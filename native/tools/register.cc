#include "register.h"

#include "gatejudge.h"
#include "jsonscan.h"
#include "literals.h"
#include "walkcache.h"
#include "walkpath.h"

namespace leash {

void RegisterTools(Napi::Env env, Napi::Object exports) {
  SetFunctions(env, exports, {{"walkPath", WalkPathJs}, {"createJsonScanner", CreateJsonScanner}});
  SetFunctions(env, exports, {{"createAnswerReader", CreateAnswerReader}});
  SetFunctions(env, exports, {{"createLiteralFinder", CreateLiteralFinder}, {"createGateJudge", CreateGateJudge}});
  InitWalkCache(env, exports);
}

}  // namespace leash
