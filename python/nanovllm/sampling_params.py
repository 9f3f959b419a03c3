"""SamplingParams: nano-vLLM's defaults, plus every control the engine has, by vLLM's names."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import List, Optional, Union

from nanovllm import _core


@dataclass
class SamplingParams:
    """Per-request sampling controls.

    The first three are nano-vLLM's (same order and defaults: temperature 1.0, max_tokens 64, ignore_eos
    False); the rest are vLLM's names and defaults. ``temperature=0`` is greedy. Invalid values raise
    ValueError naming the field, here and again in ``generate`` (a field changed later is checked there).

    Attributes:
        temperature: 0 = greedy; higher flattens the distribution.
        max_tokens: generated tokens at most.
        ignore_eos: keep generating past the end-of-sequence token.
        top_p: nucleus sampling, in (0, 1].
        top_k: the k most likely tokens only; -1 (or 0) = all.
        min_p: drop tokens below min_p times the most likely one's probability, in [0, 1].
        seed: reproducible sampling for this request (else derived from the LLM's seed and the request).
        min_tokens: EOS and stop tokens are ignored before this many tokens.
        stop: stop strings (one or a list), cut from the text.
        stop_token_ids: tokens that end the request besides EOS.
        logprobs: k: the logprob of each generated token plus the top k (k <= 20).
        prompt_logprobs: k: the same for each prompt token (the first is None).
        skip_special_tokens: leave special tokens out of the text.
    """

    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: Optional[int] = None
    min_tokens: int = 0
    stop: Union[str, List[str], None] = None
    stop_token_ids: Optional[List[int]] = None
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        self._to_core()

    def _to_core(self) -> _core.SamplingParams:
        """The engine's SamplingParams, validated (ValueError names the bad field)."""
        core = _core.SamplingParams()
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "stop":
                value = [value] if isinstance(value, str) else list(value or [])
            elif field.name == "stop_token_ids":
                value = list(value or [])
            try:
                setattr(core, field.name, value)
            except TypeError:
                raise TypeError(f"SamplingParams.{field.name} must be {field.type}, got {value!r}") from None
        core.validate()
        return core
