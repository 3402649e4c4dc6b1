// The scheduling priority of the process's threads.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace performer::server {

// Adds `nice` (1 to 19) to the nice value of every thread of this process
// but those named `keep` (the compute thread and the OpenMP team it
// started, which carry its name; server/engine/compute_thread.h). Threads
// started later inherit their creator's nice value, so what the lowered
// threads start (gRPC's, the HTTP listener's, the write threads) is lowered
// too. Where one CPU runs both the model's step and the message path, the
// step then is not preempted by each message's wake-up, and a stream's
// tokens wait while it runs, leaving in fewer, larger messages
// (docs/serving.md). Linux keeps a nice value per thread. Returns the
// number of threads lowered.
absl::StatusOr<int> LowerOtherThreads(int nice, const std::string& keep);

}  // namespace performer::server
