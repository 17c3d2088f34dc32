// The native twin of the engine's filesystem and command matchers. The TypeScript
// engine (src/engine) is the definition; this file must give identical verdicts,
// which tests/native/matcher-diff.test.ts checks on a fixed corpus and on generated
// cases. It exists because the fanotify read loop may never wait for JavaScript.
#pragma once
#include <napi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace leash {

/** Reason codes shared with src/engine/types.ts (same order as kReasonNames). */
enum class Reason : uint8_t { kAllowEntry, kModeAllow, kDenyEntry, kNotAllowed, kNoPolicy, kEngineError };

/** The snake_case name of a reason, as the engine and the decision log spell it. */
const char* ReasonName(Reason r);

/** One verdict. `rule` points into the compiled policy (or is null for a mode default). */
struct MatchVerdict {
  bool allow;
  Reason reason;
  const std::string* rule;
};

/** A path entry list, indexed so a lookup costs O(path depth) plus the globs. */
class PathList {
 public:
  void Build(const std::vector<std::string>& entries);
  /** Index of the first entry (in list order) that matches the normalised path, or -1. */
  int Find(std::string_view normPath) const;
  const std::string& Text(int i) const { return texts_[i]; }
  /** Longest non-glob prefix of every entry, normalised (what marks must cover). */
  std::vector<std::string> Roots() const;

 private:
  struct Glob {
    int index;
    std::string pattern;  // normalised
    std::string literal;  // longest literal directory prefix, a prefilter
  };
  std::vector<std::string> texts_;
  std::unordered_map<std::string, int> plain_;  // normalised exact/prefix entry -> first index
  std::vector<Glob> globs_;
};

/** A command entry list: absolute entries by normalised path, others by basename. */
class CommandList {
 public:
  void Build(const std::vector<std::string>& entries);
  int Find(std::string_view normBinary, std::string_view base) const;
  const std::string& Text(int i) const { return texts_[i]; }
  std::vector<std::string> Roots() const;

 private:
  std::vector<std::string> texts_;
  std::unordered_map<std::string, int> paths_;
  std::unordered_map<std::string, int> names_;
};

/** A subject's compiled filesystem + commands policy; immutable once built. */
struct FsPolicy {
  bool failOpen = false;
  bool fsWhitelist = true;
  bool cmdWhitelist = true;
  PathList fsAllow, fsDeny;
  CommandList cmdAllow, cmdDeny;
};

/** Lexical normalisation: collapses `//` and `.`, resolves `..` (never above `/`), drops a trailing `/`. */
std::string NormalizePath(std::string_view p);

/** Judges an open of `path` (null policy -> no_policy under fail mode). */
MatchVerdict MatchPathPolicy(const FsPolicy* p, bool failOpen, std::string_view path);
/** Judges an exec of `binary`. */
MatchVerdict MatchCommandPolicy(const FsPolicy* p, bool failOpen, std::string_view binary);

/**
 * Builds an FsPolicy from a JS PolicyInput-shaped object ({fail_mode, filesystem, commands}).
 * Returns null and throws a JS TypeError on a malformed object.
 */
std::shared_ptr<FsPolicy> FsPolicyFromJs(Napi::Env env, Napi::Value v);

/** compileFsPolicy(policy) -> opaque handle for nativeMatch. */
Napi::Value CompileFsPolicy(const Napi::CallbackInfo& info);
/** nativeMatch(handle|null, 'filesystem'|'commands', subject, failMode?) -> {action, reason, rule}. */
Napi::Value NativeMatch(const Napi::CallbackInfo& info);
/** nativeMatchBatch(handle|null, kinds[], subjects[], failMode?) -> packed verdict strings (fast diff testing). */
Napi::Value NativeMatchBatch(const Napi::CallbackInfo& info);

}  // namespace leash
