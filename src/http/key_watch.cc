#include "http/key_watch.h"

#include <utility>
#include <vector>

namespace idem::http {

// Removes its watcher when dropped, unless a Notify already took it.
class KeyWatch::Subscription {
 public:
  Subscription(KeyWatch& owner, std::string id, std::list<Watcher>::iterator it)
      : owner_(owner), id_(std::move(id)), it_(it) {}
  ~Subscription() { owner_.Remove(id_, it_); }

 private:
  KeyWatch& owner_;
  const std::string id_;
  const std::list<Watcher>::iterator it_;
};

std::string KeyWatch::Id(std::string_view tenant, std::string_view key) {
  // Tenants are names without NUL (ValidateTenant), so the first NUL ends the tenant.
  std::string id;
  id.reserve(tenant.size() + 1 + key.size());
  id.append(tenant).push_back('\0');
  id.append(key);
  return id;
}

KeyWatch::Handle KeyWatch::Watch(std::string_view tenant, std::string_view key,
                                 uint64_t seen_epoch, std::function<void()> wake) {
  std::string id = Id(tenant, key);
  std::list<Watcher>::iterator it;
  {
    absl::MutexLock lock(&mu_);
    // Notify counts under the lock, so this sees every Notify before it: one since
    // the caller's read may have been this key's, so re-poll now.
    if (epoch_.load(std::memory_order_acquire) == seen_epoch) {
      std::list<Watcher>& list = watchers_[id];
      it = list.insert(list.end(), Watcher{std::move(wake)});
      return std::make_shared<Subscription>(*this, std::move(id), it);
    }
  }
  wake();
  return nullptr;
}

void KeyWatch::Notify(std::string_view tenant, std::string_view key) {
  std::vector<std::function<void()>> wakes;
  {
    absl::MutexLock lock(&mu_);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    auto found = watchers_.find(Id(tenant, key));
    if (found == watchers_.end()) return;
    for (Watcher& w : found->second) {
      if (!w.active) continue;  // woken before; its handle is not dropped yet
      w.active = false;
      wakes.push_back(std::move(w.wake));
    }
    // The entries stay until their subscriptions drop them (Remove).
  }
  for (auto& wake : wakes) wake();
}

void KeyWatch::Remove(const std::string& id, std::list<Watcher>::iterator it) {
  absl::MutexLock lock(&mu_);
  auto found = watchers_.find(id);
  if (found == watchers_.end()) return;
  found->second.erase(it);
  if (found->second.empty()) watchers_.erase(found);
}

size_t KeyWatch::watching() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, list] : watchers_) {
    for (const Watcher& w : list) n += w.active ? 1 : 0;
  }
  return n;
}

}  // namespace idem::http
