"""LLM: nano-vLLM's entry point (and vLLM's offline one) on the C++ engine."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from nanovllm import _core, _progress
from nanovllm.outputs import DeltaAccumulator, RequestOutput, from_core
from nanovllm.sampling_params import SamplingParams
from nanovllm.tokenizer import Conversation, Tokenizer

# A prompt: text, token ids, or vLLM's {"prompt": text} / {"prompt_token_ids": ids}.
PromptType = Union[str, List[int], Dict[str, Any]]


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _one_prompt(prompt: Any, index: int) -> Union[str, List[int]]:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, dict):
        if set(prompt) == {"prompt"} and isinstance(prompt["prompt"], str):
            return prompt["prompt"]
        if set(prompt) == {"prompt_token_ids"} and _is_token_ids(prompt["prompt_token_ids"]):
            return list(prompt["prompt_token_ids"])
        raise TypeError(f"prompt {index}: a dict prompt holds exactly 'prompt' (str) or 'prompt_token_ids' (ints)")
    if _is_token_ids(prompt):
        return list(prompt)
    raise TypeError(f"prompt {index}: expected str, list of token ids or dict, got {type(prompt).__name__}")


def _prompt_list(prompts: Union[PromptType, Sequence[PromptType]]) -> List[Union[str, List[int]]]:
    """One prompt or a sequence of them -> a list of texts and token-id lists."""
    if isinstance(prompts, (str, dict)) or (_is_token_ids(prompts) and len(prompts) > 0):
        return [_one_prompt(prompts, 0)]
    if not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts: expected a prompt or a list of prompts, got {type(prompts).__name__}")
    return [_one_prompt(p, i) for i, p in enumerate(prompts)]


class LLM:
    """An engine on one model: ``LLM(model, **kwargs)`` as in nano-vLLM.

    Args:
        model: Hugging Face model folder (config.json, safetensors, tokenizer.json), or with
            ``load_format="dummy"`` a config.json alone (random weights).
        **kwargs: engine settings. nano-vLLM's Config names: ``max_num_batched_tokens``, ``max_num_seqs``,
            ``max_model_len``, ``gpu_memory_utilization``, ``tensor_parallel_size``, ``enforce_eager``,
            ``kvcache_block_size``, ``num_kvcache_blocks``; and ``device`` ("auto" | "cpu" | "cuda"; auto
            takes the GPU where this build has CUDA and one is visible), ``seed``, ``enable_prefix_caching``,
            ``async_scheduling`` (default True: a decode step whose successor is known launches it early),
            ``cpu_kvcache_space_gib``, ``kv_cache_dtype`` ("auto" | "fp8"), ``step_policy`` ("decode-first" |
            "prefill-first"), ``load_format`` ("auto" | "dummy"), ``quantization`` (None | "fp8": quantise the
            linear weights to block-scaled FP8 as they load; docs/fp8.md). Defaults: include/nanovllm/config.h.

    Raises:
        TypeError: an unknown keyword or a value of the wrong type.
        ValueError: a bad setting or model folder (the engine's message says which).

    The engine's memory and threads are freed by ``close()``, at the end of a ``with LLM(...) as llm:``
    block, or when the object goes away (``del llm``).
    """

    def __init__(self, model: Union[str, os.PathLike], **kwargs: Any) -> None:
        config = _core.EngineConfig()
        config.model = os.path.expanduser(os.fspath(model))
        config.show_progress = False  # generate's use_tqdm decides
        for name, value in kwargs.items():
            if name == "load_format":
                if value not in ("auto", "dummy"):
                    raise ValueError(f"load_format must be 'auto' or 'dummy', got {value!r}")
                config.load_dummy_weights = value == "dummy"
            elif name == "quantization" and value is None:
                config.quantization = ""  # vLLM's default: the checkpoint's own format
            elif name in _core.EngineConfig.fields:
                try:
                    setattr(config, name, value)
                except TypeError:
                    expected = type(getattr(config, name)).__name__
                    raise TypeError(f"LLM(): {name} must be {expected}, got {value!r}") from None
            else:
                raise TypeError(f"LLM() got an unexpected keyword argument '{name}'")
        self._engine = _core.Engine(config)
        self._tokenizer: Optional[Tokenizer] = None

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 use_tqdm: bool = True) -> List[RequestOutput]:
        """Runs all prompts to completion in one continuous batch.

        Args:
            prompts: texts, token-id lists or ``{"prompt": ...}`` / ``{"prompt_token_ids": ...}`` dicts (or one).
            sampling_params: one for all prompts, or one per prompt; None = ``SamplingParams()``.
            use_tqdm: show a progress bar on stderr (tqdm's when installed, else the engine's own).

        Returns:
            One RequestOutput per prompt, in input order.

        Raises:
            ValueError: a request the engine refuses (the message names its index and the problem); no
                request runs then.
            KeyboardInterrupt: Ctrl-C; generation stops after the current step, the requests in flight are
                aborted and the LLM stays usable.
        """
        prompt_list, core_params = _requests("generate", prompts, sampling_params)
        if not prompt_list:
            return []

        progress = _progress.TqdmProgress(len(prompt_list)) if use_tqdm and _progress.tqdm is not None else None
        try:
            raw = self._engine.generate(prompt_list, core_params, progress,
                                        native_progress=use_tqdm and progress is None)
        finally:
            if progress is not None:
                progress.close()
        token_text = _cached_token_text(self._engine.token_text)
        return [from_core(r, p if isinstance(p, str) else None, token_text) for r, p in zip(raw, prompt_list)]

    def stream(self, prompts: Union[PromptType, Sequence[PromptType]],
               sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None
               ) -> Iterator[RequestOutput]:
        """Runs the prompts in one continuous batch like generate, yielding what each step adds to each request.

        Each item is a RequestOutput in vLLM's delta form (``RequestOutputKind.DELTA``): ``outputs[0].text``,
        ``.token_ids`` and ``.logprobs`` hold what is new since that request's previous item (text only in whole
        UTF-8 characters, text a stop string could still claim held back), ``cumulative_logprob`` the sum so far;
        the request's last item has ``finished`` set and its ``finish_reason``. ``request_id`` is the prompt's
        index in ``prompts`` as a string. Concatenating a request's items gives what generate returns for it.

        The LLM runs nothing else while the stream is open. Leaving it early (``break``, an exception, closing
        the generator) aborts the requests that have not finished; Ctrl-C raises KeyboardInterrupt between two
        steps and does the same. Refused requests raise ValueError before anything runs, as in generate.

        Example::

            for out in llm.stream(["Hello", "The sky is"], SamplingParams(max_tokens=32)):
                print(out.request_id, out.outputs[0].text, end="", flush=True)
        """
        prompt_list, core_params = _requests("stream", prompts, sampling_params)
        return self._stream(prompt_list, core_params)

    def _stream(self, prompt_list: List[Union[str, List[int]]], core_params: List[Any]) -> Iterator[RequestOutput]:
        # A generator of its own, so that stream() checks its arguments when it is called, not at the first next().
        if not prompt_list:
            return
        run = self._engine.stream(prompt_list, core_params)
        try:
            token_text = _cached_token_text(run.token_text)
            requests = [DeltaAccumulator(str(i), p if isinstance(p, str) else None, token_text)
                        for i, p in enumerate(prompt_list)]
            while True:
                deltas = run.next()
                if not deltas:
                    return
                for index, delta in deltas:
                    yield requests[index].add(delta)
        finally:
            run.close()

    def chat(self, messages: Union[Conversation, Sequence[Conversation]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None, use_tqdm: bool = True,
             chat_template_kwargs: Optional[Dict[str, Any]] = None, add_generation_prompt: bool = True,
             tools: Optional[List[Dict[str, Any]]] = None) -> List[RequestOutput]:
        """Generates replies to conversations rendered through the model's chat template, as vLLM's chat.

        Args:
            messages: one conversation (a list of ``{"role", "content"}`` dicts) or a list of them.
            sampling_params: one for all, or one per conversation.
            chat_template_kwargs: template variables, e.g. ``{"enable_thinking": False}``.
            add_generation_prompt: end the prompt with the assistant's turn opening.
            tools: tool (function) definitions for the template.
        """
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        prompts = [self._engine.apply_chat_template(c, tools, add_generation_prompt, chat_template_kwargs)
                   for c in conversations]
        return self.generate(prompts, sampling_params, use_tqdm)

    def get_tokenizer(self) -> Tokenizer:
        """The model's tokenizer. ValueError if the model folder has none."""
        if self._tokenizer is None:
            if not self._engine.has_tokenizer():
                raise ValueError("the model folder has no tokenizer.json")
            self._tokenizer = Tokenizer(self._engine)
        return self._tokenizer

    @property
    def backend(self) -> str:
        """The backend the engine runs on, e.g. "cpu" or "cuda" (with the tensor-parallel layout)."""
        return self._engine.backend_name()

    def close(self) -> None:
        """Frees the engine (weights, KV cache, threads). Later calls raise RuntimeError; closing twice is fine."""
        self._engine.close()

    @property
    def closed(self) -> bool:
        return self._engine.closed

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _cached_token_text(token_text: Callable[[int], Optional[str]]) -> Callable[[int], Optional[str]]:
    """A token's text for logprobs (None without a tokenizer, "" past its vocabulary), asked once per id."""
    cache: Dict[int, Optional[str]] = {}

    def cached(token: int) -> Optional[str]:
        if token not in cache:
            cache[token] = token_text(token)
        return cache[token]
    return cached


def _requests(call: str, prompts: Union[PromptType, Sequence[PromptType]],
              sampling_params: Union[SamplingParams, Sequence[SamplingParams], None]
              ) -> Tuple[List[Union[str, List[int]]], List[Any]]:
    """The prompts as texts and token-id lists, and one engine SamplingParams per prompt."""
    prompt_list = _prompt_list(prompts)
    if sampling_params is None:
        sampling_params = SamplingParams()
    if isinstance(sampling_params, SamplingParams):
        params_list = [sampling_params] * len(prompt_list)
    else:
        params_list = list(sampling_params)
        if len(params_list) != len(prompt_list):
            raise ValueError(f"{call}: {len(prompt_list)} prompts but {len(params_list)} sampling params")
    for i, p in enumerate(params_list):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params[{i}]: expected SamplingParams, got {type(p).__name__}")
    core_params = {id(p): p._to_core() for p in params_list}
    return prompt_list, [core_params[id(p)] for p in params_list]
