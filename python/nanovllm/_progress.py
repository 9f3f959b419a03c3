"""generate()'s progress bar through tqdm, as nano-vLLM draws it: requests done, last prefill and decode tok/s."""
from __future__ import annotations

try:
    from tqdm.auto import tqdm
except ImportError:  # the engine draws its own bar then
    tqdm = None


class TqdmProgress:
    """Called by the engine after every step with (requests finished, is_prefill, tokens, seconds)."""

    def __init__(self, total: int) -> None:
        self._bar = tqdm(total=total, desc="Generating", dynamic_ncols=True)
        self._throughput = {"Prefill": 0, "Decode": 0}

    def __call__(self, finished: int, is_prefill: bool, num_tokens: int, seconds: float) -> None:
        if num_tokens > 0 and seconds > 0:
            self._throughput["Prefill" if is_prefill else "Decode"] = int(num_tokens / seconds)
            self._bar.set_postfix({name: f"{tps}tok/s" for name, tps in self._throughput.items()}, refresh=False)
        self._bar.update(finished)

    def close(self) -> None:
        self._bar.close()
