#include <mutex>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "idem/steps.h"

namespace idem {

struct Worker::Impl {
  Impl(StepRunner& r, WorkerOptions o) : runner(r), options(o) {}

  // Waits on real time between passes (a background thread's pacing, not a
  // decision: due times come from the runner's injected Clock).
  void Loop() {
    for (;;) {
      absl::StatusOr<int> n = runner.ResumeDue(options.batch);
      {
        absl::MutexLock lock(&mu);
        ++passes;
        if (n.ok()) resumed += *n;
        // A full batch means more may be due: go again at once. Otherwise wait for
        // the interval (or Stop). An error (store down) waits too.
        if (stop) return;
        if (n.ok() && *n >= options.batch) continue;
        mu.AwaitWithTimeout(absl::Condition(&stop), options.interval);
        if (stop) return;
      }
    }
  }

  StepRunner& runner;
  const WorkerOptions options;
  absl::Mutex mu;
  bool stop ABSL_GUARDED_BY(mu) = false;
  bool started ABSL_GUARDED_BY(mu) = false;
  int64_t passes ABSL_GUARDED_BY(mu) = 0;
  int64_t resumed ABSL_GUARDED_BY(mu) = 0;
  std::mutex lifecycle;  // serializes Start/Stop (the join must happen once)
  std::thread thread;
};

Worker::Worker(StepRunner& runner, WorkerOptions options)
    : impl_(std::make_unique<Impl>(runner, options)) {}

Worker::~Worker() { Stop(); }

void Worker::Start() {
  std::lock_guard<std::mutex> lifecycle(impl_->lifecycle);
  absl::MutexLock lock(&impl_->mu);
  if (impl_->started) return;
  impl_->started = true;
  impl_->stop = false;
  impl_->thread = std::thread([this] { impl_->Loop(); });
}

void Worker::Stop() {
  std::lock_guard<std::mutex> lifecycle(impl_->lifecycle);
  {
    absl::MutexLock lock(&impl_->mu);
    if (!impl_->started) return;
    impl_->stop = true;
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  absl::MutexLock lock(&impl_->mu);
  impl_->started = false;
}

int64_t Worker::passes() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->passes;
}

int64_t Worker::resumed() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->resumed;
}

}  // namespace idem
