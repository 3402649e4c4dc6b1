// Re-reads credential files while the server runs: all of them on SIGHUP
// (ReloadAll), and those whose files changed (modification time, size,
// inode: a Kubernetes Secret update swaps a symlink) on a timer. A reload
// that fails keeps the credentials in force; each outcome is logged and
// reported to the observer. Nothing here touches open connections or
// running streams.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/security/security_observer.h"

namespace performer::server {

class CredentialReloader {
 public:
  struct Credentials {
    std::string name;                      // "auth_tokens", "metrics_token", "tls"
    std::vector<std::string> paths;        // the files it is read from
    std::function<absl::Status()> reload;  // re-reads them; an error keeps the old
  };

  explicit CredentialReloader(SecurityObserver* observer) : observer_(observer) {}
  ~CredentialReloader();  // stops polling
  CredentialReloader(const CredentialReloader&) = delete;
  CredentialReloader& operator=(const CredentialReloader&) = delete;

  // Before StartPolling. Notes the files' current state.
  void Add(Credentials credentials);
  bool empty() const { return entries_.empty(); }

  // Reloads every credential; `trigger` ("SIGHUP") goes into the log.
  void ReloadAll(const std::string& trigger);
  // Reloads the credentials whose files changed since they were last read.
  void ReloadChanged();
  // Calls ReloadChanged every `interval` on a thread of its own.
  void StartPolling(absl::Duration interval);

 private:
  struct Stamp {
    bool exists = false;
    ino_t inode = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    bool operator==(const Stamp& o) const {
      return exists == o.exists && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns &&
             ctime_ns == o.ctime_ns;
    }
  };
  struct Entry {
    Credentials credentials;
    std::vector<Stamp> stamps;
  };
  static std::vector<Stamp> StampsOf(const std::vector<std::string>& paths);
  void ReloadLocked(Entry& entry, const std::string& trigger);

  SecurityObserver* const observer_;
  std::mutex mu_;  // entries_' stamps; one reload at a time
  std::vector<Entry> entries_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread poller_;
};

}  // namespace performer::server
