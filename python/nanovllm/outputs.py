"""Request outputs: vLLM's objects that also read as nano-vLLM's dicts."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from nanovllm import _core


@dataclass(frozen=True)
class Logprob:
    """One token's log probability at one position (vLLM's Logprob).

    Attributes:
        logprob: natural log of the token's probability (after temperature).
        rank: 1 for the most likely token; None for a chosen token outside the returned top k.
        decoded_token: the token's text, None without a tokenizer.
    """

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# Per position: token id -> Logprob, the chosen (or prompt) token first, then the top k by rank.
PositionLogprobs = Dict[int, Logprob]


@dataclass
class CompletionOutput:
    """The generated part of a request (vLLM's CompletionOutput).

    Attributes:
        index: 0 (one completion per request).
        text: detokenized output, stop strings cut.
        token_ids: generated token ids.
        cumulative_logprob: sum of the chosen tokens' logprobs when logprobs were asked for, else None.
        logprobs: per generated token, when SamplingParams.logprobs was set.
        finish_reason: "stop" (EOS, a stop token or string), "length" (max_tokens or max_model_len) or "abort".
    """

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[PositionLogprobs]]
    finish_reason: Optional[str]


class RequestOutput(Mapping):
    """One request's result: vLLM's RequestOutput, and nano-vLLM's dict at the same time.

    ``out["text"]`` and ``out["token_ids"]`` (and ``dict(out)``) are nano-vLLM's form;
    ``out.outputs[0].text``, ``.token_ids``, ``.finish_reason``, ``.logprobs``, ``out.prompt_token_ids`` and
    ``out.prompt_logprobs`` are vLLM's.
    """

    _DICT_KEYS = ("text", "token_ids")

    def __init__(self, request_id: str, prompt: Optional[str], prompt_token_ids: List[int],
                 prompt_logprobs: Optional[List[Optional[PositionLogprobs]]], outputs: List[CompletionOutput],
                 finished: bool = True) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished

    def __getitem__(self, key: str):
        if key == "text":
            return self.outputs[0].text
        if key == "token_ids":
            return self.outputs[0].token_ids
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._DICT_KEYS)

    def __len__(self) -> int:
        return len(self._DICT_KEYS)

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id!r}, prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids!r}, outputs={self.outputs!r}, finished={self.finished})")


def _position(entries: Sequence[Tuple[int, float]], token_text: Callable[[int], Optional[str]]) -> PositionLogprobs:
    """The engine's (token, logprob) pairs -- chosen token first, then the top k -- as vLLM's dict."""
    chosen, top = entries[0], entries[1:]
    ranks = {token: rank for rank, (token, _) in enumerate(top, start=1)}
    position = {chosen[0]: Logprob(chosen[1], ranks.get(chosen[0]), token_text(chosen[0]))}
    for token, logprob in top:
        position.setdefault(token, Logprob(logprob, ranks[token], token_text(token)))
    return position


def from_core(raw: _core.RequestOutput, prompt: Optional[str],
              token_text: Callable[[int], Optional[str]]) -> RequestOutput:
    """Wraps one engine output; token_text gives a token's text for the logprobs."""
    logprobs = None
    cumulative = None
    if raw.logprobs is not None:
        logprobs = [_position(entries, token_text) for entries in raw.logprobs]
        cumulative = sum(entries[0][1] for entries in raw.logprobs)
    prompt_logprobs = None
    if raw.prompt_logprobs is not None:
        prompt_logprobs = [_position(entries, token_text) if entries else None for entries in raw.prompt_logprobs]
    completion = CompletionOutput(index=0, text=raw.text, token_ids=list(raw.token_ids), cumulative_logprob=cumulative,
                                  logprobs=logprobs, finish_reason=raw.finish_reason or None)
    return RequestOutput(str(raw.request_id), prompt, list(raw.prompt_token_ids), prompt_logprobs, [completion],
                         raw.finished)


class DeltaAccumulator:
    """One streamed request: turns the engine's per-step deltas into RequestOutputs in vLLM's delta form.

    The prompt's token ids (and prompt logprobs, when asked for) come in the engine's first delta; every item
    carries the prompt's ids, and ``cumulative_logprob`` sums the chosen tokens' logprobs so far.
    """

    def __init__(self, request_id: str, prompt: Optional[str], token_text: Callable[[int], Optional[str]]) -> None:
        self._request_id = request_id
        self._prompt = prompt
        self._token_text = token_text
        self._prompt_token_ids: List[int] = []
        self._cumulative: Optional[float] = None

    def add(self, raw: _core.RequestDelta) -> RequestOutput:
        if raw.error:  # the engine reports a failed request this way only through its online loop
            raise RuntimeError(f"request {self._request_id}: {raw.error}")
        if raw.prompt_token_ids:
            self._prompt_token_ids = list(raw.prompt_token_ids)
        logprobs = None
        if raw.logprobs is not None:
            logprobs = [_position(entries, self._token_text) for entries in raw.logprobs]
            self._cumulative = (self._cumulative or 0.0) + sum(entries[0][1] for entries in raw.logprobs)
        prompt_logprobs = None
        if raw.prompt_logprobs is not None:
            prompt_logprobs = [_position(e, self._token_text) if e else None for e in raw.prompt_logprobs]
        completion = CompletionOutput(index=0, text=raw.text, token_ids=list(raw.token_ids),
                                      cumulative_logprob=self._cumulative, logprobs=logprobs,
                                      finish_reason=raw.finish_reason or None)
        return RequestOutput(self._request_id, self._prompt, self._prompt_token_ids, prompt_logprobs, [completion],
                             raw.finished)
