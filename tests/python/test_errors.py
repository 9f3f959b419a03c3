"""Errors: the engine's input errors are ValueError with its message, wrong keywords and types TypeError, and
a refused request leaves the LLM usable."""
import pytest

from conftest import ENGINE_KWARGS
from nanovllm import LLM, SamplingParams


def test_unknown_keyword_is_a_type_error_naming_it(model_dir):
    with pytest.raises(TypeError, match="'max_num_seq'"):
        LLM(model_dir, max_num_seq=4)
    with pytest.raises(TypeError, match="max_num_seqs"):
        LLM(model_dir, max_num_seqs="many")


@pytest.mark.parametrize("kwargs, message", [
    ({"kvcache_block_size": 3}, "kvcache_block_size"),
    ({"device": "tpu"}, "device must be one of auto, cpu, cuda"),
    ({"load_format": "pt"}, "load_format must be 'auto' or 'dummy'"),
    ({"kv_cache_dtype": "fp8_e5m2"}, "kv_cache_dtype must be auto, fp8 or fp8_e4m3"),
    ({"quantization": "awq"}, "quantization must be none or fp8, got 'awq'"),
])
def test_bad_setting_is_a_value_error(model_dir, kwargs, message):
    with pytest.raises(ValueError, match=message):
        LLM(model_dir, **{**ENGINE_KWARGS, **kwargs})


def test_missing_model_folder_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        LLM(tmp_path / "none", device="cpu")


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -1}, "temperature must be >= 0"),
    ({"top_p": 1.5}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"logprobs": 21}, "logprobs"),
])
def test_bad_sampling_params_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_sampling_params_of_the_wrong_type_are_type_errors():
    with pytest.raises(TypeError, match="max_tokens"):
        SamplingParams(max_tokens=1.5)
    with pytest.raises(TypeError, match="stop_token_ids"):
        SamplingParams(stop_token_ids=["x"])


def test_a_field_changed_after_construction_is_checked_by_generate(llm):
    params = SamplingParams()
    params.top_p = 0
    with pytest.raises(ValueError, match="top_p"):
        llm.generate([[1]], params, use_tqdm=False)


def test_refused_request_names_it_and_leaves_the_llm_usable(llm):
    good = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    expected = llm.generate([[1, 2, 3]], good, use_tqdm=False)[0]["token_ids"]
    with pytest.raises(ValueError, match=r"request 1: prompt token id 999999 at index 1 is outside the vocabulary"):
        llm.generate([[1, 2, 3], [1, 999999]], good, use_tqdm=False)
    with pytest.raises(ValueError, match="request 0: prompt is empty"):
        llm.generate([""], good, use_tqdm=False)
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([[5] * 600], good, use_tqdm=False)
    # Nothing of the refused calls is left in the engine: the same request gives the same tokens.
    outs = llm.generate([[1, 2, 3], [4]], good, use_tqdm=False)
    assert len(outs) == 2 and outs[0]["token_ids"] == expected


def test_wrong_argument_types(llm):
    with pytest.raises(ValueError, match="2 prompts but 1 sampling params"):
        llm.generate([[1], [2]], [SamplingParams()], use_tqdm=False)
    with pytest.raises(TypeError, match="SamplingParams"):
        llm.generate([[1]], {"temperature": 0}, use_tqdm=False)
    with pytest.raises(TypeError, match="prompt 1"):
        llm.generate(["a", 3.5], use_tqdm=False)
    with pytest.raises(TypeError, match="prompt_token_ids"):
        llm.generate([{"prompt_token_ids": "abc"}], use_tqdm=False)
    with pytest.raises(TypeError, match="no JSON form"):
        llm.chat([{"role": "user", "content": object()}], use_tqdm=False)


def test_tokenizer_errors(llm):
    with pytest.raises(ValueError, match="999999"):
        llm.get_tokenizer().decode([999999])


def test_model_without_tokenizer(model_dir, tmp_path):
    import shutil
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(f"{model_dir}/{name}", bare / name)
    with LLM(bare, **ENGINE_KWARGS) as llm:
        with pytest.raises(ValueError, match="tokenizer"):
            llm.get_tokenizer()
        with pytest.raises(ValueError, match="text prompt needs a tokenizer"):
            llm.generate(["hello"], use_tqdm=False)
        [out] = llm.generate([[1, 2]], SamplingParams(temperature=0, max_tokens=2, logprobs=1), use_tqdm=False)
        assert out["text"] == "" and len(out["token_ids"]) == 2
        assert all(lp.decoded_token is None for lp in out.outputs[0].logprobs[0].values())
