-- The training loop, one state machine per wrk thread (run with as many threads as connections,
-- so each connection has its own): create resource -> poll it READY -> create session -> poll it
-- RUNNING -> forward-backward -> poll COMPLETED -> optim-step -> poll COMPLETED; then again.
-- Any non-200 or FAILED answer counts a flow error and restarts the loop. args: token [per-connection].
loops = 0
flow_errors = 0
local state, polls, seq = 0, 0, 0
local rid, sid, oid = nil, nil, nil
local post_h, get_h, auth = nil, nil, nil
local RES = '{"base_model":"Qwen/Qwen3.8-27B","lora_enabled":true}'
local FB = '{"loss":{"type":"LOSS_TYPE_CROSS_ENTROPY"},"samples":[{"model_input":{"chunks":[{"encoded_text":' ..
           '{"tokens":[1,2,3,4,5,6]}}]},"loss_fn_inputs":{"target_tokens":{"data":[2,3,4,5,6,7],"dtype":"int64"},' ..
           '"weights":{"data":[0,0,0,1,1,1],"dtype":"float32"}}}]}'
local OPT = '{"adam_params":{"learning_rate":0.0001}}'
local S = "/v1/rl/training-sessions/"

function init(args)
  -- "per-connection": each connection (wrk thread) is a tenant of its own, KEY-<thread>
  auth = "Bearer " .. args[1] .. (args[2] == "per-connection" and ("-" .. tostring(tid)) or "")
  post_h = {["Authorization"] = auth, ["Content-Type"] = "application/json"}
  get_h = {["Authorization"] = auth}
end

local function op_headers()
  seq = seq + 1
  return {["Authorization"] = auth, ["Content-Type"] = "application/json",
          ["Idempotency-Key"] = "bench-" .. tostring(tid) .. "-" .. seq}
end

function request()
  if state == 0 then return wrk.format("POST", "/v1/rl/model-resources", post_h, RES)
  elseif state == 1 then return wrk.format("GET", "/v1/rl/model-resources/" .. rid, get_h)
  elseif state == 2 then
    return wrk.format("POST", "/v1/rl/training-sessions", post_h, '{"model_resources_id":"' .. rid .. '"}')
  elseif state == 3 then return wrk.format("GET", S .. sid, get_h)
  elseif state == 4 then return wrk.format("POST", S .. sid .. "/operations/forward-backward", op_headers(), FB)
  elseif state == 5 then return wrk.format("GET", S .. sid .. "/operations/forward-backward/" .. oid, get_h)
  elseif state == 6 then return wrk.format("POST", S .. sid .. "/operations/optim-step", op_headers(), OPT)
  else return wrk.format("GET", S .. sid .. "/operations/optim-step/" .. oid, get_h) end
end

local function restart()
  flow_errors = flow_errors + 1
  state, polls = 0, 0
end

local function poll(status, want)
  if status and status:find(want .. "$") then
    polls = 0
    return true
  end
  polls = polls + 1
  if (status and status:find("FAILED$")) or (status and status:find("ERROR$")) or polls > 1000 then restart() end
  return false
end

function response(code, headers, body)
  if code ~= 200 then return restart() end
  local id = body:match('"id":"([^"]+)"')
  local status = body:match('"status":"([A-Z_]+)"')
  if state == 0 then
    if not id then return restart() end
    rid = id; state = 1
  elseif state == 1 then if poll(status, "READY") then state = 2 end
  elseif state == 2 then
    if not id then return restart() end
    sid = id; state = 3
  elseif state == 3 then if poll(status, "RUNNING") then state = 4 end
  elseif state == 4 then
    if not id then return restart() end
    oid = id; state = 5
  elseif state == 5 then if poll(status, "COMPLETED") then state = 6 end
  elseif state == 6 then
    if not id then return restart() end
    oid = id; state = 7
  elseif state == 7 then if poll(status, "COMPLETED") then loops = loops + 1; state = 0 end end
end
