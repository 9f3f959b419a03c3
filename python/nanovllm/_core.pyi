"""Type stubs of the extension module nanovllm._core (python/src/module.cpp)."""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

__version__: str

class EngineConfig:
    """Engine settings (include/nanovllm/config.h)."""

    fields: Tuple[str, ...]  # the names LLM(**kwargs) accepts, besides load_format
    model: str
    device: str
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    gpu_memory_utilization: float
    tensor_parallel_size: int
    enforce_eager: bool
    kvcache_block_size: int
    num_kvcache_blocks: int
    cpu_kvcache_space_gib: float
    kv_cache_dtype: str
    enable_prefix_caching: bool
    step_policy: str  # "decode-first" | "prefill-first"
    load_dummy_weights: bool
    quantization: str  # "" | "none" | "fp8"
    seed: int
    show_progress: bool
    def __init__(self) -> None: ...
    def validate(self) -> None: ...

class SamplingParams:
    """Sampling controls (include/nanovllm/sampling_params.h); the public class is nanovllm.SamplingParams."""

    fields: Tuple[str, ...]
    MAX_LOGPROBS: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: Optional[int]
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stop_token_ids: List[int]
    stop: List[str]
    logprobs: Optional[int]
    prompt_logprobs: Optional[int]
    skip_special_tokens: bool
    def __init__(self) -> None: ...
    def validate(self) -> None: ...

class RequestOutput:
    """One finished request as the engine reports it; logprob positions are (token, logprob) pairs, chosen first."""

    request_id: int
    prompt_token_ids: List[int]
    token_ids: List[int]
    text: str
    finish_reason: str
    finished: bool
    logprobs: Optional[List[List[Tuple[int, float]]]]
    prompt_logprobs: Optional[List[List[Tuple[int, float]]]]  # the first position is empty

class RequestDelta:
    """What one engine step added to one request (the prompt's ids and logprobs in its first delta only)."""

    request_id: int
    prompt_token_ids: List[int]
    token_ids: List[int]
    text: str
    logprobs: Optional[List[List[Tuple[int, float]]]]
    prompt_logprobs: Optional[List[List[Tuple[int, float]]]]
    finished: bool
    finish_reason: str
    error: str

class StreamRun:
    """One stream() call; holds the engine until closed (or until next() returns an empty list)."""

    closed: bool
    def next(self) -> List[Tuple[int, RequestDelta]]: ...  # (prompt index, delta) pairs of the next step
    def token_text(self, token: int) -> Optional[str]: ...
    def close(self) -> None: ...

# Called after every engine step with (requests finished in it, is_prefill, tokens, seconds).
StepCallback = Callable[[int, bool, int, float], None]

class Engine:
    """The loaded engine. Every method raises RuntimeError after close()."""

    closed: bool
    def __init__(self, config: EngineConfig) -> None: ...
    def generate(self, prompts: Sequence[Union[str, List[int]]], params: Sequence[SamplingParams],
                 on_step: Optional[StepCallback] = None, native_progress: bool = False) -> List[RequestOutput]: ...
    def stream(self, prompts: Sequence[Union[str, List[int]]], params: Sequence[SamplingParams]) -> StreamRun: ...
    def has_tokenizer(self) -> bool: ...
    def encode(self, text: str) -> List[int]: ...
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool) -> str: ...
    def apply_chat_template(self, messages: Any, tools: Any, add_generation_prompt: bool,
                            template_variables: Optional[Dict[str, Any]]) -> str: ...
    def special_tokens(self) -> Dict[str, Optional[str]]: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    def token_text(self, token: int) -> Optional[str]: ...  # for logprobs; "" past the vocabulary
    def vocab_size(self) -> int: ...
    def backend_name(self) -> str: ...
    def close(self) -> None: ...
