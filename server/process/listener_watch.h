// Whether this process's TCP listeners still accept connections.
//
// gRPC 1.51's listener stops accepting for good once accept() has failed
// with EMFILE (the open-file limit reached, even for a moment): connections
// then complete in the kernel and wait in the listening socket's accept
// queue, and clients time out while the process, its other ports and
// /metrics look alive. A listener that accepts empties its queue at once,
// so a queue that stays non-empty for a whole window means it has stopped.
#pragma once

#include <optional>
#include <vector>

#include "absl/time/time.h"

namespace performer::server {

// The connections waiting in a listening TCP socket's accept queue; -1 where
// `fd` is not a listening TCP socket.
int AcceptQueueLength(int fd);

// The listening TCP sockets of this process on a set of ports. Not
// thread-safe: one thread samples it.
class ListenerWatch {
 public:
  // Finds the listeners among this process's open descriptors and holds a
  // duplicate of each, so that a sample reads the socket itself whatever
  // becomes of the owner's descriptor number. Destroy the watch before the
  // owner closes its listeners: a duplicate keeps a socket listening.
  explicit ListenerWatch(const std::vector<int>& ports);
  ~ListenerWatch();
  ListenerWatch(const ListenerWatch&) = delete;
  ListenerWatch& operator=(const ListenerWatch&) = delete;

  // The listening sockets found (a port may have one per address family).
  int size() const { return static_cast<int>(listeners_.size()); }

  struct Stall {
    int port = 0;
    int queued = 0;  // connections waiting at the last sample
  };
  // Samples every listener at `now`; the first one whose accept queue has
  // not been empty at any sample of the last `window`, if any.
  std::optional<Stall> Sample(absl::Time now, absl::Duration window);

 private:
  struct Listener {
    int fd = -1;
    int port = 0;
    std::optional<absl::Time> queued_since;  // first of the non-empty samples in a row
  };
  std::vector<Listener> listeners_;
};

}  // namespace performer::server
