// The process's limit on open files.
#pragma once

#include <cstdint>

namespace performer::server {

// Raises the soft limit on open files to the hard limit (at most the
// kernel's fs.nr_open), as far as this process may: every connection is a
// descriptor, and gRPC 1.51's listener stops for good once it has hit the
// limit (process/listener_watch.h). The soft limit in force afterwards.
uint64_t RaiseOpenFileLimit();

}  // namespace performer::server
