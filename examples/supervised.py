"""Supervised fine-tuning with the official SDK: the loss falls step by step, then the model answers.

Trains a LoRA adapter on three prompt -> answer pairs with the cross-entropy loss (weights 1 on the answer
tokens only), prints the loss of every step, then samples each prompt greedily from the trained weights and
checks the answers. The session carries a display name, which the dashboard shows
(http://127.0.0.1:8765/_emulator/ui while the emulator runs).

The emulator's simulated model is a bigram model over the real vocabulary, so the pairs are token ids;
with a real model they would be the tokenizer's ids of a chat.

    together-rl-emulator serve &      # or any implementation of the API
    python supervised.py              # --steps N, --plot loss.png (needs matplotlib)
"""

from __future__ import annotations

import argparse
import os

from together.post_training import (
    AdamParams,
    LossConfig,
    ModelInput,
    ModelResourcesClient,
    Sample,
    SamplingParams,
)

PAIRS = [([101, 102, 103], [205, 206, 207, 208]),
         ([301, 302], [411, 412, 413]),
         ([501, 502, 503, 504], [611, 612])]


def ce_sample(prompt: list[int], answer: list[int]) -> Sample:
    """Learn the answer, not the prompt: weight 1 on the positions that predict an answer token."""
    tokens = prompt + answer
    return Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                  loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                  "weights": {"data": [0.0] * (len(prompt) - 1) + [1.0] * len(answer),
                                              "dtype": "float32"}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--plot", metavar="FILE.png", help="draw the loss curve (needs matplotlib)")
    args = parser.parse_args()
    # The emulator's default address; TOGETHER_BASE_URL and TOGETHER_API_KEY win when they are set.
    os.environ.setdefault("TOGETHER_BASE_URL", "http://127.0.0.1:8765")
    os.environ.setdefault("TOGETHER_API_KEY", "any-key")

    resources = ModelResourcesClient.create(base_model="Qwen/Qwen3.5-4B", interval=0.1)
    session = resources.create_session(lora_config={"rank": 8}, display_name="sft-three-answers", interval=0.1)
    batch = [ce_sample(p, a) for p, a in PAIRS]
    answer_tokens = sum(len(a) for _, a in PAIRS)
    losses = []
    print(f"{'step':>4}  {'loss':>8}  {'per token':>9}")
    try:
        for step in range(args.steps):
            fb = session.trainer.forward_backward(samples=batch, loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
            session.trainer.optim_step(adam_params=AdamParams(learning_rate=3e-4))
            losses.append(fb.loss)
            print(f"{step:>4}  {fb.loss:>8.3f}  {fb.loss / answer_tokens:>9.3f}", flush=True)
        session.trainer.weights_sync()  # publish the trained weights to the sampler
        right = 0
        for prompt, answer in PAIRS:
            out = session.generator.sample(ModelInput(chunks=[{"encoded_text": {"tokens": prompt}}]),
                                           sampling_params=SamplingParams(max_tokens=len(answer), temperature=0.0))
            got = [int(t) for t in out.sequences[0].tokens]
            right += got == answer
            print(f"prompt {prompt} -> {got} {'(right)' if got == answer else f'(expected {answer})'}")
    finally:
        session.stop()
        resources.stop()
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {len(losses)} steps; {right} of {len(PAIRS)} answers right")
    if args.plot:
        plot(losses, args.plot)


def plot(losses: list[float], path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"not drawing {path}: matplotlib is not installed (pip install matplotlib)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(range(len(losses)), losses, marker="o")
    ax.set(xlabel="step", ylabel="cross-entropy (sum)", yscale="log", title="supervised fine-tuning")
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
