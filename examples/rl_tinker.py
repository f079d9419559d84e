"""The GRPO loop of rl_grpo.py through together's tinker-compatible clients (``together.post_training.tinker``).

Code written for Tinker (ServiceClient, TrainingClient, SamplingClient, Datum) runs unchanged against the
Together API, and so against the emulator. Each step samples GROUP completions of each prompt from the
weights published last, scores them (the share of even token ids, as in rl_grpo.py), trains with tinker's
``importance_sampling`` loss on group-relative advantages, and publishes the new weights. The mean reward
rises from ~0.5.

    together-rl-emulator serve &
    python rl_tinker.py               # --steps N, --plot reward.png (needs matplotlib)
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
from together.post_training import tinker

PROMPTS = [[1, 2, 3], [17, 4, 9], [250, 251], [4000, 41, 42, 43]]
GROUP = 8
MAX_TOKENS = 8
LEARNING_RATE = 3e-4


def reward(completion: list[int]) -> float:
    """Share of the MAX_TOKENS slots filled with an even token id (an early end scores the rest 0)."""
    return sum(1 for t in completion[:MAX_TOKENS] if t % 2 == 0) / MAX_TOKENS


def group_advantages(rewards: list[float]) -> list[float]:
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


tensor = tinker.types.TensorData.from_numpy


def datum(prompt: list[int], completion: list[int], logprobs: list[float], advantage: float) -> tinker.types.Datum:
    tokens = prompt + completion
    k = len(prompt) - 1  # positions that predict a prompt token: no advantage there
    return tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tensor(np.asarray(tokens[1:], dtype=np.int64)),
                        "logprobs": tensor(np.asarray([0.0] * k + logprobs, dtype=np.float32)),
                        "advantages": tensor(np.asarray([0.0] * k + [advantage] * len(completion), dtype=np.float32))})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of the first step")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the reward curve (needs matplotlib)")
    args = parser.parse_args()
    service = tinker.ServiceClient(base_url=os.environ.get("TOGETHER_BASE_URL", "http://127.0.0.1:8765"),
                                   api_key=os.environ.get("TOGETHER_API_KEY", "any-key"))
    trainer = service.create_lora_training_client("Qwen/Qwen3.5-4B", rank=16)
    history = []
    print(f"{'step':>4}  {'reward':>6}  {'worst':>5}  {'best':>5}  mean reward")
    try:
        for step in range(args.steps):
            sampler = trainer.save_weights_and_get_sampling_client()  # publish the weights trained so far
            batch, rewards = [], []
            for i, prompt in enumerate(PROMPTS):
                params = tinker.types.SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0,
                                                     seed=args.seed + 1000 * step + i)
                result = sampler.sample(tinker.types.ModelInput.from_ints(prompt), GROUP, params).result()
                group = [([int(t) for t in s.tokens], list(s.logprobs or [])) for s in result.sequences]
                scores = [reward(tokens) for tokens, _ in group]
                rewards += scores
                batch += [datum(prompt, tokens, logprobs, adv)
                          for (tokens, logprobs), adv in zip(group, group_advantages(scores))]
            trainer.forward_backward(batch, "importance_sampling").result()
            trainer.optim_step(tinker.types.AdamParams(learning_rate=LEARNING_RATE)).result()
            history.append(statistics.fmean(rewards))
            print(f"{step:>4}  {history[-1]:>6.3f}  {min(rewards):>5.2f}  {max(rewards):>5.2f}  "
                  f"{'#' * round(40 * history[-1])}", flush=True)
    finally:
        trainer.close()  # stops the session and the resource the client provisioned
    print(f"mean reward: first 3 steps {statistics.fmean(history[:3]):.3f}, "
          f"last 3 steps {statistics.fmean(history[-3:]):.3f}")
    if args.plot:
        plot(history, args.plot)


def plot(history: list[float], path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"not drawing {path}: matplotlib is not installed (pip install matplotlib)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(range(len(history)), history, marker="o")
    ax.set(xlabel="step", ylabel="mean reward", title="tinker importance sampling: even token ids")
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
