"""The model's tokenizer as llm.get_tokenizer() returns it, with Hugging Face's method signatures."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Union

from nanovllm import _core

Conversation = List[Dict[str, Any]]


class Tokenizer:
    """tokenizer.json / tokenizer_config.json of the model folder, read by the engine (same ids as HF).

    It lives in the LLM's engine: after ``llm.close()`` its methods raise RuntimeError.
    """

    def __init__(self, engine: _core.Engine) -> None:
        self._engine = engine

    def encode(self, text: str) -> List[int]:
        """Token ids of ``text``, as HF's ``tokenizer(text)["input_ids"]`` (Qwen adds no BOS)."""
        return self._engine.encode(text)

    def decode(self, token_ids: Union[int, Iterable[int]], skip_special_tokens: bool = False) -> str:
        """Text of ``token_ids``; invalid UTF-8 becomes U+FFFD as in HF. ValueError for ids outside the vocabulary."""
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        return self._engine.decode(ids, skip_special_tokens)

    def apply_chat_template(self, conversation: Union[Conversation, List[Conversation]],
                            tools: Optional[List[Dict[str, Any]]] = None, add_generation_prompt: bool = False,
                            tokenize: bool = True, **kwargs: Any) -> Union[str, List[int], List[str], List[List[int]]]:
        """Renders messages through the model's chat template, as HF's method does.

        Args:
            conversation: a list of ``{"role": ..., "content": ...}`` messages, or a list of such lists.
            tools: tool (function) definitions for the template, in the order given.
            add_generation_prompt: end with the assistant's turn opening.
            tokenize: return token ids (HF's default) instead of the text.
            **kwargs: further template variables, e.g. ``enable_thinking=False`` for Qwen3.

        Returns:
            The text or the ids; a list of them for a list of conversations.
        """
        if conversation and isinstance(conversation[0], (list, tuple)):
            return [self.apply_chat_template(c, tools, add_generation_prompt, tokenize, **kwargs) for c in conversation]
        text = self._engine.apply_chat_template(conversation, tools, add_generation_prompt, kwargs)
        return self.encode(text) if tokenize else text

    @property
    def vocab_size(self) -> int:
        """Highest token id + 1, added tokens included."""
        return self._engine.vocab_size()

    @property
    def eos_token(self) -> Optional[str]:
        return self._engine.special_tokens()["eos_token"]

    @property
    def eos_token_id(self) -> Optional[int]:
        token = self.eos_token
        return None if token is None else self._engine.token_to_id(token)

    @property
    def bos_token(self) -> Optional[str]:
        return self._engine.special_tokens()["bos_token"]

    @property
    def pad_token(self) -> Optional[str]:
        return self._engine.special_tokens()["pad_token"]
