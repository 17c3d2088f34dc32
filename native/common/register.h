// The addon's four parts: each subsystem puts its own functions and classes on the module's exports
// (native/<subsystem>/register.cc), and module.cc calls the four. src/native.ts reads them back as
// one typed part per plane.
#pragma once
#include <napi.h>

#include <initializer_list>
#include <utility>

namespace leash {

using NativeFunction = Napi::Value (*)(const Napi::CallbackInfo&);

/** exports[name] = the function, for each pair. */
inline void SetFunctions(Napi::Env env, Napi::Object exports,
                         std::initializer_list<std::pair<const char*, NativeFunction>> functions) {
  for (const auto& [name, fn] : functions) exports.Set(name, Napi::Function::New(env, fn, name));
}

/** Credentials of a socket's peer, journald, sd_notify, memory release. */
void RegisterCommon(Napi::Env env, Napi::Object exports);
/** The transparent proxy: SO_ORIGINAL_DST, conntrack, nf_tables reads, the acceptor and the splice pump. */
void RegisterProxy(Napi::Env env, Napi::Object exports);
/** The fanotify watcher: its matcher, decision lines, the loop, and the namespaces agents make. */
void RegisterWatcher(Napi::Env env, Napi::Object exports);
/** The tools gate: the path walk and its cache, the JSON pre-check and the literal finder. */
void RegisterTools(Napi::Env env, Napi::Object exports);

}  // namespace leash
