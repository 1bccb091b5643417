#include "http/api/key_watch.h"

#include <algorithm>
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
  const std::string id = Id(tenant, key);
  {
    // Before the epoch moves: a poll that reads after it sees the change, and one
    // that joined a read begun before it holds an older epoch, so its Watch wakes.
    absl::MutexLock lock(&reads_mu_);
    reads_.erase(id);
  }
  std::vector<std::function<void()>> wakes;
  {
    absl::MutexLock lock(&mu_);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    auto found = watchers_.find(id);
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

KeyWatch::SharedRead KeyWatch::Read(std::string_view tenant, std::string_view key,
                                    absl::Time now, absl::Duration fresh,
                                    const std::function<RecordRead()>& read) {
  const std::string id = Id(tenant, key);
  uint64_t generation;
  {
    absl::MutexLock lock(&reads_mu_);
    while (true) {
      auto found = reads_.find(id);
      if (found == reads_.end()) break;
      Kept& kept = found->second;
      if (kept.in_flight) {
        const uint64_t waiting_for = kept.generation;
        read_done_.Wait(&reads_mu_);
        // The read waited for, unless it failed or a Notify dropped it since.
        found = reads_.find(id);
        if (found != reads_.end() && found->second.generation == waiting_for &&
            !found->second.in_flight) {
          return found->second.read;
        }
        continue;
      }
      if (kept.read_at <= now && now - kept.read_at < fresh) return kept.read;
      break;
    }
    if (reads_.size() >= drop_stale_at_) DropStaleReads(now, fresh);
    Kept& kept = reads_[id];
    kept = Kept{};
    kept.generation = generation = ++generations_;
  }
  SharedRead done;
  done.epoch = Epoch();  // before the read: a Notify during it wakes the watcher
  done.value = std::make_shared<const RecordRead>(read());
  absl::MutexLock lock(&reads_mu_);
  auto found = reads_.find(id);
  if (found != reads_.end() && found->second.generation == generation) {
    if (done.value->ok()) {
      found->second.in_flight = false;
      found->second.read_at = now;
      found->second.read = done;
    } else {
      reads_.erase(found);  // the next poll asks the store again
    }
  }
  read_done_.SignalAll();
  return done;
}

void KeyWatch::DropStaleReads(absl::Time now, absl::Duration fresh) {
  for (auto it = reads_.begin(); it != reads_.end();) {
    if (!it->second.in_flight && !(it->second.read_at <= now && now - it->second.read_at < fresh)) {
      it = reads_.erase(it);
    } else {
      ++it;
    }
  }
  drop_stale_at_ = std::max<size_t>(64, 2 * reads_.size());
}

size_t KeyWatch::reads_kept() const {
  absl::MutexLock lock(&reads_mu_);
  return reads_.size();
}

}  // namespace idem::http
