#include "server/process/open_file_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>

namespace performer::server {
namespace {

// fs.nr_open: the most a limit on open files may be (RLIM_INFINITY is
// refused); RLIM_INFINITY where it cannot be read.
rlim_t KernelOpenFileCeiling() {
  std::ifstream file("/proc/sys/fs/nr_open");
  uint64_t value = 0;
  if (file >> value && value > 0) return static_cast<rlim_t>(value);
  return RLIM_INFINITY;
}

}  // namespace

uint64_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  const rlim_t target = std::min(limit.rlim_max, KernelOpenFileCeiling());
  if (target > limit.rlim_cur) {
    rlimit raised = limit;
    raised.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace performer::server
