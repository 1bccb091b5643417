-- wrk: every request claims a new key (POST /v1/claims), unique across threads and
-- runs (fresh_keys.lua).
local here = debug.getinfo(1, "S").source:match("^@?(.*/)")
dofile(here .. "fresh_keys.lua")

function request()
  return wrk.format("POST", "/v1/claims", headers,
                    string.format('{"biz_type":"bench","key":"%s"}', next_key()))
end

-- done(): the RESULT line (report.lua, beside this script).
dofile(here .. "report.lua")
