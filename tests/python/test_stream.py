"""LLM.stream: per-step deltas that add up to generate's outputs, arrive while the batch runs, and leave the LLM
usable however the stream ends."""
import os
import signal
import threading

import pytest

from conftest import ENGINE_KWARGS
from nanovllm import LLM, RequestOutput, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
PROMPTS = ["The sky was", "Once upon a time", [5, 6, 7, 8], "Hello"]


def collect(items):
    """Per request id: its items in order."""
    by_request = {}
    for item in items:
        by_request.setdefault(item.request_id, []).append(item)
    return by_request


def test_deltas_add_up_to_generate(llm):
    params = [GREEDY, SamplingParams(temperature=0.8, seed=3, max_tokens=9, logprobs=2),
              SamplingParams(temperature=0, max_tokens=30, stop=[" the"]), GREEDY]
    expected = llm.generate(PROMPTS, params, use_tqdm=False)
    by_request = collect(llm.stream(PROMPTS, params))
    assert sorted(by_request) == ["0", "1", "2", "3"]
    for i, want in enumerate(expected):
        items = by_request[str(i)]
        assert all(isinstance(item, RequestOutput) for item in items)
        assert [item.finished for item in items] == [False] * (len(items) - 1) + [True]
        assert "".join(item.outputs[0].text for item in items) == want.outputs[0].text
        assert [t for item in items for t in item.outputs[0].token_ids] == want.outputs[0].token_ids
        assert items[-1].outputs[0].finish_reason == want.outputs[0].finish_reason
        assert all(item.prompt_token_ids == want.prompt_token_ids for item in items)
        assert items[0].prompt == (PROMPTS[i] if isinstance(PROMPTS[i], str) else None)
    # Logprobs: one position per new token, and the running sum matches generate's.
    items = by_request["1"]
    assert all(len(item.outputs[0].logprobs) == len(item.outputs[0].token_ids) for item in items)
    assert items[-1].outputs[0].cumulative_logprob == pytest.approx(expected[1].outputs[0].cumulative_logprob)
    assert items[-1].outputs[0].logprobs[-1] == expected[1].outputs[0].logprobs[-1]


def test_items_arrive_while_the_batch_runs(llm):
    # Every request's first token comes before any request finishes: the items are per step, not per request.
    order = [(item.request_id, item.finished) for item in llm.stream(PROMPTS, GREEDY)]
    first_finish = next(i for i, (_, finished) in enumerate(order) if finished)
    assert {rid for rid, _ in order[:first_finish]} == {"0", "1", "2", "3"}
    assert len(order) > len(PROMPTS) * 2


def test_leaving_early_aborts_and_leaves_the_llm_usable(llm):
    expected = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    stream = llm.stream(PROMPTS, SamplingParams(temperature=0, max_tokens=400, ignore_eos=True))
    next(stream)
    with pytest.raises(RuntimeError, match="already running a call"):
        llm.generate(PROMPTS, GREEDY, use_tqdm=False)  # the open stream holds the engine
    with pytest.raises(RuntimeError, match="cannot close"):
        llm.close()
    stream.close()
    # Nothing of the abandoned requests is left: the same requests give the same tokens.
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)] == \
        [o.outputs[0].token_ids for o in expected]
    for item in llm.stream(PROMPTS, GREEDY):
        break  # a `for` loop left at once ends the stream as well
    assert len(llm.generate(["Hello"], GREEDY, use_tqdm=False)[0].outputs[0].token_ids) == 12


def test_refused_request_raises_before_anything_runs(llm):
    with pytest.raises(ValueError, match=r"request 1: prompt token id 999999 at index 1 is outside the vocabulary"):
        next(llm.stream([[1, 2, 3], [1, 999999]], GREEDY))
    with pytest.raises(ValueError, match="stream: 2 prompts but 1 sampling params"):
        llm.stream(["a", "b"], [GREEDY])  # argument errors come at the call
    assert list(llm.stream([], GREEDY)) == []
    assert len(llm.generate(["Hello"], GREEDY, use_tqdm=False)[0].outputs[0].token_ids) == 12


def test_ctrl_c_stops_the_stream_and_leaves_the_llm_usable(llm):
    long = SamplingParams(temperature=0, max_tokens=480, ignore_eos=True)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    seen = 0
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in llm.stream([[i + 1] * 8 for i in range(16)], long):
                seen += 1
    finally:
        timer.cancel()
    assert 0 < seen < 16 * 480
    assert len(llm.generate(["Hello"], GREEDY, use_tqdm=False)[0].outputs[0].token_ids) == 12


def test_stream_on_a_closed_llm(model_dir):
    llm = LLM(model_dir, **ENGINE_KWARGS)
    llm.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(llm.stream(["Hello"], GREEDY))
