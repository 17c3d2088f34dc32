// The in-flight table and the standby's takeover: what keeps the fanotify group, and every
// event in it, alive while a watcher process dies.
//
// The kernel matches a permission response to a pending event by the event's descriptor
// NUMBER alone (fanotify_user.c: process_access_response walks the group's access list for
// event->fd == response.fd). An event read by a watcher that then dies stays pending for as
// long as anybody holds the group — and the standby does. So the active watcher records, for
// each permission event it has read and not yet answered, the opener's PID in a slot indexed
// by that number, in a memfd its standby maps too; the standby, once the active is gone,
// answers each recorded event (a subject's is denied: it was never judged; anyone else's is
// allowed) and then reads on. The active reads into the table's read area, so the event it was
// killed inside read(2) with is in the table too. Events the dead watcher had dequeued and that
// are in neither (a batch read's after the first) are answered by number, after the queue is
// drained, with a verdict from the processes still blocked in a permission wait (watcher-takeover
// in docs/filesystem.md). Owned by the Watcher; the loop thread writes it (and the kernel its read
// area), only a standby reads it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace leash {

class InflightTable {
 public:
  /** Event descriptor numbers beyond this are not recorded (answered like unrecorded ones at a takeover). */
  static constexpr uint32_t kSlots = 1 << 16;
  /**
   * The read area: the active watcher's read(2) buffer, in the table itself. The kernel writes each
   * event's metadata (descriptor number, PID, mask) there before read(2) returns, so an event the
   * active took out of the queue is in the table from that moment: a watcher killed inside read(2),
   * or before it recorded the event, leaves it here for its standby. It holds the last read only.
   * Its pages are populated and locked, so the kernel's copy into it cannot fault (a fault with the
   * reader's SIGKILL pending fails the copy, and the kernel then denies the event itself).
   */
  static constexpr size_t kAreaBytes = 64 * 1024;

  InflightTable() = default;
  InflightTable(const InflightTable&) = delete;
  InflightTable& operator=(const InflightTable&) = delete;
  ~InflightTable() { Close(); }

  /** A new table (memfd, sealed at its size). False with errno set. */
  bool Create();
  /** Maps the table of another watcher (`fd` is ours now). False with errno set. */
  bool Adopt(int fd);
  void Close();
  int fd() const { return fd_; }
  bool ok() const { return slots_ != nullptr; }
  /** The read area (kAreaBytes, aligned for fanotify_event_metadata), or null. */
  char* Area() const { return area_; }

  void Record(int evfd, int32_t pid, uint32_t mask) {
    if (!slots_ || evfd < 0 || static_cast<uint32_t>(evfd) >= kSlots) return;
    slots_[evfd].mask.store(mask, std::memory_order_relaxed);
    slots_[evfd].pid.store(pid, std::memory_order_release);
    if (evfd > hdr_->maxFd.load(std::memory_order_relaxed)) hdr_->maxFd.store(evfd, std::memory_order_relaxed);
  }
  void Clear(int evfd) {
    if (!slots_ || evfd < 0 || static_cast<uint32_t>(evfd) >= kSlots) return;
    slots_[evfd].pid.store(0, std::memory_order_release);
  }
  int32_t PidAt(int evfd) const { return slots_[evfd].pid.load(std::memory_order_acquire); }
  uint32_t MaskAt(int evfd) const { return slots_[evfd].mask.load(std::memory_order_relaxed); }
  /** The PID of the watcher reading the group (0: none recorded). */
  int32_t Owner() const { return hdr_ ? hdr_->owner.load(std::memory_order_acquire) : 0; }
  void SetOwner(int32_t pid) {
    if (hdr_) hdr_->owner.store(pid, std::memory_order_release);
  }
  /**
   * The owner `dead` has exited: true when this process (`self`) is the owner now, false with `*now` set to the
   * owner another standby made itself first.
   */
  bool Claim(int32_t dead, int32_t self, int32_t* now) {
    int32_t expected = dead;
    if (hdr_->owner.compare_exchange_strong(expected, self, std::memory_order_acq_rel)) return true;
    *now = expected;
    return expected == self;
  }
  /** The highest event descriptor number recorded since the table was made or last Reset. */
  int MaxFd() const { return slots_ ? hdr_->maxFd.load(std::memory_order_relaxed) : 0; }
  /**
   * The end of a takeover, when none of the dead watcher's events is left pending (their slots are
   * clear): the read area cleared and the high-water mark lowered to the highest slot still recorded
   * (an event of this watcher's own still unanswered), 0 when none is. Without it the mark would keep
   * the numbers of the events drained above the fence, and each takeover's fence would start where
   * the last one ended, until it took every descriptor the process may have (RLIMIT_NOFILE).
   */
  void Settle();

 private:
  struct Header {
    uint32_t magic;
    uint32_t slots;
    std::atomic<int32_t> maxFd;
    // The PID of the watcher reading the group: set by the active that made the table, claimed by the one standby
    // that takes over when it dies (compare-and-swap), so that of several standbys exactly one reads on.
    std::atomic<int32_t> owner;
  };
  struct Slot {
    std::atomic<int32_t> pid;
    std::atomic<uint32_t> mask;
  };
  static constexpr uint32_t kMagic = 0x4c534833;  // "LSH3": with the read area and the owner
  static size_t SlotBytes() { return sizeof(Header) + sizeof(Slot) * kSlots; }
  static size_t Bytes() { return SlotBytes() + kAreaBytes; }

  int fd_ = -1;
  void* map_ = nullptr;
  Header* hdr_ = nullptr;
  Slot* slots_ = nullptr;
  char* area_ = nullptr;
};

/** What a takeover answered, for the decision log (drained by JavaScript: takeoverRecords()). */
struct TakeoverRecord {
  int32_t pid;
  uint32_t uid;
  bool exec;
  bool allow;
  bool recorded;  // false: dequeued by the dead watcher but never recorded (the verdict from the blocked processes)
};

}  // namespace leash
