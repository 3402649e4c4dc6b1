#include "server/http/response_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/logging/user_text.h"

namespace performer::server {
namespace {

absl::Status Missing(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("no stored response \"", BoundUserText(id),
                   "\" here (it was not stored, was deleted or expired, or another replica holds "
                   "it)"));
}

}  // namespace

void ResponseStore::Put(StoredResponse response, const std::string& previous) {
  absl::MutexLock lock(&mu_);
  if (!previous.empty()) {
    auto it = entries_.find({response.owner, previous});
    if (it != entries_.end()) it->second.continued_by = response.id;
  }
  Key key{response.owner, response.id};
  entries_[key] = std::move(response);
  order_.push_back(std::move(key));
  while (entries_.size() > max_entries_ && !order_.empty()) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  // Deleted keys stay in order_ until they reach its front: bound them too.
  while (order_.size() > 2 * max_entries_ + 16 && !order_.empty()) {
    if (entries_.count(order_.front()) == 0) {
      order_.pop_front();
    } else {
      order_.push_back(order_.front());
      order_.pop_front();
    }
  }
}

absl::StatusOr<StoredResponse> ResponseStore::Get(const std::string& id,
                                                  const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({owner, id});
  if (it == entries_.end()) return Missing(id);
  return it->second;
}

absl::StatusOr<StoredResponse> ResponseStore::Head(const std::string& id,
                                                   const std::string& owner) const {
  absl::StatusOr<StoredResponse> found = Get(id, owner);
  if (!found.ok()) {
    return absl::NotFoundError(absl::StrCat("previous_response_id: ", found.status().message()));
  }
  if (found->continued_by.empty()) return found;
  return absl::AlreadyExistsError(absl::StrCat(
      "previous_response_id: response ", id, " was continued already by ", found->continued_by,
      "; its conversation's state is at that turn: continue from the latest response, or send "
      "the whole conversation without previous_response_id"));
}

absl::StatusOr<StoredResponse> ResponseStore::Delete(const std::string& id,
                                                     const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({owner, id});
  if (it == entries_.end()) return Missing(id);
  StoredResponse removed = std::move(it->second);
  entries_.erase(it);
  return removed;
}

size_t ResponseStore::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace performer::server
