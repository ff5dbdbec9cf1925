"""Observation → chat turn, reply → action.

The conversation is the model's own chat template: a system message with the rules (the env family's prompt,
`system_prompt_for`), the objective and first observation as the first user turn, then alternating assistant
(action) and user (game feedback) turns. Rollouts and SFT build token ids turn by turn with `ChatFormat`, so that
the ids the policy sampled are exactly the ids that are trained (no re-tokenisation of generated text), and both
use one token layout.

Introduced in notebooks/00_quickstart.md §2.
"""
from __future__ import annotations

import re

from .config import ACTION_FORMATS  # "plain" | "ragen" (EnvConfig.action_format)
from .envs import get_family
from .envs.base import ACTION_SEP  # "||": the actions of one answer (RAGEN's agent_proxy.action_sep; base.make_moves)
from .envs.textworld import SYSTEM_PROMPT  # noqa: F401 - re-exported: the notebook shows it; rollout's default


def ragen_format_instructions(max_actions_per_turn: int = 1) -> str:
    """The sentence the system prompt adds in RAGEN's format (RAGEN's env_instruction / format prompt)."""
    if max_actions_per_turn == 1:
        return ("Answer format: instead of the action alone, think briefly inside <think>...</think>, then give "
                "your action inside "
                "<answer>...</answer>, e.g. <think>...</think><answer>Up</answer>. Only the answer is acted on.")
    return (f"Answer format: instead of the action alone, think briefly inside <think>...</think>, then give up to "
            f"{max_actions_per_turn} actions "
            f"inside <answer>...</answer>, separated by {ACTION_SEP}, e.g. <think>...</think><answer>Right "
            f"{ACTION_SEP} Up</answer>. They are taken in order; actions past the first {max_actions_per_turn} are "
            "dropped.")


def system_prompt_for(family: str, action_format: str = "plain", max_actions_per_turn: int = 1) -> str:
    """The system prompt of a game family ('textworld', 'alfworld', ...: EnvFamily.system_prompt, kept next to the
    verbs it cites in the family's module), plus the answer format when it is RAGEN's (`ragen_format_instructions`).
    SFT, rollouts and evaluation all use it, so a model is trained and evaluated with the same prompt.
    Raises UnknownFamilyError (a ValueError) naming the known families; ValueError for an unknown action_format."""
    prompt = get_family(family).system_prompt
    if action_format == "ragen":
        return f"{prompt}\n{ragen_format_instructions(max_actions_per_turn)}"
    if action_format != "plain":
        raise ValueError(f"unknown action_format {action_format!r}; use one of {ACTION_FORMATS}")
    return prompt


def first_user_message(objective: str, obs: str, admissible: list[str] | None = None, inventory: str = "") -> str:
    """The first user turn: objective, then the first observation (and optional extras)."""
    text = f"Objective: {objective.strip()}\n\n{obs.strip()}" if objective else obs.strip()
    return _with_extras(text, admissible, inventory)


def feedback_message(obs: str, admissible: list[str] | None = None, inventory: str = "") -> str:
    """A later user turn: the game's answer to the last action (and optional extras)."""
    return _with_extras(obs.strip() or "(no answer)", admissible, inventory)


def _with_extras(text: str, admissible: list[str] | None, inventory: str) -> str:
    if inventory:
        text += f"\n\nInventory: {inventory}"
    if admissible:
        text += "\n\nAdmissible commands: " + ", ".join(admissible)
    return text


def parse_action(reply: str) -> str:
    """The action is the first non-empty line of the reply, stripped of quotes, a leading '>' and list markers.

    Returns '' when the reply holds no text: the env sends no command, answers that nothing was said and counts the
    turn as invalid (TextWorldEnv.step, EMPTY_REPLY); ALFWorld answers "Nothing happens." and counts it invalid too.
    """
    for line in reply.splitlines():
        line = line.strip().strip("`\"'").lstrip(">*-• ").strip()
        if line.lower().startswith(("action:", "command:")):
            line = line.split(":", 1)[1].strip()
        if line:
            return line
    return ""


_THINK_END = re.compile(r"</think>", re.I)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.I | re.S)


def parse_ragen_answer(reply: str, max_actions: int = 1) -> list[str] | None:
    """The actions of a reply in RAGEN's format, `<think>…</think><answer>a1 || a2</answer>`.

    The answer is the first `<answer>…</answer>` after the last `</think>` (the whole reply when there is no think
    block), so text inside the think block, "||" or a quoted `<answer>` included, is never acted on. Its content is
    split on ACTION_SEP; empty pieces are dropped; only the first `max_actions` are kept (RAGEN's ctx_manager
    `_parse_response` truncates the same way: the rest are dropped, not an error). The `<think>` block is optional.

    Source: RAGEN (Wang et al. 2025) ragen/llm_agent/ctx_manager.py `_parse_response`.
    Returns: the list of actions (stripped), or None when the reply has no complete <answer>…</answer> (an invalid
    turn: the env receives "" and flags it invalid, so reward.format_penalty applies). An empty answer gives [].
    Raises: ValueError when max_actions < 1.
    """
    if max_actions < 1:
        raise ValueError(f"max_actions must be >= 1 (got {max_actions})")
    ends = list(_THINK_END.finditer(reply))
    match = _ANSWER.search(reply, ends[-1].end() if ends else 0)
    if match is None:
        return None
    actions = [a.strip() for a in match.group(1).split(ACTION_SEP) if a.strip()]
    return actions[:max_actions]


def parse_reply(reply: str, action_format: str = "plain", max_actions_per_turn: int = 1) -> str:
    """The action string sent to the env for a reply: "plain" → `parse_action(reply)` (unchanged behaviour);
    "ragen" → the answer's actions (`parse_ragen_answer`) joined by " || ", or "" when the reply has no answer or an
    empty one (the env then flags the turn invalid). Raises ValueError for an unknown action_format."""
    if action_format == "plain":
        return parse_action(reply)
    if action_format != "ragen":
        raise ValueError(f"unknown action_format {action_format!r}; use one of {ACTION_FORMATS}")
    actions = parse_ragen_answer(reply, max_actions_per_turn)
    return f" {ACTION_SEP} ".join(actions or [])


def format_reply(action: str, action_format: str = "plain") -> str:
    """The assistant text of an expert action (SFT demonstrations): the action itself in the plain format;
    `<answer>action</answer>` in RAGEN's (no think text: the demonstrations teach the format and the move, and
    `parse_ragen_answer` does not require a think block)."""
    if action_format == "ragen":
        return f"<answer>{action}</answer>"
    if action_format != "plain":
        raise ValueError(f"unknown action_format {action_format!r}; use one of {ACTION_FORMATS}")
    return action


class ChatFormat:
    """Token-level view of the model's chat template, for building multi-turn sequences incrementally.

    - `prompt_ids(system, user)`: ids of [system, user] + the assistant header (generation prompt).
    - `user_turn_ids(user)`: ids that close an assistant turn and open the next one: whatever the template puts after
      the assistant's end token, the user turn, and the next assistant header.
    - `eos_id`: the end-of-turn token that ends each assistant reply (it is a policy token: loss mask 1).

    Built from `tokenizer.apply_chat_template` text, so any ChatML-like template works; `check()` verifies that
    concatenating the pieces reproduces the template's own tokenisation of a whole conversation.
    """

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.eos_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        marker = "\x00ACTION\x00"
        base = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": marker}]
        full = tokenizer.apply_chat_template(base + [{"role": "user", "content": "\x00USER\x00"}],
                                             tokenize=False, add_generation_prompt=True)
        after = full.split(marker, 1)[1]
        if not after.startswith(tokenizer.eos_token):
            raise ValueError("the chat template does not end assistant turns with the eos token; "
                             f"eos={tokenizer.eos_token!r}, text after the reply: {after[:40]!r}")
        self._between = after[len(tokenizer.eos_token):].split("\x00USER\x00")  # [before user text, after user text]

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, system: str, user: str) -> list[int]:
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self._ids(self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))

    def user_turn_ids(self, user: str) -> list[int]:
        return self._ids(self._between[0] + user + self._between[1])

    def action_ids(self, action: str) -> list[int]:
        """Ids of an assistant reply `action` followed by the eos token (used for expert turns in SFT)."""
        return self._ids(action) + [self.eos_id]

    def check(self, system: str, turns: list[tuple[str, str]]) -> bool:
        """True if prompt_ids + (action_ids + user_turn_ids)* equals the template's tokenisation of the conversation.

        `turns` = [(user_text, assistant_text), ...]; the conversation ends with an open assistant header.
        """
        ids = self.prompt_ids(system, turns[0][0])
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": turns[0][0]}]
        for i, (_, action) in enumerate(turns):
            ids += self.action_ids(action)
            msgs.append({"role": "assistant", "content": action})
            nxt = turns[i + 1][0] if i + 1 < len(turns) else "done"
            ids += self.user_turn_ids(nxt)
            msgs.append({"role": "user", "content": nxt})
        ref = self._ids(self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))
        return ids == ref
