"""Prompt rendering shared by the local backends."""

from __future__ import annotations

from typing import Any

from harness.errors import BackendError


def chat_messages(prompt: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat turns of one request: an optional system message, then the user prompt."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


def render_prompt(tokenizer: Any, prompt: str, chat_template: bool, system: str | None = None) -> str:
    """The text a local engine sees: the chat template with a generation prompt (and the system
    message, if any), or the raw prompt followed by a newline (how the authors ran Llama 2
    without a template; a system message has no place there and is dropped)."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(chat_messages(prompt, system), tokenize=False,
                                                 add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - jinja2's TemplateError, raised by the template's own checks
            if type(e).__name__ != "TemplateError" or not system:
                raise
            raise BackendError(f"the model's chat template refused the prompt's system message ({e}); set "
                               f"model.system_message: in_user_turn (or drop) for a template without a system role, "
                               f"as Gemma 2's") from None
    return prompt + "\n"


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """Truncate ``text`` before the first stop string; report whether one was found."""
    cut = min((i for s in stop if (i := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
