"""The package and the `nanovllm` command give the same outputs for the same requests (both start from a fresh
engine with the same seed, so unseeded sampling agrees too)."""
import json
import subprocess

from conftest import CLI_FLAGS, ENGINE_KWARGS
from nanovllm import LLM, SamplingParams


def requests_for(llm):
    """Request lines for the command, and the same requests for generate(); stop tokens and strings are taken
    from a greedy run so that they are hit."""
    tok = llm.get_tokenizer()
    greedy = llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
                          use_tqdm=False)[0]
    stop_token = greedy["token_ids"][4]
    stop_text = tok.decode(greedy["token_ids"][6:8])
    messages = [{"role": "user", "content": "Tell me a story."}]
    chat_prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                          enable_thinking=False)
    lines = [
        ({"prompt": "The sky was", "temperature": 0, "max_tokens": 10}, "The sky was"),
        ({"prompt_token_ids": [9707, 11, 1879], "temperature": 0, "max_tokens": 5, "logprobs": 3,
          "prompt_logprobs": 2}, [9707, 11, 1879]),
        ({"prompt": "Hello", "temperature": 0.8, "top_k": 50, "seed": 42, "max_tokens": 12}, "Hello"),
        ({"prompt": "Hello", "temperature": 1.0, "top_p": 0.9, "min_p": 0.01, "max_tokens": 12}, "Hello"),
        ({"prompt": "Once upon a time", "temperature": 0, "max_tokens": 12, "stop_token_ids": [stop_token]},
         "Once upon a time"),
        ({"prompt": "Once upon a time", "temperature": 0, "max_tokens": 12, "stop": [stop_text]},
         "Once upon a time"),
        ({"prompt": "Hi", "temperature": 0, "max_tokens": 6, "min_tokens": 6, "ignore_eos": True,
          "skip_special_tokens": False}, "Hi"),
        ({"messages": messages, "enable_thinking": False, "temperature": 0, "max_tokens": 8}, chat_prompt),
    ]
    params = []
    for line, _ in lines:
        fields = {k: v for k, v in line.items() if k not in ("prompt", "prompt_token_ids", "messages",
                                                                 "enable_thinking")}
        params.append(SamplingParams(**fields))
    return [line for line, _ in lines], [prompt for _, prompt in lines], params


def logprob_pairs(positions):
    return [None if p is None else [[t, lp.logprob] for t, lp in p.items()] for p in positions]


def test_outputs_equal_the_commands(llm, model_dir, cli, tmp_path):
    lines, prompts, params = requests_for(llm)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    subprocess.run([cli, "generate", "--model", model_dir, *CLI_FLAGS, "--no-progress", "--input",
                    str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")], check=True)
    expected = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]

    with LLM(model_dir, **ENGINE_KWARGS) as fresh:
        outputs = fresh.generate(prompts, params, use_tqdm=False)
    assert len(outputs) == len(expected)
    for want, got in zip(expected, outputs):
        completion = got.outputs[0]
        assert "error" not in want
        assert got.prompt_token_ids == want["prompt_token_ids"]
        assert completion.token_ids == want["token_ids"]
        assert completion.text == want["text"]
        assert completion.finish_reason == want["finish_reason"]
        if "logprobs" in want:
            # The command lists each position's pairs as the engine gives them; a chosen token that is also in
            # the top k appears once in the dict.
            for want_pos, got_pos in zip(want["logprobs"], completion.logprobs):
                assert {t: lp for t, lp in want_pos} == {t: p.logprob for t, p in got_pos.items()}
                assert list(got_pos)[0] == want_pos[0][0]
        if "prompt_logprobs" in want:
            assert got.prompt_logprobs[0] is None and want["prompt_logprobs"][0] is None
            for want_pos, got_pos in zip(want["prompt_logprobs"][1:], got.prompt_logprobs[1:]):
                assert {t: lp for t, lp in want_pos} == {t: p.logprob for t, p in got_pos.items()}
    reasons = [o.outputs[0].finish_reason for o in outputs]
    assert reasons[4] == "stop" and reasons[5] == "stop"  # the stop token and the stop string were hit
