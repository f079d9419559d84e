"""Sampling from a weights snapshot: temperature, top-k, top-p, max_tokens, stop strings, EOS, seeds.

Emulates the generator (docs/api-surface.md A.3.5) over the full vocabulary without a vocabulary-sized array.
Conventions where a real engine's behaviour depends on its tokenizer or kernels (greedy ties, top-k/top-p in
the tail, text without a tokenizer, stop matching, seeds) and padding ids [inferred]: README, "Sampling".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from emulator.compute.base import hash_tokens, seed_to_u64
from emulator.compute.errors import invalid
from emulator.compute.inputs import parse_float, parse_int
from emulator.compute.portable import exp
from emulator.compute.spec import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P
from emulator.compute.tokenizers import TokenBytes, numeric_piece
from emulator.compute.types import SamplingParams
from emulator.compute.weights import RowSet, Weights, tail_tokens, unique_inverse

GREEDY_BELOW = 1e-5
STOP = "STOP_REASON_STOP"
LENGTH = "STOP_REASON_LENGTH"


def decode(tokens: list[int]) -> str:
    """The emulator's token -> text mapping: each token is a space followed by its decimal id."""
    return "".join(f" {t}" for t in tokens)


@dataclass(frozen=True)
class SamplingConfig:
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    stop: tuple[str, ...]
    seed: int

    @property
    def truncates(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0


TOP_K_BOUND = 1 << 62


def parse_sampling_params(params: SamplingParams | None, seed: int) -> SamplingConfig:
    if params is None:
        params = _NO_PARAMS
    w = "sampling_params"
    max_tokens = DEFAULT_MAX_TOKENS if params.max_tokens is None else params.max_tokens
    if max_tokens < 0:
        raise invalid(f"{w}.max_tokens must be >= 0, got {max_tokens}")
    temperature = (DEFAULT_TEMPERATURE if params.temperature is None
                   else parse_float(params.temperature, f"{w}.temperature"))
    if temperature < 0:
        raise invalid(f"{w}.temperature must be >= 0, got {temperature}")
    top_k = DEFAULT_TOP_K if params.top_k is None else params.top_k
    if top_k < -1:
        raise invalid(f"{w}.top_k must be -1 (off), 0 (off) or positive, got {top_k}")
    top_k = min(top_k, TOP_K_BOUND)  # past the vocabulary every top_k keeps all tokens; numpy takes int64 only
    top_p = DEFAULT_TOP_P if params.top_p is None else parse_float(params.top_p, f"{w}.top_p")
    if not 0 < top_p <= 1:
        raise invalid(f"{w}.top_p must be in (0, 1], got {top_p}")
    stop_raw = params.stop
    if stop_raw is None:
        stop: tuple[str, ...] = ()
    elif isinstance(stop_raw, str):
        stop = (stop_raw,) if stop_raw else ()
    else:
        stop = tuple(s for s in stop_raw if s)
    if params.seed is not None:
        seed = parse_int(params.seed, f"{w}.seed")
    return SamplingConfig(max_tokens, temperature, top_k, top_p, stop, seed)


_NO_PARAMS = SamplingParams()


# --- per-row distributions ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Tables:
    """Kept explicit tokens (flat, per row) with unnormalised weights, plus the kept tail block."""

    offsets: np.ndarray
    cols: np.ndarray
    weights: np.ndarray
    tail_m: np.ndarray
    tail_w: np.ndarray


def decodable(rs: RowSet, limit: int) -> RowSet:
    """The rows as the generator sees them: without the ids at or above ``limit`` (the embedding's padding
    past the tokenizer). Padding ids are the highest, so they leave the explicit columns and the top of each
    tail block, and the r-th tail token of what remains is the model's r-th (``tail_token_per_row``). The
    log-partitions and probabilities stay the model's, so log-probs read from the result are the model's own."""
    v = rs.vocab_size
    if limit >= v:
        return rs
    pad = rs.cols >= limit
    if not pad.any():  # (nearly always: a row rarely prefers a padding id) every padding id is a tail token
        return _with_tails(rs, rs.tail_n - (v - limit))
    n = rs.uprevs.size
    tail_n = rs.tail_n - ((v - limit) - np.bincount(rs.seg[pad], minlength=n))
    keep = ~pad
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rs.seg[keep], minlength=n), out=offsets[1:])
    return _with_tails(rs, tail_n, offsets=offsets, seg=rs.seg[keep], cols=rs.cols[keep], logits=rs.logits[keep],
                       probs=rs.probs[keep])


def _with_tails(rs: RowSet, tail_n: np.ndarray, **changes: Any) -> RowSet:
    """``rs`` with ``tail_n`` tail columns per row (a row left without any has tail probability 0)."""
    all_tails = bool((tail_n > 0).all())
    tail_p = rs.tail_p if all_tails else np.where(tail_n > 0, rs.tail_p, 0.0)
    return msgspec.structs.replace(rs, tail_n=tail_n, all_tails=all_tails, tail_p=tail_p, **changes)


def _explicit_max(rs: RowSet) -> np.ndarray:
    """Each row's largest explicit logit (-inf for a row without explicit columns, which :func:`decodable`
    can leave: ``reduceat`` would read the next row's)."""
    starts = rs.offsets[:-1]
    if rs.cols.size and bool((rs.offsets[1:] > starts).all()):
        return np.maximum.reduceat(rs.logits, starts)
    out = np.full(starts.size, -np.inf)
    np.maximum.at(out, rs.seg, rs.logits)
    return out


def _row_max(rs: RowSet) -> np.ndarray:
    seg_max = _explicit_max(rs)
    return np.where(rs.tail_n > 0, np.maximum(seg_max, rs.tail_logit), seg_max)


def ranked_row(rs: RowSet, r: int) -> tuple[np.ndarray, np.ndarray, int, int, float, np.ndarray, np.ndarray]:
    """Row ``r`` in sampling order: explicit tokens by (logit desc, id asc) with the tail block inserted
    after every explicit token whose logit is >= the tail's. Returns (cols, logits, tail position,
    tail count, tail logit, the row's sorted explicit cols, the order that sorts them so)."""
    cols, logits, tn, tl = rs.row(r)
    order = np.lexsort((cols, -logits))
    c, lg = cols[order], logits[order]
    pos = int(np.count_nonzero(lg >= tl)) if tn > 0 else c.size
    return c, lg, pos, tn, tl, cols, order


def token_weights(rs: RowSet, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """The unnormalised sampling weight of each explicit column and of each row's tail tokens (0 for a row
    without): the model's probabilities at temperature 1, else ``exp((logit - row max) / temperature)``."""
    if temperature == 1.0:
        return rs.probs, rs.tail_p
    top = _row_max(rs)
    inv_t = 1.0 / temperature
    n = rs.logits.size
    e = exp(np.concatenate(((rs.logits - top[rs.seg]) * inv_t, (rs.tail_logit - top) * inv_t)))
    return e[:n], np.where(rs.tail_n > 0, e[n:], 0.0)


def _truncate_row(rs: RowSet, r: int, cfg: SamplingConfig, row_w: np.ndarray, tw: float
                  ) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Row ``r``'s kept tokens under top-k / top-p, given its explicit columns' weights and its tail's."""
    c, lg, pos, tn, tl, _, order = ranked_row(rs, r)
    w = row_w[order]
    # blocks in order: explicit[:pos], tail (tn tokens), explicit[pos:]
    blk_w = np.concatenate([w[:pos], [tw], w[pos:]])
    blk_n = np.concatenate([np.ones(pos, dtype=np.int64), [tn], np.ones(c.size - pos, dtype=np.int64)])
    blk_tok = np.concatenate([c[:pos], [-1], c[pos:]])
    keep_n = blk_n.copy()
    if cfg.top_k > 0:
        before = np.concatenate([[0], np.cumsum(blk_n)[:-1]])
        keep_n = np.clip(cfg.top_k - before, 0, blk_n)
    if cfg.top_p < 1.0:
        mass = blk_w * keep_n
        total = float(mass.sum())
        threshold = cfg.top_p * total
        cum = 0.0
        cut = None
        for i in range(blk_w.size):
            if keep_n[i] == 0:
                continue
            if cum + mass[i] >= threshold:
                if blk_n[i] > 1:   # the tail block: keep just enough of its lowest ids
                    need = math.ceil((threshold - cum) / blk_w[i]) if blk_w[i] > 0 else int(keep_n[i])
                    keep_n[i] = min(max(need, 1), int(keep_n[i]))
                cut = i
                break
            cum += float(mass[i])
        if cut is not None:
            keep_n[cut + 1:] = 0
    kept_explicit = (blk_tok >= 0) & (keep_n > 0)
    tail_m = int(keep_n[pos])
    return blk_tok[kept_explicit], blk_w[kept_explicit], tail_m, tw


def build_tables(rs: RowSet, cfg: SamplingConfig) -> Tables:
    n = rs.uprevs.size
    w, tw = token_weights(rs, cfg.temperature)
    if not cfg.truncates:
        return Tables(rs.offsets, rs.cols, w, rs.tail_n.copy(), tw)
    cols_l, w_l, tail_m, tail_w = [], [], np.zeros(n, dtype=np.int64), np.zeros(n)
    lengths = np.zeros(n, dtype=np.int64)
    bounds = rs.offsets.tolist()
    tails = tw.tolist()
    for r in range(n):
        c, kept_w, m, t_w = _truncate_row(rs, r, cfg, w[bounds[r]:bounds[r + 1]], tails[r])
        cols_l.append(c)
        w_l.append(kept_w)
        tail_m[r], tail_w[r], lengths[r] = m, t_w, c.size
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Tables(offsets, np.concatenate(cols_l).astype(np.int64), np.concatenate(w_l), tail_m, tail_w)


def draw(rs: RowSet, tables: Tables, ridx: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One token per sequence (row ``ridx[s]``, uniform ``u[s]``) by inverse CDF over its row table."""
    cum = np.cumsum(tables.weights)
    starts, ends = tables.offsets[:-1], tables.offsets[1:]
    before = np.where(starts > 0, cum[np.maximum(starts - 1, 0)], 0.0) if cum.size else np.zeros(starts.size)
    last = (np.where(ends > starts, cum[np.maximum(ends - 1, 0)], before) if cum.size
            else np.zeros(starts.size))
    explicit_mass = last - before
    total = explicit_mass + tables.tail_m * tables.tail_w
    x = u * total[ridx]
    in_explicit = x < explicit_mass[ridx]
    out = np.empty(ridx.size, dtype=np.int64)
    if in_explicit.any():
        e = np.nonzero(in_explicit)[0]
        re = ridx[e]
        pos = cum.searchsorted(before[re] + x[e], side="right")
        pos = np.clip(pos, starts[re], ends[re] - 1)
        out[e] = tables.cols[pos]
    if not in_explicit.all():
        t = np.nonzero(~in_explicit)[0]
        rt = ridx[t]
        tw = tables.tail_w[rt]
        j = np.floor((x[t] - explicit_mass[rt]) / np.where(tw > 0, tw, 1.0)).astype(np.int64)
        j = np.clip(j, 0, np.maximum(tables.tail_m[rt] - 1, 0))
        out[t] = tail_token_per_row(rs, rt, j)
    return out


def tail_token_per_row(rs: RowSet, rows: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The ``ranks[s]``-th tail token of row ``rows[s]`` (vectorised ``tail_tokens``)."""
    v = rs.vocab_size
    within = np.arange(rs.cols.size, dtype=np.int64) - rs.offsets[rs.seg]
    key = rs.seg * v + (rs.cols - within)
    counts = key.searchsorted(rows * v + ranks, side="right") - rs.offsets[rows]
    out: np.ndarray = ranks + counts
    return out


def greedy(rs: RowSet) -> np.ndarray:
    """Most likely token per row (explicit before tail, then lower id, on ties)."""
    seg_max = _explicit_max(rs)
    idx = np.arange(rs.cols.size)
    at_max = np.where(rs.logits == seg_max[rs.seg], idx, rs.cols.size)
    if rs.cols.size and bool((rs.offsets[1:] > rs.offsets[:-1]).all()):
        best = rs.cols[np.minimum.reduceat(at_max, rs.offsets[:-1])]
    else:  # a row without explicit columns (see :func:`decodable`) takes its tail's first token below
        first = np.full(rs.uprevs.size, rs.cols.size)
        np.minimum.at(first, rs.seg, at_max)
        best = np.zeros(rs.uprevs.size, dtype=np.int64)
        has = first < rs.cols.size
        best[has] = rs.cols[first[has]]
    tail_wins = (rs.tail_n > 0) & (rs.tail_logit > seg_max)
    if tail_wins.any():
        rows = np.nonzero(tail_wins)[0]
        best[rows] = tail_token_per_row(rs, rows, np.zeros(rows.size, dtype=np.int64))
    return best


# --- generation --------------------------------------------------------------------------------------

def generate(weights: Weights, prompts: list[np.ndarray], num_samples: int, cfg: SamplingConfig,
             ends: frozenset[int], piece: TokenBytes = numeric_piece, limit: int | None = None,
             ) -> list[list[tuple[list[int], str]]]:
    """Token lists and stop reasons, ``num_samples`` per prompt. ``ends``: the tokens that end a sequence;
    ``piece``: each token's text (UTF-8 bytes), for the stop strings; ``limit``: the tokenizer's size (the
    ids from it on are never sampled; default: the whole vocabulary)."""
    limit = weights.vocab_size if limit is None else int(limit)
    seqs: list[tuple[int, int]] = [(i, j) for i in range(len(prompts)) for j in range(num_samples)]
    n = len(seqs)
    out_tokens: list[list[int]] = [[] for _ in range(n)]
    reasons = [LENGTH] * n
    if cfg.max_tokens == 0 or n == 0:
        return _group(prompts, num_samples, out_tokens, reasons)
    last = np.array([int(prompts[i][-1]) for i, _ in seqs], dtype=np.int64)
    greedy_mode = cfg.temperature < GREEDY_BELOW
    if not greedy_mode:
        seed64 = seed_to_u64(cfg.seed)
        hashes = [hash_tokens(p) for p in prompts]
        u_all = np.stack([np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed64, hashes[i], j])))
                          .random(cfg.max_tokens) for i, j in seqs])
    texts = [b""] * n
    stops = [st.encode() for st in cfg.stop]
    max_stop = max((len(st) for st in stops), default=0)
    active = np.arange(n)
    for step in range(cfg.max_tokens):
        if active.size == 0:
            break
        uprev, ridx = unique_inverse(last[active])
        rs = decodable(weights.rowset(uprev), limit)
        if greedy_mode:
            toks = greedy(rs)[ridx]
        else:
            with np.errstate(over="ignore", under="ignore"):
                toks = draw(rs, build_tables(rs, cfg), ridx, u_all[active, step])
        still = []
        for s, tok in zip(active.tolist(), toks.tolist()):
            out_tokens[s].append(tok)
            last[s] = tok
            if tok in ends:
                reasons[s] = STOP
                continue
            if stops:
                before = len(texts[s])
                texts[s] += piece(tok)
                window = texts[s][max(0, before - max_stop + 1):]
                if any(st in window for st in stops):
                    reasons[s] = STOP
                    continue
                if len(texts[s]) > 4 * max_stop + 64:   # only the tail can still matter
                    texts[s] = texts[s][-(2 * max_stop + 32):]
            if len(out_tokens[s]) < cfg.max_tokens:
                still.append(s)
        active = np.asarray(still, dtype=np.int64)
    return _group(prompts, num_samples, out_tokens, reasons)


def _group(prompts: list[np.ndarray], num_samples: int, toks: list[list[int]], reasons: list[str]
           ) -> list[list[tuple[list[int], str]]]:
    return [[(toks[i * num_samples + j], reasons[i * num_samples + j]) for j in range(num_samples)]
            for i in range(len(prompts))]


def topk_row(rs: RowSet, r: int, k: int) -> tuple[list[int], list[float]]:
    """The ``k`` most likely next tokens of row ``r`` with log-probs, in sampling order (of the ids ``rs``
    holds: pass :func:`decodable` rows to list only the tokenizer's)."""
    c, lg, pos, tn, tl, explicit, _ = ranked_row(rs, r)
    logz = float(rs.logz[r])
    ids: list[int] = [int(x) for x in c[: min(pos, k)]]
    lps: list[float] = [float(x - logz) for x in lg[: min(pos, k)]]
    if len(ids) < k and tn > 0:
        m = min(tn, k - len(ids))
        ids.extend(int(x) for x in tail_tokens(explicit, np.arange(m)))
        lps.extend([float(tl - logz)] * m)
    if len(ids) < k:
        rest = c[pos:][: k - len(ids)]
        ids.extend(int(x) for x in rest)
        lps.extend(float(x - logz) for x in lg[pos:][: rest.size])
    return ids, lps


__all__ = ["LENGTH", "STOP", "SamplingConfig", "decodable", "decode", "generate", "parse_sampling_params",
           "topk_row"]
