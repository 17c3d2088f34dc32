// Namespaces an agent makes (issue #14): the mount notification that tells the watcher a mount
// namespace it found has a new mount (FAN_MARK_MNTNS, Linux 6.14+), the kill of a subject process
// found in a user namespace of its own (by pidfd, checked against the namespace it was found in),
// and the probe of whether this kernel lets a BPF LSM program load (`leash status`).
#pragma once
#include <napi.h>

namespace leash {

/** exports.MountWatch, exports.nsKill, exports.probeBpfLsm. */
void InitMntns(Napi::Env env, Napi::Object exports);

}  // namespace leash
