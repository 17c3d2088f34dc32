// Paths: the name a subject's event is judged on. Owns the watcher's view of its own mounts
// (listmount / mountinfo), the descriptors of the marked filesystems that events through
// another mount namespace are renamed through, and the loop's path buffer.
// Mark() (JavaScript thread) adds mounts; everything else is the read loop's.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace leash {

/** What the statx PathOf makes anyway says about the file behind the event (no syscall more). */
struct FileFacts {
  uint64_t dev = 0;  // makedev(major, minor)
  uint64_t ino = 0;
  uint32_t nlink = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t mode = 0;  // 0: not known
};

class PathResolver {
 public:
  PathResolver();
  PathResolver(const PathResolver&) = delete;
  PathResolver& operator=(const PathResolver&) = delete;
  ~PathResolver() { Close(); }

  /**
   * Keeps `fd` (opened through one of our mounts of filesystem `dev`, not O_PATH) to rename
   * events that arrive through other namespaces' mounts; closes it if `dev` has one already.
   */
  void AddMount(dev_t dev, int fd);

  /**
   * Filesystem `dev` was mounted by an agent in a namespace of its own (it is in no mount of ours):
   * the names of its files are the agent's to choose, so PathOf says so (agent_fs()).
   */
  void AddAgentDev(dev_t dev);

  /** The last PathOf named a file on a filesystem an agent mounted (AddAgentDev). */
  bool agent_fs() const { return agentFs_; }

  /**
   * Names the file behind an event's descriptor, into path() (loop thread). Through a mount of
   * another namespace the file is re-opened by handle through our own mount of its filesystem.
   * False (and an empty path) when it cannot be named: the event is engine_error.
   */
  bool PathOf(int fd);

  /** The file behind the last PathOf's descriptor (mode 0 when its statx failed). */
  const FileFacts& facts() const { return facts_; }
  /** false: statx asks for the mount ID alone and facts() stays unknown (measurement only). */
  void set_facts(bool on) { wantFacts_ = on; }

  /** The last name PathOf found (empty after a failure or Clear()). */
  std::string_view path() const { return std::string_view(path_, pathLen_); }
  void Clear() { pathLen_ = 0; }

  /** Closes every descriptor it holds. */
  void Close();

  /** Events named through another namespace's mount: Watcher.stats().foreignMount. */
  uint64_t foreign_mounts() const { return foreignMount_.load(std::memory_order_relaxed); }

 private:
  bool ReadLinkFd(int fd);
  bool OurMount(uint64_t id, bool unique);
  bool ListOurMounts();

  FileFacts facts_;
  bool wantFacts_ = true;
  char path_[PATH_MAX + 1];
  size_t pathLen_ = 0;
  int procFd_ = -1;
  std::mutex mountMu_;
  std::unordered_map<dev_t, int> mountFds_;
  std::unordered_set<dev_t> agentDevs_;
  bool agentFs_ = false;
  int mountinfoFd_ = -1;
  std::unordered_set<uint64_t> ourMounts_;
  std::unordered_set<uint64_t> ourUnique_;
  int64_t lastListNs_ = 0;
  bool listmountOk_ = true;
  std::atomic<uint64_t> foreignMount_{0};
};

}  // namespace leash
