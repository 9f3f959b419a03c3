"""nano-vLLM's Python API on nanovllm's C++ engine.

    from nanovllm import LLM, SamplingParams
    llm = LLM("/path/to/Qwen3-0.6B", enforce_eager=True)
    outputs = llm.generate(["Hello"], SamplingParams(temperature=0.6, max_tokens=64))
    print(outputs[0]["text"])          # nano-vLLM's dict form
    print(outputs[0].outputs[0].text)  # vLLM's object form
"""
from nanovllm._core import __version__
from nanovllm.llm import LLM
from nanovllm.outputs import CompletionOutput, Logprob, RequestOutput
from nanovllm.sampling_params import SamplingParams
from nanovllm.tokenizer import Tokenizer

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "Tokenizer", "__version__"]
