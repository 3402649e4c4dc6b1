#include "server/security/credential_reloader.h"

#include <sys/stat.h>

#include <chrono>

#include "server/logging/server_log.h"

namespace performer::server {

CredentialReloader::~CredentialReloader() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

std::vector<CredentialReloader::Stamp> CredentialReloader::StampsOf(
    const std::vector<std::string>& paths) {
  std::vector<Stamp> stamps;
  for (const std::string& path : paths) {
    Stamp stamp;
    struct stat info {};
    // stat follows symlinks: a Secret volume's files are links into a
    // directory that is replaced as a whole on update.
    if (stat(path.c_str(), &info) == 0) {
      stamp.exists = true;
      stamp.inode = info.st_ino;
      stamp.size = info.st_size;
      stamp.mtime_ns = int64_t{info.st_mtim.tv_sec} * 1000000000 + info.st_mtim.tv_nsec;
      stamp.ctime_ns = int64_t{info.st_ctim.tv_sec} * 1000000000 + info.st_ctim.tv_nsec;
    }
    stamps.push_back(stamp);
  }
  return stamps;
}

void CredentialReloader::Add(Credentials credentials) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Stamp> stamps = StampsOf(credentials.paths);
  entries_.push_back({std::move(credentials), std::move(stamps)});
}

void CredentialReloader::ReloadLocked(Entry& entry, const std::string& trigger) {
  entry.stamps = StampsOf(entry.credentials.paths);
  const absl::Status status = entry.credentials.reload();
  if (observer_ != nullptr) observer_->OnCredentialsReload(entry.credentials.name, status.ok());
  if (status.ok()) {
    LogEvent(spdlog::level::info, "credentials reloaded",
             {{"credentials", entry.credentials.name}, {"trigger", trigger}});
  } else {
    LogEvent(spdlog::level::err, "credentials reload failed; the previous ones stay in force",
             {{"credentials", entry.credentials.name},
              {"trigger", trigger},
              {"error", std::string(status.message())}});
  }
}

void CredentialReloader::ReloadAll(const std::string& trigger) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& entry : entries_) ReloadLocked(entry, trigger);
}

void CredentialReloader::ReloadChanged() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& entry : entries_) {
    if (!(StampsOf(entry.credentials.paths) == entry.stamps)) ReloadLocked(entry, "file change");
  }
}

void CredentialReloader::StartPolling(absl::Duration interval) {
  poller_ = std::thread([this, interval] {
    std::unique_lock<std::mutex> lock(stop_mu_);
    while (!stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(interval), [&] { return stop_; })) {
      lock.unlock();
      ReloadChanged();
      lock.lock();
    }
  });
}

}  // namespace performer::server
