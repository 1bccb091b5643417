-- wrk: every request claims a new key (POST /v1/claims), unique across threads and
-- runs: "<run>-<thread>-<n>". IDEM_TOKEN is the bearer token.
local counter = 0
local thread_id = 0
local run = os.getenv("IDEM_BENCH_RUN") or tostring(os.time())
local token = os.getenv("IDEM_TOKEN") or "bench"

function setup(thread)
  thread_id = thread_id + 1
  thread:set("id", thread_id)
end

function request()
  counter = counter + 1
  local body = string.format('{"biz_type":"bench","key":"%s-%d-%d"}', run, id, counter)
  return wrk.format("POST", "/v1/claims",
                    {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token},
                    body)
end

-- done(): the RESULT line (report.lua, beside this script).
dofile(debug.getinfo(1, "S").source:match("^@?(.*/)") .. "report.lua")
