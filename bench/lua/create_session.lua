-- Create session: each POST names the next pre-created READY model resource with a free slot,
-- five sessions per resource (the catalog's LoRA cap), so no request meets the 429 cap.
-- args: token, file of resource ids (one per line). Run with one wrk thread (one counter).
local ids, n, headers = {}, 0, nil

function init(args)
  headers = {["Authorization"] = "Bearer " .. args[1], ["Content-Type"] = "application/json"}
  for line in io.lines(args[2]) do
    if #line > 0 then ids[#ids + 1] = line end
  end
end

function request()
  local rid = ids[(math.floor(n / 5) % #ids) + 1]
  n = n + 1
  return wrk.format("POST", "/v1/rl/training-sessions", headers, '{"model_resources_id":"' .. rid .. '"}')
end
