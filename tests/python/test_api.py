"""The API's shapes: LLM keywords, SamplingParams, prompt forms, outputs as dicts and as vLLM objects."""
import re
import subprocess
import sys

import pytest

import nanovllm
from conftest import ENGINE_KWARGS
from nanovllm import LLM, CompletionOutput, Logprob, RequestOutput, SamplingParams, _core
from conftest import ENGINE_KWARGS

GREEDY = SamplingParams(temperature=0, max_tokens=6)


def header_fields(path, struct):
    """Data members of `struct` in a C++ header: the engine's own list of settings."""
    body = re.search(r"struct " + struct + r" \{(.*?)\n\};", path.read_text(), re.S).group(1)
    names = []
    for line in body.splitlines():
        code = line.split("//")[0].strip()
        if code.endswith(";") and "(" not in code and not code.startswith("static"):
            names.append(re.match(r"(.+?)\s+(\w+)\s*(=.*)?;$", code).group(2))
    return names


def test_installed_package_is_imported(tmp_path):
    # From any directory, and not the source tree's copy.
    result = subprocess.run([sys.executable, "-c", "import nanovllm; print(nanovllm.__file__)"], cwd=tmp_path,
                            capture_output=True, text=True, check=True)
    assert "site-packages" in result.stdout
    assert nanovllm.__version__ == _core.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", nanovllm.__version__)


def test_sampling_params_defaults_are_nano_vllms():
    p = SamplingParams()
    assert (p.temperature, p.top_p, p.max_tokens, p.ignore_eos) == (1.0, 1.0, 64, False)
    assert (p.top_k, p.min_p, p.seed, p.min_tokens, p.logprobs, p.prompt_logprobs) == (-1, 0.0, None, 0, None, None)
    assert p.skip_special_tokens is True
    assert SamplingParams(0.6, 32, True) == SamplingParams(temperature=0.6, max_tokens=32, ignore_eos=True)


def test_sampling_params_has_every_engine_field(source_dir):
    engine = header_fields(source_dir / "include/nanovllm/sampling_params.h", "SamplingParams")
    assert set(engine) == set(_core.SamplingParams.fields)
    assert set(engine) == set(SamplingParams.__dataclass_fields__)


def test_llm_takes_every_engine_setting(source_dir):
    engine = header_fields(source_dir / "include/nanovllm/config.h", "EngineConfig")
    # model is positional, load_dummy_weights is vLLM's load_format, show_progress is generate's use_tqdm.
    assert set(engine) - {"model", "load_dummy_weights", "show_progress"} == set(_core.EngineConfig.fields)
    nano_vllm_config = {"max_num_batched_tokens", "max_num_seqs", "max_model_len", "gpu_memory_utilization",
                        "tensor_parallel_size", "enforce_eager", "kvcache_block_size", "num_kvcache_blocks"}
    assert nano_vllm_config <= set(_core.EngineConfig.fields)


def test_fp8_kv_cache_generates_what_it_is_asked(model_dir):
    with LLM(model_dir, kv_cache_dtype="fp8", **ENGINE_KWARGS) as llm:
        out = llm.generate([[1, 2, 3, 4]], GREEDY, use_tqdm=False)
    assert len(out[0]["token_ids"]) == GREEDY.max_tokens


def test_stop_takes_a_string_or_a_list():
    assert SamplingParams(stop="x")._to_core().stop == ["x"]
    assert SamplingParams(stop=["a", "b"])._to_core().stop == ["a", "b"]
    assert SamplingParams()._to_core().stop == []


def test_output_reads_as_dict_and_as_object(llm):
    tok = llm.get_tokenizer()
    [out] = llm.generate(["The sky was"], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
                         use_tqdm=False)
    assert isinstance(out, RequestOutput)
    completion = out.outputs[0]
    assert isinstance(completion, CompletionOutput)
    assert dict(out) == {"text": completion.text, "token_ids": completion.token_ids}
    assert out["text"] == completion.text and out["token_ids"] == completion.token_ids
    assert len(completion.token_ids) == 5 and completion.finish_reason == "length"
    assert out.prompt == "The sky was"
    assert out.prompt_token_ids == tok.encode("The sky was")
    assert completion.text == tok.decode(completion.token_ids, skip_special_tokens=True)
    assert out.prompt_logprobs is None and completion.logprobs is None and completion.cumulative_logprob is None
    assert out.finished
    with pytest.raises(KeyError):
        out["finish_reason"]


def test_prompt_forms_agree(llm):
    ids = llm.get_tokenizer().encode("Hello there")
    forms = ["Hello there", ids, {"prompt": "Hello there"}, {"prompt_token_ids": ids}]
    outs = llm.generate(forms, GREEDY, use_tqdm=False)
    assert len({tuple(o["token_ids"]) for o in outs}) == 1
    assert [o.prompt for o in outs] == ["Hello there", None, "Hello there", None]
    # One prompt alone, text or ids, gives one output.
    assert llm.generate("Hello there", GREEDY, use_tqdm=False)[0]["token_ids"] == outs[0]["token_ids"]
    assert llm.generate(ids, GREEDY, use_tqdm=False)[0]["token_ids"] == outs[0]["token_ids"]
    assert llm.generate([], GREEDY) == []


def test_one_sampling_params_per_prompt(llm):
    outs = llm.generate([[5, 6], [5, 6]], [SamplingParams(temperature=0, max_tokens=2, ignore_eos=True),
                                           SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)],
                        use_tqdm=False)
    assert [len(o["token_ids"]) for o in outs] == [2, 4]
    assert outs[0]["token_ids"] == outs[1]["token_ids"][:2]


def test_default_sampling_params_are_used(llm):
    [out] = llm.generate([[1, 2, 3]], SamplingParams(ignore_eos=True), use_tqdm=False)
    assert len(out["token_ids"]) == 64


def test_seeds_reproduce_and_differ(llm):
    def sample(seed):
        params = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True, seed=seed)
        return llm.generate([[11, 12, 13]], params, use_tqdm=False)[0]["token_ids"]
    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


def test_logprobs(llm):
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, logprobs=2, prompt_logprobs=1)
    [out] = llm.generate(["The sky was"], params, use_tqdm=False)
    completion = out.outputs[0]
    assert len(completion.logprobs) == 3
    for token, position in zip(completion.token_ids, completion.logprobs):
        assert next(iter(position)) == token  # the chosen token first
        assert 1 <= len(position) <= 3
        assert all(isinstance(lp, Logprob) and lp.logprob <= 0 for lp in position.values())
        assert position[token].rank == 1  # greedy: the chosen token is the most likely
        assert sorted(lp.rank for lp in position.values()) == [1, 2]
    assert completion.logprobs[0][completion.token_ids[0]].decoded_token == llm.get_tokenizer().decode(
        completion.token_ids[:1])
    assert completion.cumulative_logprob == pytest.approx(
        sum(p[t].logprob for t, p in zip(completion.token_ids, completion.logprobs)))
    assert len(out.prompt_logprobs) == len(out.prompt_token_ids)
    assert out.prompt_logprobs[0] is None
    for token, position in zip(out.prompt_token_ids[1:], out.prompt_logprobs[1:]):
        assert next(iter(position)) == token


def test_tokenizer(llm):
    tok = llm.get_tokenizer()
    ids = tok.encode("Hello world")
    assert tok.decode(ids) == "Hello world"
    assert tok.decode(ids[0]) == tok.decode(ids[:1])
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == tok.encode("<|im_end|>")[0]
    assert tok.vocab_size > max(ids)
    messages = [{"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(messages, add_generation_prompt=True) == tok.encode(text)  # HF: tokenize=True
    assert not tok.apply_chat_template(messages, tokenize=False).endswith("assistant\n")  # HF: no generation prompt
    no_thinking = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert no_thinking == text + "<think>\n\n</think>\n\n"
    assert tok.apply_chat_template([messages, messages], tokenize=False) == [
        tok.apply_chat_template(messages, tokenize=False)] * 2


def test_chat_renders_the_template(llm):
    tok = llm.get_tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    params = SamplingParams(temperature=0, max_tokens=4)
    [out] = llm.chat(messages, params, use_tqdm=False, tools=tools, chat_template_kwargs={"enable_thinking": False})
    prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                     enable_thinking=False)
    assert "get_time" in prompt
    assert out.prompt == prompt
    assert out["token_ids"] == llm.generate([prompt], params, use_tqdm=False)[0]["token_ids"]
    assert len(llm.chat([messages, messages[1:]], params, use_tqdm=False)) == 2


def test_progress_bar_is_tqdms(llm, capfd):
    llm.generate([[1, 2], [3, 4]], SamplingParams(temperature=0, max_tokens=3))
    err = capfd.readouterr().err
    assert "Generating" in err and "2/2" in err
    assert re.search(r"Prefill=\d+tok/s", err) and re.search(r"Decode=\d+tok/s", err)
    llm.generate([[1, 2]], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert capfd.readouterr().err == ""


NATIVE_BAR = """
import sys
sys.modules["tqdm"] = None  # as if tqdm were not installed
from nanovllm import LLM, SamplingParams
llm = LLM(sys.argv[1], device="cpu", max_model_len=512, cpu_kvcache_space_gib=0.25)
llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=3))
"""


def test_progress_bar_without_tqdm_is_the_engines(model_dir):
    import os
    import pty
    # The engine's bar draws only on a terminal: give the child one as stderr.
    main, child = pty.openpty()
    try:
        subprocess.run([sys.executable, "-c", NATIVE_BAR, model_dir], stderr=child, check=True, timeout=300)
    finally:
        os.close(child)
    err = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: the terminal's other side is closed and everything was read
            break
        if not chunk:
            break
        err += chunk
    os.close(main)
    assert re.search(rb"Generating \[#+\] 1/1 requests \[[0-9:]+<[0-9:?]+\], prefill \d+ tok/s, decode \d+ tok/s", err), err
    assert re.search(rb"1 requests in [0-9.]+ s: .* prefix-cache hit rate (n/a|[0-9.]+%), 0 preemptions", err), err


def test_quantization_fp8_quantises_at_load(model_dir, llm):
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    exact = llm.generate(["The sky was"], params, use_tqdm=False)[0]
    with LLM(model_dir, quantization="fp8", **ENGINE_KWARGS) as fp8:
        quantized = fp8.generate(["The sky was"], params, use_tqdm=False)[0]
    assert len(quantized.outputs[0].token_ids) == 8
    with LLM(model_dir, quantization=None, **ENGINE_KWARGS) as plain:
        assert plain.generate(["The sky was"], params, use_tqdm=False)[0].outputs[0].token_ids == \
            exact.outputs[0].token_ids
