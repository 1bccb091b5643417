-- For the wrk scripts of bench/claims/ that claim new keys: setup() numbers wrk's
-- threads, next_key() returns a key unique across threads and runs,
-- "<run>-<thread>-<n>", and `headers` are a claim's (IDEM_TOKEN is the bearer token).
local counter = 0
local thread_id = 0
local run = os.getenv("IDEM_BENCH_RUN") or tostring(os.time())

headers = {["Content-Type"] = "application/json",
           ["Authorization"] = "Bearer " .. (os.getenv("IDEM_TOKEN") or "bench")}

function setup(thread)
  thread_id = thread_id + 1
  thread:set("id", thread_id)
end

function next_key()
  counter = counter + 1
  return string.format("%s-%d-%d", run, id, counter)
end
