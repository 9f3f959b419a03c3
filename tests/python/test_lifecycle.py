"""The engine's life in a Python process: the GIL is released while it runs, Ctrl-C stops generate and leaves the
LLM usable, close() / `with` / `del` free its memory and threads, and a second LLM can follow."""
import ctypes
import gc
import os
import signal
import threading
import time

import pytest

from conftest import ENGINE_KWARGS
from nanovllm import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def test_ctrl_c_stops_generate_and_leaves_the_llm_usable(llm):
    expected = llm.generate([[7, 8, 9]], GREEDY, use_tqdm=False)[0]["token_ids"]
    # Far more work than the second before the interrupt: 16 sequences of 480 tokens.
    long = SamplingParams(temperature=0, max_tokens=480, ignore_eos=True)
    sent = []

    def interrupt():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(1.0, interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate([[i + 1] * 8 for i in range(16)], long, use_tqdm=False)
        stopped = time.monotonic()
    finally:
        timer.cancel()
    assert sent and stopped - sent[0] < 5.0  # within a step or two, not at the end of the run
    # The aborted requests are gone: the engine gives the same answer as before, for one request or many.
    assert llm.generate([[7, 8, 9]], GREEDY, use_tqdm=False)[0]["token_ids"] == expected
    outs = llm.generate([[7, 8, 9]] * 3, GREEDY, use_tqdm=False)
    assert [o["token_ids"] for o in outs] == [expected] * 3


def test_ctrl_c_with_the_progress_bar(llm):
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate([[3] * 8] * 8, SamplingParams(temperature=0, max_tokens=480, ignore_eos=True))
    finally:
        timer.cancel()
    assert len(llm.generate([[1, 2]], GREEDY, use_tqdm=False)[0]["token_ids"]) == 4


def test_gil_is_released_while_the_engine_runs(llm):
    # While generate runs in another thread this one can call in (and is told the LLM is busy): with the GIL held
    # through the steps it could only run after generate returned.
    tok = llm.get_tokenizer()
    worker = threading.Thread(target=llm.generate, args=([[5] * 8] * 4, SamplingParams(
        temperature=0, max_tokens=48, ignore_eos=True)), kwargs={"use_tqdm": False})
    worker.start()
    saw_busy = False
    while worker.is_alive() and not saw_busy:
        try:
            tok.encode("x")
        except RuntimeError as e:
            assert "already running a call" in str(e)
            saw_busy = True
    worker.join()
    assert saw_busy


def _threads():
    return len(os.listdir("/proc/self/task"))


def _resident_mib():
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap pages back, so that RSS shows what is in use
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_close_frees_memory_and_threads(model_dir):
    kwargs = {**ENGINE_KWARGS, "tensor_parallel_size": 2}  # a second rank: a thread of its own
    with LLM(model_dir, **kwargs) as llm:  # the first engine also starts the libraries' thread pools
        llm.generate([[1, 2]], GREEDY, use_tqdm=False)
    assert llm.closed
    with pytest.raises(RuntimeError, match="closed"):
        llm.generate([[1, 2]], GREEDY, use_tqdm=False)
    llm.close()  # twice is fine

    threads, resident = _threads(), _resident_mib()
    llm = LLM(model_dir, **kwargs)
    llm.generate([[1, 2]], GREEDY, use_tqdm=False)
    assert _threads() > threads
    loaded = _resident_mib()
    assert loaded > resident + 50  # the demo model's weights alone are ~80 MiB in fp32
    llm.close()
    assert _threads() == threads
    assert _resident_mib() < loaded - 50


def test_two_llms_in_a_row_and_del(model_dir):
    outputs = []
    for _ in range(2):
        llm = LLM(model_dir, **ENGINE_KWARGS)
        outputs.append(llm.generate(["Two in a row"], GREEDY, use_tqdm=False)[0]["token_ids"])
        loaded = _resident_mib()
        del llm
        gc.collect()
        assert _resident_mib() < loaded - 50  # the engine went with the object
    assert outputs[0] == outputs[1]
