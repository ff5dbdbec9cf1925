"""Observation → chat turn, reply → action.

The conversation is the model's own chat template: a system message with the rules (the env family's prompt,
`system_prompt_for`), the objective and first observation as the first user turn, then alternating assistant
(action) and user (game feedback) turns. Rollouts and SFT build token ids turn by turn with `ChatFormat`, so that
the ids the policy sampled are exactly the ids that are trained (no re-tokenisation of generated text), and both
use one token layout.

Introduced in notebooks/00_quickstart.md §2.
"""
from __future__ import annotations

from .envs import get_family
from .envs.textworld import SYSTEM_PROMPT  # noqa: F401 - re-exported: the notebook shows it; rollout's default


def system_prompt_for(family: str) -> str:
    """The system prompt of a game family ('textworld', 'alfworld', ...: EnvFamily.system_prompt, kept next to the
    verbs it cites in the family's module). SFT, rollouts and evaluation all use it, so a model is trained and
    evaluated with the same prompt. Raises UnknownFamilyError (a ValueError) naming the known families."""
    return get_family(family).system_prompt


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
