// The addon's one entry point: each mechanism lives in its own file.
#include <napi.h>

#include "acceptor.h"
#include "conntrack.h"
#include "decisionline.h"
#include "fanotify.h"
#include "fsmatch.h"
#include "journal.h"
#include "jsonscan.h"
#include "literals.h"
#include "memory.h"
#include "mntns.h"
#include "netmatch.h"
#include "nftread.h"
#include "notify.h"
#include "sockopt.h"
#include "splice.h"
#include "walkcache.h"
#include "walkpath.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("originalDst", Napi::Function::New(env, leash::OriginalDst, "originalDst"));
  exports.Set("conntrackRequest", Napi::Function::New(env, leash::ConntrackRequest, "conntrackRequest"));
  exports.Set("conntrackDelete", Napi::Function::New(env, leash::ConntrackDelete, "conntrackDelete"));
  exports.Set("nftRead", Napi::Function::New(env, leash::NftRead, "nftRead"));
  exports.Set("peerCred", Napi::Function::New(env, leash::PeerCred, "peerCred"));
  exports.Set("releaseMemory", Napi::Function::New(env, leash::ReleaseMemory, "releaseMemory"));
  exports.Set("journalSend", Napi::Function::New(env, leash::JournalSend, "journalSend"));
  exports.Set("sdNotify", Napi::Function::New(env, leash::SdNotify, "sdNotify"));
  leash::InitSplice(env, exports);
  leash::InitAcceptor(env, exports);
  leash::RegisterNetMatch(env, exports);
  exports.Set("compileFsPolicy", Napi::Function::New(env, leash::CompileFsPolicy, "compileFsPolicy"));
  exports.Set("nativeMatch", Napi::Function::New(env, leash::NativeMatch, "nativeMatch"));
  exports.Set("nativeMatchBatch", Napi::Function::New(env, leash::NativeMatchBatch, "nativeMatchBatch"));
  exports.Set("formatDecisionLines", Napi::Function::New(env, leash::FormatDecisionLines, "formatDecisionLines"));
  leash::InitWatcher(env, exports);
  leash::InitMntns(env, exports);
  exports.Set("walkPath", Napi::Function::New(env, leash::WalkPathJs, "walkPath"));
  leash::InitWalkCache(env, exports);
  exports.Set("createJsonScanner", Napi::Function::New(env, leash::CreateJsonScanner, "createJsonScanner"));
  exports.Set("createLiteralFinder", Napi::Function::New(env, leash::CreateLiteralFinder, "createLiteralFinder"));
  return exports;
}

}  // namespace

NODE_API_MODULE(leash_native, Init)
