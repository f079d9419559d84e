"""GRPO with the official SDK: sample groups, score them, train on group-relative advantages.

The reward is one a bigram model can learn: the share of a completion's tokens whose id is even
(the emulator's simulated model has no meaning to reward, only ids; a real run would score text).
Each step samples GROUP completions of each prompt from the current weights, gives every completion the
advantage (reward - group mean) / group std, trains with the API's GRPO loss on the sampled log-probs,
and publishes the new weights for the next step's samples. The mean reward rises from ~0.5.

    together-rl-emulator serve &      # or any implementation of the API
    python rl_grpo.py                 # --steps N, --plot reward.png (needs matplotlib)
"""

from __future__ import annotations

import argparse
import os
import statistics

from together.post_training import (
    AdamParams,
    LossConfig,
    ModelInput,
    ModelResourcesClient,
    Sample,
    SamplingParams,
)

PROMPTS = [[1, 2, 3], [17, 4, 9], [250, 251], [4000, 41, 42, 43]]
GROUP = 8           # completions per prompt
MAX_TOKENS = 8
LEARNING_RATE = 3e-4  # higher collapses each group onto one completion (no advantage left to learn from)


def reward(completion: list[int]) -> float:
    """Share of the MAX_TOKENS slots filled with an even token id (an early end scores the rest 0)."""
    return sum(1 for t in completion[:MAX_TOKENS] if t % 2 == 0) / MAX_TOKENS


def group_advantages(rewards: list[float]) -> list[float]:
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


def grpo_sample(prompt: list[int], completion: list[int], logprobs: list[float], advantage: float) -> Sample:
    """One training sample: the prompt's positions carry no advantage, the completion's carry the group's."""
    tokens = prompt + completion
    k = len(prompt) - 1  # positions that predict a prompt token
    return Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                  loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                  "logprobs": {"data": [0.0] * k + logprobs, "dtype": "float32"},
                                  "advantages": {"data": [0.0] * k + [advantage] * len(completion),
                                                 "dtype": "float32"},
                                  "mask": {"data": [0.0] * k + [1.0] * len(completion), "dtype": "float32"}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of the first step")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the reward curve (needs matplotlib)")
    args = parser.parse_args()
    # The emulator's default address; TOGETHER_BASE_URL and TOGETHER_API_KEY win when they are set.
    os.environ.setdefault("TOGETHER_BASE_URL", "http://127.0.0.1:8765")
    os.environ.setdefault("TOGETHER_API_KEY", "any-key")

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.5-4B", interval=0.1)
    session = resources.create_session(lora_config={"rank": 16}, display_name="grpo-even-tokens", interval=0.1)
    loss = LossConfig(type="LOSS_TYPE_GRPO")
    history = []
    print(f"{'step':>4}  {'reward':>6}  {'worst':>5}  {'best':>5}  mean reward")
    try:
        for step in range(args.steps):
            session.trainer.weights_sync()  # sample from the weights trained so far
            batch, rewards = [], []
            for i, prompt in enumerate(PROMPTS):
                params = SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=args.seed + 1000 * step + i)
                result = session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": prompt}}]),
                                                  num_samples=GROUP, sampling_params=params)
                group = [([int(t) for t in s.tokens], list(s.logprobs or [])) for s in result.sequences]
                scores = [reward(tokens) for tokens, _ in group]
                rewards += scores
                for (tokens, logprobs), adv in zip(group, group_advantages(scores)):
                    batch.append(grpo_sample(prompt, tokens, logprobs, adv))
            session.trainer.forward_backward(samples=batch, loss=loss)
            session.trainer.optim_step(adam_params=AdamParams(learning_rate=LEARNING_RATE))
            history.append(statistics.fmean(rewards))
            print(f"{step:>4}  {history[-1]:>6.3f}  {min(rewards):>5.2f}  {max(rewards):>5.2f}  "
                  f"{'#' * round(40 * history[-1])}", flush=True)
    finally:
        session.stop()
        resources.stop()
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
    ax.set(xlabel="step", ylabel="mean reward", title="GRPO: share of even token ids")
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
