// The whole RL flow through the official TypeScript SDK's generic client (together-ai on npm has no RL
// resources yet): resource -> session -> forward-backward / optim-step -> sample -> checkpoint -> stop.
// Run by tests/test_typescript_sdk.py against a live emulator: TOGETHER_BASE_URL is the emulator's root
// plus /v1 (the TypeScript SDK's convention), and FLOW_TOKENS is {"prompt": [...], "completion": [...]}.
"use strict";
const Together = require("together-ai");

const client = new Together({ apiKey: process.env.TOGETHER_API_KEY, baseURL: process.env.TOGETHER_BASE_URL });
const { prompt, completion } = JSON.parse(process.env.FLOW_TOKENS);
let keys = 0;

async function until(path, done) {
  for (let i = 0; i < 600; i++) {
    const obj = await client.get(path);
    if (done(obj)) return obj;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${path} never got there`);
}

async function run(sid, kind, body) {
  const headers = { "Idempotency-Key": `ts-${process.pid}-${keys++}` };
  const op = await client.post(`/rl/training-sessions/${sid}/operations/${kind}`, { body: body ?? {}, headers });
  const done = await until(`/rl/training-sessions/${sid}/operations/${kind}/${op.id}`,
                           (o) => o.status.endsWith("COMPLETED") || o.status.endsWith("FAILED"));
  if (!done.status.endsWith("COMPLETED")) throw new Error(`${kind} failed: ${JSON.stringify(done.error)}`);
  return done.output;
}

async function main() {
  const r = await client.post("/rl/model-resources", { body: { base_model: "Qwen/Qwen3.5-4B", lora_enabled: true } });
  await until(`/rl/model-resources/${r.id}`, (x) => x.status === "MODEL_RESOURCES_STATUS_READY");
  const s = await client.post("/rl/training-sessions", { body: { model_resources_id: r.id, lora_config: { rank: 8 } } });
  await until(`/rl/training-sessions/${s.id}`, (x) => x.status === "TRAINING_SESSION_STATUS_RUNNING");

  const tokens = prompt.concat(completion);
  const sample = {
    model_input: { chunks: [{ encoded_text: { tokens: tokens.slice(0, -1) } }] },
    loss_fn_inputs: {
      target_tokens: { data: tokens.slice(1), dtype: "int64" },
      weights: { data: prompt.slice(1).map(() => 0).concat(completion.map(() => 1)), dtype: "float32" },
    },
  };
  const losses = [];
  for (let step = 0; step < 30; step++) {
    const fb = await run(s.id, "forward-backward", { loss: { type: "LOSS_TYPE_CROSS_ENTROPY" }, samples: [sample] });
    losses.push(fb.loss);
    await run(s.id, "optim-step", { adam_params: { learning_rate: 0.001 } });
  }
  await run(s.id, "weights-sync", { weight_sync_type: "WEIGHT_SYNC_TYPE_SYNCHRONOUS" });
  const out = await run(s.id, "sample", {
    model_inputs: [{ chunks: [{ encoded_text: { tokens: prompt } }] }],
    sampling_params: { max_tokens: 64, temperature: 0 },
  });
  const seq = out.results[0].sequences[0];
  const ckpt = (await run(s.id, "inference-checkpoint")).checkpoint;
  const listed = await client.get("/rl/checkpoints", { query: { session_id: s.id } });
  await client.post(`/rl/training-sessions/${s.id}/stop`);
  const stoppedSession = await client.get(`/rl/training-sessions/${s.id}`);
  await client.post(`/rl/model-resources/${r.id}/stop`);
  const stoppedResource = await client.get(`/rl/model-resources/${r.id}`);
  console.log(JSON.stringify({
    first_loss: losses[0], last_loss: losses[losses.length - 1],
    tokens: seq.tokens.map(Number), stop_reason: seq.stop_reason,
    checkpoint: ckpt.id, listed: listed.data.map((c) => c.id),
    session_status: stoppedSession.status, resource_status: stoppedResource.status,
  }));
}

main().catch((err) => { console.error(err && err.stack ? err.stack : err); process.exit(1); });
