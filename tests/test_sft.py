"""SFT on walkthroughs (agentrl_lib/sft.py): the expert examples and their loss mask."""


def test_sft_examples_show_the_inventory_and_admissible_commands_when_asked(tokenizer, cooking_games):
    from agentrl_lib.prompts import ChatFormat
    from agentrl_lib.sft import expert_examples

    chat = ChatFormat(tokenizer)
    plain = expert_examples(cooking_games, chat)
    shown = expert_examples(cooking_games, chat, show_admissible=True, show_inventory=True)
    text = tokenizer.decode(shown[0]["input_ids"])
    assert "Inventory:" in text and "Admissible commands:" in text
    assert "Inventory:" not in tokenizer.decode(plain[0]["input_ids"])
    # the loss mask still covers exactly the walkthrough's actions
    assert sum(shown[0]["assistant_masks"]) == sum(plain[0]["assistant_masks"])
