#include "server/process/thread_priority.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace performer::server {

absl::StatusOr<int> LowerOtherThreads(int nice, const std::string& keep) {
  if (nice < 1 || nice > 19) {
    return absl::InvalidArgumentError(absl::StrCat("nice ", nice, " is not from 1 to 19"));
  }
  std::error_code error;
  std::filesystem::directory_iterator tasks("/proc/self/task", error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("/proc/self/task cannot be listed: ", error.message()));
  }
  int lowered = 0;
  for (const std::filesystem::directory_entry& task : tasks) {
    int tid = 0;
    if (!absl::SimpleAtoi(task.path().filename().string(), &tid)) continue;
    std::string name;
    std::getline(std::ifstream(task.path() / "comm"), name);
    if (name == keep) continue;
    errno = 0;
    const int current = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (current == -1 && errno != 0) continue;  // the thread has ended
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(current + nice, 19)) != 0) {
      if (errno == ESRCH) continue;
      return absl::PermissionDeniedError(
          absl::StrCat("thread ", tid, " (", name, "): setpriority: ", std::strerror(errno)));
    }
    ++lowered;
  }
  return lowered;
}

}  // namespace performer::server
