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
enum class Reason : uint8_t {
  kAllowEntry,
  kModeAllow,
  kDenyEntry,
  kNotAllowed,
  kNoPolicy,
  kEngineError,
  kInterpreterOf,
  kInterpreterDirect,
  // The watcher's own (not the engine's): a multi-linked file whose names cannot all be judged (hardlinks.h).
  kHardlinked,
  /** A file on a filesystem the agent mounted in a namespace of its own, under a whitelist (never matched). */
  kNamespaceDenied,
  // An ask entry (the engine's ask_entry), and how a held ask ended without an approver's answer (hold.h).
  kAskEntry,
  kApprovalLimit,
  kApprovalUnavailable,
  kApprovalTimeout,
  kApprovalCancelled,
  /** An event with pid 0: its process is outside the watcher's PID namespace, allowed unjudged (never a line). */
  kForeignPidNamespace,
  kLast = kForeignPidNamespace
};

/** The snake_case name of a reason, as the engine and the decision log spell it. */
const char* ReasonName(Reason r);

/** One verdict. `rule` points into the compiled policy (or is null for a mode default). */
struct MatchVerdict {
  bool allow;
  Reason reason;
  const std::string* rule;
};

/** A glob compiled from a normalised entry into the engine's tokens (parseGlob), over code points. */
struct GlobClass {
  bool negate;
  std::vector<std::pair<char32_t, char32_t>> ranges;
};
struct GlobTok {
  enum Kind : uint8_t { kLit, kStar, kAny, kQuestion, kClass, kGlobstar } kind;
  char32_t c;
  int cls;
};
struct CompiledGlob {
  std::string rule;
  std::vector<GlobTok> toks;
  std::vector<GlobClass> classes;
};

/**
 * engine/path.ts matchGlob: true when the glob covers `path` (normalised, as code points) or an ancestor of it.
 * The gate's native judge runs rules over operations with it too (native/tools/opsjudge_core.h).
 */
bool GlobCovers(const CompiledGlob& g, const std::u32string& path);

/**
 * A path entry list with the engine's PathIndex semantics: plain entries cover the
 * path and everything beneath; globs are tested when the subject passes through their
 * literal directory prefix; the deepest match wins, a glob over a plain entry at the
 * same prefix. Inert entries (relative, `~`, empty, NUL, a bad class) are left out.
 */
class PathList {
 public:
  /** Adds one entry (inert ones are skipped, as the engine's PathIndex.add does). */
  void Add(const std::string& entry);
  /** The entry text that decides for a normalised path, or null. */
  const std::string* Find(std::string_view normPath) const;

  /** A plain (non-glob) entry: its normalised path and its text. */
  struct Literal {
    std::string norm;
    const std::string* rule;
  };
  /** The plain entries, in order (the names a hard-link check can stat: hardlinks.h). */
  const std::vector<Literal>& literals() const { return literals_; }

 private:
  std::vector<Literal> literals_;
  struct Node {
    const std::string* rule = nullptr;
    std::vector<CompiledGlob> globs;
  };
  std::vector<std::unique_ptr<std::string>> texts_;
  const std::string* rootRule_ = nullptr;
  std::vector<CompiledGlob> rootGlobs_;
  std::unordered_map<std::string, Node> nodes_;
};

/** A command entry list: absolute entries by normalised path (preferred), others by basename. */
class CommandList {
 public:
  /** Adds one entry (inert ones are skipped, as the engine's CommandIndex.add does). */
  void Add(const std::string& entry);
  /** The entry text that decides for a normalised binary path or bare name, or null. */
  const std::string* Find(std::string_view normBinary) const;
  /** The absolute entries: normalised path -> entry text (the names a hard-link check can stat). */
  const std::unordered_map<std::string, std::string>& paths() const { return paths_; }

 private:
  std::unordered_map<std::string, std::string> paths_;
  std::unordered_map<std::string, std::string> names_;
};

/** A subject's compiled filesystem + commands policy; immutable once built. */
struct FsPolicy {
  bool failOpen = false;
  bool fsWhitelist = true;
  bool cmdWhitelist = true;
  PathList fsAllow, fsDeny;
  CommandList cmdAllow, cmdDeny;
  /** commands.interpreters: absolute paths only (a basename would imply any file of that name). */
  CommandList cmdInterpreters;
  bool hasInterpreters = false;
  /** The ask entries (hold.h AskOf): what the watcher holds for an approver instead of answering. */
  PathList fsAsk;
  CommandList cmdAsk;
  bool hasAsk = false;
  /** Shadow mode: the watcher answers allow where this policy denies, and logs would_block. */
  bool shadow = false;
};

/**
 * Lexical normalisation: collapses `//` and `.`, resolves `..` (never above `/`), drops a
 * trailing `/`. Returns false for a path that is not absolute (the engine's null).
 */
bool NormalizePath(std::string_view p, std::string* out);

/** Judges an open of `path` (null policy -> no_policy under fail mode). */
MatchVerdict MatchPathPolicy(const FsPolicy* p, bool failOpen, std::string_view path);
/**
 * Judges an exec of `binary`. `asInterpreter`: this exec is the kernel loading the interpreter
 * of a program whose own exec was allowed (the engine's `interpreterOf`). In whitelist mode an
 * entry of commands.interpreters is then allowed (`interpreter_of`) and otherwise, run directly,
 * blocked (`interpreter_direct`); deny entries and blacklist mode are as for any exec.
 */
MatchVerdict MatchCommandPolicy(const FsPolicy* p, bool failOpen, std::string_view binary,
                                bool asInterpreter = false);

/**
 * Builds an FsPolicy from a JS PolicyInput-shaped object ({fail_mode, filesystem, commands}).
 * Returns null and throws a JS TypeError on a malformed object.
 */
std::shared_ptr<FsPolicy> FsPolicyFromJs(Napi::Env env, Napi::Value v);

/** compileFsPolicy(policy) -> opaque handle for nativeMatch. */
Napi::Value CompileFsPolicy(const Napi::CallbackInfo& info);
/** nativeMatch(handle|null, 'filesystem'|'commands'|'interpreter', subject, failMode?) -> {action, reason, rule}. */
Napi::Value NativeMatch(const Napi::CallbackInfo& info);
/** nativeMatchBatch(handle|null, kinds[], subjects[], failMode?) -> packed verdict strings (fast diff testing). */
Napi::Value NativeMatchBatch(const Napi::CallbackInfo& info);

}  // namespace leash
